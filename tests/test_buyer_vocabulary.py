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
