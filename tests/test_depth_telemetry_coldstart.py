"""Depth sweeps, server telemetry and cold start."""

from __future__ import annotations

import json
import os
import stat
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tokenbench import telemetry
from tokenbench.prometheus import parse
from tokenbench.cli import main
from tokenbench.engines.launch import free_port
from tokenbench.depth import Step, summarize_depth
from tokenbench.emitter import BackgroundEmitter
from tokenbench.levels import LevelSummary
from tokenbench.reader import load_result
from tokenbench.store import Store

DATA = Path(__file__).parent / "data"

# Written from vLLM's documented /metrics output (V1 engine): labels per engine, histograms with buckets.
VLLM_METRICS = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="Qwen/Qwen3.6-27B-FP8"} 16.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="Qwen/Qwen3.6-27B-FP8"} 3.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="Qwen/Qwen3.6-27B-FP8"} 0.42
# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="Qwen/Qwen3.6-27B-FP8"} 65536.0
# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="Qwen/Qwen3.6-27B-FP8"} 0.0
# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="Qwen/Qwen3.6-27B-FP8"} 1000.0
# HELP vllm:spec_decode_num_draft_tokens_total Number of draft tokens.
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="Qwen/Qwen3.6-27B-FP8"} 2000.0
# HELP vllm:spec_decode_num_accepted_tokens_total Number of accepted tokens.
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="Qwen/Qwen3.6-27B-FP8"} 1400.0
# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="Qwen/Qwen3.6-27B-FP8"} 32768.0
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.5",model_name="Qwen/Qwen3.6-27B-FP8"} 10.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="Qwen/Qwen3.6-27B-FP8"} 64.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="Qwen/Qwen3.6-27B-FP8"} 64.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="Qwen/Qwen3.6-27B-FP8"} 91.2
"""

# Written from llama.cpp's server README (--metrics).
LLAMACPP_METRICS = """\
# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 5120
# HELP llamacpp:tokens_predicted_total Number of generation tokens processed.
# TYPE llamacpp:tokens_predicted_total counter
llamacpp:tokens_predicted_total 1280
# HELP llamacpp:tokens_drafted_total Number of speculative decoding tokens processed.
# TYPE llamacpp:tokens_drafted_total counter
llamacpp:tokens_drafted_total 800
# HELP llamacpp:tokens_drafted_accepted_total Number of speculative decoding tokens to be accepted.
# TYPE llamacpp:tokens_drafted_accepted_total counter
llamacpp:tokens_drafted_accepted_total 600
# HELP llamacpp:kv_cache_usage_ratio KV-cache usage. 1 means 100 percent usage.
# TYPE llamacpp:kv_cache_usage_ratio gauge
llamacpp:kv_cache_usage_ratio 0.25
# HELP llamacpp:requests_processing Number of request processing.
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 1
# HELP llamacpp:requests_deferred Number of request deferred.
# TYPE llamacpp:requests_deferred gauge
llamacpp:requests_deferred 2
"""


def _bump(text: str, factor: float) -> str:
    """The same page later: every counter grown by ``factor``."""
    out = []
    for line in text.splitlines():
        if line.startswith("#") or "_total" not in line.split(" ")[0]:
            out.append(line)
            continue
        name, value = line.rsplit(" ", 1)
        out.append(f"{name} {float(value) * factor}")
    return "\n".join(out) + "\n"


def test_parse_vllm_metrics_sums_labels_and_drops_buckets() -> None:
    p = parse(VLLM_METRICS)
    assert p["vllm:num_requests_running"] == 16 and p["vllm:kv_cache_usage_perc"] == 0.42
    assert p["vllm:spec_decode_num_accepted_tokens_total"] == 1400
    assert not any(k.endswith("_bucket") for k in p) and p["vllm:time_to_first_token_seconds_count"] == 64


def test_vllm_level_summary_uses_deltas_not_lifetime_totals() -> None:
    s = telemetry.summarize([(0.0, parse(VLLM_METRICS)), (1.0, parse(_bump(VLLM_METRICS, 2)))])
    # over the level: 1000 more drafts, 2000 more draft tokens, 1400 more accepted
    assert s["spec_acceptance_rate"] == pytest.approx(0.7)
    assert s["spec_mean_acceptance_length"] == pytest.approx(2.4)
    assert s["kv_cache_usage_max"] == 0.42 and s["waiting_max"] == 3 and s["running_max"] == 16
    assert s["prefix_cache_hit_rate"] == 0.0
    assert s["counters"]["generation_tokens"] == 32768


def test_the_queue_time_is_vllms_own_count_over_the_level() -> None:
    """vLLM's request_queue_time_seconds histogram: its sum and count grow as requests finish, so their change over
    a level is the mean time its requests waited, whatever moments the waiting gauge was sampled at."""
    def page(total_s: float, n: int) -> str:
        return (VLLM_METRICS + "# TYPE vllm:request_queue_time_seconds histogram\n"
                f'vllm:request_queue_time_seconds_bucket{{le="0.1",model_name="m"}} {n}.0\n'
                f'vllm:request_queue_time_seconds_sum{{model_name="m"}} {total_s}\n'
                f'vllm:request_queue_time_seconds_count{{model_name="m"}} {n}.0\n')
    s = telemetry.summarize([(0.0, parse(page(4.0, 10))), (1.0, parse(page(5.5, 16)))])
    assert s["queue_time_mean_ms"] == pytest.approx(250.0)  # 1.5 s over the level's 6 finished requests
    assert "queue_time_mean_ms" not in telemetry.summarize([(0.0, parse(VLLM_METRICS))] * 2)


def test_llamacpp_metrics_summary() -> None:
    s = telemetry.summarize([(0.0, parse(LLAMACPP_METRICS)), (1.0, parse(_bump(LLAMACPP_METRICS, 3)))])
    assert s["spec_acceptance_rate"] == pytest.approx(0.75)
    assert "spec_mean_acceptance_length" not in s  # llama.cpp does not count drafts
    assert s["kv_cache_usage_max"] == 0.25 and s["waiting_max"] == 2 and s["running_max"] == 1
    assert s["counters"]["prompt_tokens"] == 10240


def test_sweep_samples_metrics_into_the_store(emitter: BackgroundEmitter, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    emitter.configure(itl_s=0.01)
    db = tmp_path / "t.db"
    assert main(["sweep", "--url", emitter.url, "--input-len", "8", "--output-len", "30", "--requests", "6",
                 "--concurrency", "2", "--quiet", "--guard", "off", "--db", str(db)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "speculative acceptance 0.67 (mean acceptance length 3.00)" in out
    # a level shorter than the 5 s between samples: both found the emitter idle, and its peak is not said as 0%
    assert "peak KV cache not seen (no /metrics sample of 2 caught a request running" in out, out
    store = Store(db)
    (run,) = store.runs()
    ((_, _, _, s),) = store.levels(run.id)
    assert s.telemetry is not None and s.telemetry.available is True and (s.telemetry.samples or 0) >= 2
    assert (s.telemetry.counters or {})["generation_tokens"] == 6 * 30
    series = store.telemetry(run.id)
    assert len(series) >= 2 and "vllm:generation_tokens_total" in series[-1][3]
    assert s.telemetry.gpu_power == "not available" and s.telemetry.extra == {}  # every key written is typed


def test_server_without_metrics_says_so(emitter: BackgroundEmitter, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    emitter.configure(metrics=False)
    db = tmp_path / "t.db"
    assert main(["sweep", "--url", emitter.url, "--input-len", "8", "--output-len", "4", "--requests", "2",
                 "--quiet", "--guard", "off", "--db", str(db)]) == 0
    capsys.readouterr()
    ((_, _, _, s),) = Store(db).levels(Store(db).runs()[0].id)
    assert s.telemetry is not None
    said = s.telemetry.to_dict()
    # where power is read depends on this machine's sources: the note says why there is no figure
    assert isinstance(said.pop("power_note"), str) and said == {
        "available": False, "note": "the server exposes no Prometheus /metrics", "gpu_power": "not available"}


# --- depth -----------------------------------------------------------------------------------------------

def test_depth_summary_flags_a_cold_context_and_disagreeing_timings() -> None:
    warm = [Step(fill_s=2.0, pp_s=0.1, pp_tokens=512, tg_s=1.0, tg_tokens=127) for _ in range(3)]
    lp, lt = summarize_depth(8192, 512, 128, warm)
    assert lp.pp_tps == pytest.approx(5120) and lp.pp_tps_sd == 0 and lt.tg_tps == pytest.approx(127)
    assert "context_not_warm" not in lp.flags
    cold = [Step(fill_s=2.0, pp_s=1.9, pp_tokens=512, tg_s=1.0, tg_tokens=127, server_pp_tps=9000.0)]
    lp, _ = summarize_depth(8192, 512, 128, cold)
    assert "context_not_warm" in lp.flags and "did not keep it warm" in lp.warnings[0]
    assert "timings_disagree" in lp.flags
    # the server's own count of the context it took from its cache decides where it says it: a warm step at 0.51
    # of the fill's time (attention-bound at 4 x pp) was called cold, and one that re-read the context is
    said_warm = [Step(fill_s=0.215, pp_s=0.110, pp_tokens=512, tg_s=1.0, tg_tokens=127, cached_tokens=2048)]
    assert "context_not_warm" not in summarize_depth(2048, 512, 128, said_warm)[0].flags
    said_cold = [Step(fill_s=2.0, pp_s=0.1, pp_tokens=512, tg_s=1.0, tg_tokens=127, cached_tokens=0)]
    lp, _ = summarize_depth(8192, 512, 128, said_cold)
    assert "context_not_warm" in lp.flags and "took 0 of the 8,192-token context from its cache" in lp.warnings[0]
    # mean ± sample standard deviation, as llama-bench reports
    lp, _ = summarize_depth(0, 100, 10, [Step(None, 0.1, 100, 1, 9), Step(None, 0.2, 100, 1, 9)])
    assert lp.pp_tps == pytest.approx(750) and lp.pp_tps_sd == pytest.approx(353.553, rel=1e-4)
    # ... and the rate over the repetitions as a Distribution, as every measured quantity
    assert lp.pp_tps_dist is not None and (lp.pp_tps_dist.n, lp.pp_tps_dist.min, lp.pp_tps_dist.max) == (2, 500, 1000)
    assert lp.pp_tps_dist.std == pytest.approx(250) and lp.tg_tps_dist is None  # population std; pp level only
    assert LevelSummary.from_dict(lp.to_dict()).pp_tps_dist == lp.pp_tps_dist


def test_llama_bench_binary_is_driven_and_imported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # No llama-bench is installed here: a stand-in that checks its arguments and prints llama-bench's JSON.
    fake = tmp_path / "llama-bench"
    fake.write_text(f"#!{sys.executable}\nimport sys\nargs = sys.argv[1:]\n"
                    "assert args[args.index('-d') + 1] == '0,32768' and args[args.index('-o') + 1] == 'json', args\n"
                    "assert args[args.index('-t') + 1] == '3' and args[args.index('-fa') + 1] == '1', args\n"
                    "assert args[args.index('-ub') + 1] == '256' and args[args.index('-ctk') + 1] == 'q8_0', args\n"
                    f"print(open({str(DATA / 'llama_bench.json')!r}).read())\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    out = tmp_path / "d.json"
    assert main(["depth", "--llama-bench", str(fake), "--model-file", "gpt-oss-20b-Q4_K_M.gguf", "--depths", "0,32k",
                 "-t", "3", "-fa", "1", "-ub", "256", "-ctk", "q8_0",
                 "--json", str(out), "--db", str(tmp_path / "d.db")]) == 0
    text = capsys.readouterr().out
    assert "tg128 @ d32768" in text and "56.90 ± 0.30" in text
    doc = json.loads(out.read_text())
    assert " ".join(text.split()).endswith(f"run {doc['run_id']} (complete) saved in {tmp_path / 'd.db'}")
    assert [(lv["test"], lv["depth"]) for lv in doc["levels"]] == [("pp512", 0), ("tg128", 0), ("tg128", 32768)]
    # the options are recorded and llama-bench's own JSON is kept whole
    lb = doc["manifest"]["llama_bench"]
    assert lb["options"] == ["-t", "3", "-fa", "1", "-ub", "256", "-ctk", "q8_0"]
    assert json.loads(lb["raw"]) == json.loads((DATA / "llama_bench.json").read_text())


# --- cold start ------------------------------------------------------------------------------------------


def test_coldstart_times_real_boots(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    port = free_port()
    out = tmp_path / "c.json"
    # the emitter ignores unknown options after --: a secret on the server's command line must not be stored
    assert main(["coldstart", "--cmd", f"{sys.executable} -m tokenbench.emitter --port {{port}} --api-key sk-srv",
                 "--url", f"http://127.0.0.1:{port}/v1", "--repeat", "2", "--json", str(out),
                 "--db", str(tmp_path / "c.db")]) == 0
    text = capsys.readouterr().out
    assert "1 (cold)" in text and "first boot" in text
    doc = json.loads(out.read_text())
    boots = doc["manifest"]["boots"]
    assert len(boots) == 2
    # the one result contract (as sweep --json): the document show --json writes of the same run
    assert doc["tool"] == "tokenbench" and doc["kind"] == "coldstart" and doc["status"] == "complete"
    assert doc["levels"] == [] and doc["version"] and doc["manifest"]["endpoint"].endswith("/v1")
    assert main(["show", doc["run_id"], "--db", str(tmp_path / "c.db"), "--json", str(tmp_path / "s.json")]) == 0
    assert json.loads((tmp_path / "s.json").read_text()) == doc
    assert "sk-srv" not in out.read_text() and "--api-key ***" in doc["manifest"]["server_command"]
    # the command as stored runs again: --cmd's words kept together, quoted (they were stored bare)
    import shlex
    said = shlex.split(doc["manifest"]["command"])
    assert said[said.index("--cmd") + 1].endswith("--port {port} --api-key ***")
    assert doc["manifest"]["label"]  # the hostname, as --help says (it was none)
    assert all(b"sk-srv" not in f.read_bytes() for f in tmp_path.glob("c.db*"))
    for b in boots:
        assert 0 < b["healthy_s"] <= b["first_token_s"] < 60 and b["model"] == "emitter"


def test_coldstart_of_a_server_that_dies(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    port = free_port()
    code = main(["coldstart", "--cmd", f"{sys.executable} -c 'raise SystemExit(3)'", "--url",
                 f"http://127.0.0.1:{port}/v1", "--repeat", "1", "--db", str(tmp_path / "c.db")])
    err = capsys.readouterr().err
    # the endpoint cannot be used: exit 3, as the exit-code table (README, --help) has it for a server that died
    assert code == 3 and "exited with code 3 before it was healthy" in err and len(err.strip().splitlines()) == 1
    assert "--log FILE keeps its output" in err
    assert os.environ.get("TOKENBENCH_DB")  # the autouse fixture kept the user's database out of it


@pytest.mark.parametrize("log", [False, True])
def test_a_server_that_dies_says_why_in_the_error(log: bool, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """A llama-server given a model file that is not there said why on its output, and coldstart answered "see
    the server's output (--log FILE)", which it had not kept: the boot had to be run again to read it. The
    server's last lines are in the error, and the log file's name where --log kept it."""
    port, kept = free_port(), tmp_path / "server.log"
    said = "import sys; print('llama_model_load: error loading model: /nonexistent.gguf'); sys.exit(1)"
    code = main(["coldstart", "--cmd", f'{sys.executable} -c "{said}"', "--url", f"http://127.0.0.1:{port}/v1",
                 "--repeat", "1", "--db", str(tmp_path / "c.db"), *(["--log", str(kept)] if log else [])])
    err = capsys.readouterr().err
    assert code == 3 and "exited with code 1" in err
    assert err.strip().splitlines()[-1] == "llama_model_load: error loading model: /nonexistent.gguf"
    if log:
        assert f"its output: {kept}" in err and "error loading model" in kept.read_text()
    else:
        assert "--log FILE keeps its output" in err


def test_coldstart_checks_its_arguments_before_it_starts_a_server(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """A mistake in coldstart's arguments is told in one line before any server starts: found after, it cost a
    boot and left the server's exit code to read (a {port} with no port to put there started the server with an
    empty --port)."""
    port = free_port()
    marker = tmp_path / "started"
    server = f"sh -c 'touch {marker}' {{port}}"  # a server that leaves a mark when it is started
    url = f"http://127.0.0.1:{port}/v1"
    bad = {
        "--url": ["--cmd", server, "--url", "http://127.0.0.1:{port}/v1"],
        "{port}": ["--cmd", server, "--url", "http://127.0.0.1/v1"],
        "--cmd": ["--cmd", "serve 'unclosed", "--url", url],
        "no program": ["--cmd", f"{tmp_path / 'nosuch'} --port {{port}}", "--url", url],
        "--health": ["--cmd", server, "--url", url, "--health", "localhost-health"],
        "--model": ["--cmd", server, "--url", url, "--model", " "],
        # a path found unwritable after every boot had run and the run was stored: exit 70
        "--json": ["--cmd", server, "--url", url, "--json", str(tmp_path / "nosuch" / "c.json")],
        "--log": ["--cmd", server, "--url", url, "--log", str(tmp_path)],
    }
    for what, args in bad.items():
        code = main(["coldstart", *args, "--repeat", "1", "--timeout", "2s", "--db", str(tmp_path / "c.db")])
        err = capsys.readouterr().err
        assert code == 2 and len(err.strip().splitlines()) == 1 and "internal error" not in err, (what, err)
        assert what.split()[-1] in err, (what, err)  # the line names what to change
        assert not marker.exists(), what


def test_coldstart_of_a_model_the_server_does_not_serve(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--model is held to what the server lists once it is up, as a sweep's is: exit 3 naming what it serves."""
    port = free_port()
    code = main(["coldstart", "--cmd", f"{sys.executable} -m tokenbench.emitter --port {{port}}", "--url",
                 f"http://127.0.0.1:{port}/v1", "--model", "no-such-model", "--repeat", "1",
                 "--db", str(tmp_path / "c.db")])
    err = capsys.readouterr().err
    assert code == 3 and len(err.strip().splitlines()) == 1, err
    assert "'no-such-model' is not served" in err and "served: emitter" in err and "--model" in err


def test_the_boot_summary_gives_a_range_only_where_the_later_boots_differ() -> None:
    from tokenbench.coldstart import boot_summary

    def boots(*healthy: float) -> list[dict[str, float]]:
        return [{"n": k + 1, "healthy_s": h} for k, h in enumerate(healthy)]

    assert boot_summary(boots(0.5)) is None  # nothing later to set against the first
    for later in ([0.191], [0.191, 0.192], [0.19, 0.31], [0.2, 0.2, 0.2], [0.25, 0.4, 0.3]):
        line = boot_summary(boots(1.0, *later)) or ""
        shown = sorted({f"{v:.2f}" for v in later})
        assert line.startswith("first boot 1.00 s to healthy; ")
        assert ("later boot " if len(later) == 1 else "later boots ") in line
        assert (f"{shown[0]}..{shown[-1]} s" if len(shown) > 1 else f" {shown[0]} s") in line and \
            (".." in line) == (len(shown) > 1), line
        assert line.endswith("(cached weights and compiled kernels)")
    # later boots no faster than the first: no reason given for a gain there was not
    assert boot_summary(boots(0.06, 0.07, 0.89)) == "first boot 0.06 s to healthy; later boots 0.07..0.89 s"


def test_show_of_a_coldstart_prints_what_coldstart_printed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The engine the boots ran and the first boot against the later ones, as coldstart said them."""
    port = free_port()
    db = str(tmp_path / "c.db")
    assert main(["coldstart", "--cmd", f"{sys.executable} -m tokenbench.emitter --port {{port}}",
                 "--url", f"http://127.0.0.1:{port}/v1", "--repeat", "2", "--db", db, "--json", str(tmp_path / "c.json")]) == 0
    ran = capsys.readouterr().out.splitlines()
    run_id = json.loads((tmp_path / "c.json").read_text())["run_id"]
    assert main(["show", run_id, "--db", db]) == 0
    shown = capsys.readouterr().out.splitlines()
    assert ran[:-1] == shown[:-1] and run_id in ran[-1] and run_id in shown[-1]  # all but where the run is
    # the closing line as sweep's: its status, and where it is saved (coldstart's said "(coldstart) saved")
    assert ran[-1] == f"run {run_id} (complete) saved in {db}", ran[-1]
    assert shown[-1] == f"run {run_id} (complete) from {db}", shown[-1]
    assert ran[0].startswith("model emitter; engine ") and "engine unknown" not in ran[0]
    assert any(line.startswith("first boot ") for line in shown)
    doc = Store(tmp_path / "c.db").resolve(run_id).manifest
    assert doc["engine"] and ran[0] == f"model emitter; engine {doc['engine']} {doc['engine_version']}"


def test_a_later_boot_that_fails_keeps_the_boots_before_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A failure on a later boot (or a Ctrl-C) lost every boot that had finished: no run was stored, no table."""
    port, mark = free_port(), tmp_path / "booted"
    once = f"if [ -e {mark} ]; then exit 3; fi; touch {mark}; exec {sys.executable} -m tokenbench.emitter --port {{port}}"
    db = tmp_path / "c.db"
    code = main(["coldstart", "--cmd", f"sh -c '{once}'", "--url", f"http://127.0.0.1:{port}/v1", "--repeat", "3",
                 "--db", str(db)])
    out = capsys.readouterr()
    assert code == 3 and "boot 2: " in out.err and "1 (cold)" in out.out
    [run] = Store(db).runs()
    res = load_result(Store(db), run.id)
    assert res.status == "failed" and len(res.manifest.boots or []) == 1


def test_a_ctrl_c_between_boots_keeps_those_finished(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    import tokenbench.coldstart as cs

    port = free_port()
    real = cs.boot

    def boot_then_interrupt(n: int, *args: Any, **kwargs: Any) -> Any:
        if n == 2:
            raise KeyboardInterrupt
        return real(n, *args, **kwargs)

    monkeypatch.setattr(cs, "boot", boot_then_interrupt)
    db = tmp_path / "c.db"
    code = main(["coldstart", "--cmd", f"{sys.executable} -m tokenbench.emitter --port {{port}}", "--url",
                 f"http://127.0.0.1:{port}/v1", "--repeat", "3", "--db", str(db)])
    out = capsys.readouterr()
    assert code == 130 and "interrupted after 1 of 3 boots: the run keeps them" in out.err and "1 (cold)" in out.out
    [run] = Store(db).runs()
    res = load_result(Store(db), run.id)
    assert res.status == "interrupted" and len(res.manifest.boots or []) == 1


@pytest.mark.engine
def test_coldstart_of_a_real_llama_server_that_asks_for_a_key(model_cache: Path, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """llama-server --api-key answers 401 to a health probe without the key: coldstart sent none, waited out its
    whole --timeout (600 s by default) and said "not healthy"; its advice, "pass --api-key", named an option it
    refused. It sends the key (--api-key or $OPENAI_API_KEY), and a refusal is said at once."""
    import shlex

    from conftest import need_engine
    from tokenbench.engines import launch, tiny

    need_engine("llama-server")
    monkeypatch.setenv("TOKENBENCH_CACHE", str(model_cache))
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    port = free_port()
    argv = launch.command("llama-server", tiny.ensure(), port, extra=("--api-key", "sk-srv-key")).argv
    argv[argv.index("--port") + 1] = "{port}"
    cmd = shlex.join(argv)
    base = ["coldstart", "--cmd", cmd, "--url", f"http://127.0.0.1:{port}/v1", "--health",
            "http://127.0.0.1:{port}/v1/models", "--repeat", "1", "--timeout", "120s", "--db", str(tmp_path / "c.db")]
    t0 = time.monotonic()
    assert main(base) == 3
    err = " ".join(capsys.readouterr().err.split())
    assert "asks for an API key (HTTP 401): pass --api-key or set OPENAI_API_KEY" in err and time.monotonic() - t0 < 60
    assert main([*base, "--api-key", "sk-wrong"]) == 3
    assert "refused the API key given (HTTP 401)" in capsys.readouterr().err
    monkeypatch.setenv("OPENAI_API_KEY", "sk-srv-key")
    out = tmp_path / "c.json"
    assert main([*base, "--json", str(out)]) == 0
    (b,) = json.loads(out.read_text())["manifest"]["boots"]
    assert 0 < b["healthy_s"] <= b["first_token_s"] < 120 and b["error"] is None, b
    assert all(b"sk-srv-key" not in f.read_bytes() for f in tmp_path.glob("c.*"))
