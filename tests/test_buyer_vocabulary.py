"""One vocabulary across predict, recommend, cost and the SLO grammar: durations with their unit, objectives that can
be met, box ids through one alias table, cost options that apply, and defaults that agree between commands."""

from __future__ import annotations

import pytest

from tokenbench.cli import main
from tokenbench.draws import DrawError, parse
from tokenbench.slo import SLO, parse_duration_ms


def _refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


# --- durations -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("text", ["2", "50", "5000", "-3"])
def test_a_duration_without_its_unit_is_refused_everywhere(text: str) -> None:
    """``--slo ttft_p99=2`` was 2 ms, ``--think-time 5000`` 5,000 s: one rule now, a bare number is refused."""
    with pytest.raises(ValueError, match=f"'{text}' has no unit"):
        parse_duration_ms(text)
    with pytest.raises(ValueError, match="has no unit"):
        SLO.parse(f"ttft_p99={text}")
    with pytest.raises(DrawError, match="--think-time: '.*' has no unit"):
        parse(text, "--think-time", "s")
    assert parse_duration_ms("0") == 0 and parse("0", "--think-time", "s").value == 0  # 0 is 0 in any unit
    assert parse("uniform:1s-5s", "--think-time", "s").high == 5


def test_a_bare_latency_is_refused_by_recommend_and_predict(capsys: pytest.CaptureFixture[str]) -> None:
    err = _refused(["recommend", "--model", "llama-3.1-8b", "--ttft-p99", "50"], capsys)
    assert "'50' has no unit: write 50ms or 50s" in err
    err = _refused(["predict", "--hardware", "h100", "--model", "llama-3.1-8b", "--sessions", "--think-time", "5000"],
                   capsys)
    assert "--think-time: '5000' has no unit" in err


# --- objectives ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("text, says", [
    ("ttft_p99=-2s", "a limit must be above 0"),
    ("ttft_p99=0s", "a limit must be above 0"),
    ("tpot=0ms", "a limit must be above 0"),
    ("", "no objective given"),
    (" , ", "no objective given"),
    ("ttft_p99=2s,ttft_p99=1s", "ttft_p99 is given twice"),
])
def test_an_impossible_slo_is_refused(text: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        SLO.parse(text)


def test_a_session_objective_needs_sessions() -> None:
    slo = SLO.parse("ttft_p99=2s,session_p90=5m")
    with pytest.raises(ValueError, match="session_p90 is an agent session's time: add --sessions"):
        slo.check_workload(sessions=False)
    slo.check_workload(sessions=True)
    SLO.parse("ttft_p99=2s").check_workload(sessions=False)


@pytest.mark.parametrize("slo, says", [("ttft_p99=-2s", "above 0"), ("ttft_p99=0s", "above 0"), ("", "no objective"),
                                       ("ttft_p99=2s,ttft_p99=1s", "given twice")])
def test_capacity_refuses_an_impossible_slo_in_one_line(slo: str, says: str,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    assert says in _refused(["capacity", "--url", "http://127.0.0.1:9/v1", "--slo", slo], capsys)


# --- cost options --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("argv, says", [
    (["--price-per-hour", "2", "--hours-per-day", "8"], "--hours-per-day does not apply: a rented box"),
    (["--price-per-hour", "2", "--watts", "100", "--kwh-price", "0.3"], "--watts, --kwh-price do not apply"),
    (["--owned", "--purchase", "2500", "--watts", "100", "--price-per-hour", "2"],
     "--price-per-hour does not apply: --owned prices the box by its purchase"),
    (["--owned", "--purchase", "2500", "--watts", "100", "--busy-hours", "8"], "--busy-hours does not apply"),
    (["--owned", "--purchase", "2500"], "--owned needs --watts: the box's draw under this load"),
])
def test_cost_refuses_what_does_not_apply(argv: list[str], says: str, capsys: pytest.CaptureFixture[str]) -> None:
    """cost ignored --hours-per-day when renting and the rent with --owned, and priced an owned box without --watts
    at "0 W at 0 EUR/kWh"."""
    assert says in _refused(["cost", "--tps", "100", *argv], capsys)


def test_an_owned_box_says_the_electricity_price_it_takes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cost", "--tps", "54", "--owned", "--purchase", "2500", "--watts", "120", "--currency", "EUR"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "120 W at 0.3 EUR/kWh" in out and "(the default --kwh-price, 0.3 EUR/kWh)" in out
    assert main(["cost", "--tps", "54", "--owned", "--purchase", "2500", "--watts", "120", "--kwh-price", "0.25"]) == 0
    assert "default --kwh-price" not in capsys.readouterr().out


# --- defaults that agree ---------------------------------------------------------------------------------------

def test_fit_predict_and_recommend_take_one_engine_per_box(capsys: pytest.CaptureFixture[str]) -> None:
    """predict defaulted the Strix Halo to vLLM ROCm (every figure UNCALIBRATED) and fit to llama.cpp."""
    from tokenbench.predict.setup import usual_setup
    from tokenbench.predict.specs import Catalog

    strix = Catalog.load().find_hardware("strix-halo")
    assert usual_setup(strix)[0] == "llama.cpp vulkan"
    for argv in (["fit", "--hardware", "strix-halo", "--model", "qwen3.6-35b-a3b"],
                 ["predict", "--hardware", "strix-halo", "--model", "qwen3.6-35b-a3b"]):
        assert main(argv) == 0
        out = capsys.readouterr().out
        assert "engine: llama.cpp vulkan, the usual one on amd-ryzen-ai-max-395" in out and "UNCALIBRATED" not in out
    assert main(["predict", "--hardware", "h100", "--model", "qwen3.6-35b-a3b", "--engine", "vllm"]) == 0
    assert "the usual one" not in capsys.readouterr().out  # said only where it chose


def test_predict_sessions_takes_sweep_sessions_defaults() -> None:
    """predict --sessions said it predicts what sweep --sessions measures, with other defaults (no shared prefix,
    1,024-token tasks, 512-token tool results, 256-token answers against 512, 128, 64-192 and 128)."""
    import argparse

    from tokenbench.cli.grammar.workloads import add_workload_options
    from tokenbench.predict import session as ps
    from tokenbench.workload import resolve_shape

    sweep = argparse.ArgumentParser()
    add_workload_options(sweep)
    a = sweep.parse_args(["--sessions", "4"])
    task, answer = resolve_shape(None, None, None)  # a sweep's request when no length is given
    shape = ps.SessionShape()
    assert (shape.turns, shape.shared_prefix, shape.task, shape.output) == (a.turns, a.shared_prefix, task, answer)
    assert shape.tool_len == parse(a.tool_len, "--tool-len") and shape.think_time == parse(a.think_time, "x", "s")


def test_capacity_refuses_a_session_objective_without_sessions(capsys: pytest.CaptureFixture[str]) -> None:
    """session_p90 without --sessions was accepted, and every level then failed it with no session to time."""
    err = _refused(["capacity", "--url", "http://127.0.0.1:9/v1", "--input-len", "64", "--output-len", "8", "--slo",
                    "ttft_p99=2s,session_p90=5m"], capsys)
    assert "--slo: session_p90 is an agent session's time: add --sessions, or drop it" in err


@pytest.mark.parametrize("option", [["--price", "h100=-1"], ["--price", "h100=nan"], ["--price", "h100=inf"],
                                    ["--owned", "strix-halo=2500:0:120"], ["--owned", "strix-halo=nan:3:120"],
                                    ["--owned", "strix-halo=2500:3:-5"], ["--owned", "strix-halo=2500:3"]])
def test_a_price_no_box_has_is_refused(option: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    err = _refused(["recommend", "--model", "qwen3.6-35b-a3b", *option], capsys)
    assert f"{option[0]} {option[1]}: write ID=" in err


def test_recommend_refuses_a_number_of_sessions(capsys: pytest.CaptureFixture[str]) -> None:
    """predict's --sessions N (sessions in all) was taken by recommend and ignored: --agents is its team."""
    assert "recommend's team is --agents N; write --sessions alone" in _refused(
        ["recommend", "--model", "llama-3.1-8b", "--sessions", "32", "--agents", "16", "--ttft-p99", "10s"], capsys)
