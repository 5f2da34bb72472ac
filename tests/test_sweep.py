"""Sweeps end to end against the emitter: what is stored, what fails and how."""

from __future__ import annotations

import statistics

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tokenbench.distribution import Tally
from tokenbench.emitter import BackgroundEmitter, EmitterProcess
from tokenbench.errors import EndpointError, LevelFailed
from tokenbench.servers import normalize_base_url
from tokenbench.store import Store
from tokenbench.sweep import SweepConfig, run_sweep
from tokenbench.kinds.lengths import LengthsKind
from tokenbench.reader import load_result


def sweep(url: str, store: Store, **kw: object) -> object:
    kw.setdefault("guard", "off")  # the guard has its own tests; here it would only add its sampling time
    kind = LengthsKind.fixed(kw.pop("input_len", 24), kw.pop("output_len", 6), prefix_len=kw.pop("prefix_len", 0))  # type: ignore[arg-type]
    cfg = SweepConfig(url=url, workload=kind, **kw)  # type: ignore[arg-type]
    return asyncio.run(run_sweep(cfg, store))


def test_sweep_stores_runs_levels_and_raw_requests(emitter: BackgroundEmitter, tmp_path: Path) -> None:
    emitter.configure(ttft_s=0.02, itl_s=0.002)
    store = Store(tmp_path / "r.db")
    res = sweep(emitter.url, store, concurrency=[1, 3], requests=6, warmup=2, label="box-a", seed=7)
    assert res.status == "complete"  # type: ignore[attr-defined]
    levels = store.levels(res.run_id)  # type: ignore[attr-defined]
    assert [lv[3].concurrency for lv in levels] == [1, 3]
    for _, _, status, s in levels:
        assert status == "complete" and s.completed == 6 and s.failed == 0
        assert s.output_tokens_mean == 6 and s.input_tokens_mean == 24
    recs = store.requests(res.run_id)  # type: ignore[attr-defined]
    assert len([r for r in recs if r.phase == "measured"]) == 12
    assert len([r for r in recs if r.phase == "warmup"]) == 4
    # Raw timestamps are kept: TTFT can be recomputed from them.
    assert all(r.first_token_ns and r.first_token_ns > r.sent_ns for r in recs)
    # Every prompt differs (no prefix cache can serve one), and has exactly 24 tokens for the server.
    prompts = [b["prompt"] for b in emitter.emitter.requests_seen]
    assert len(set(prompts)) == len(prompts)
    assert all(len(p.split()) == 24 for p in prompts[1:])
    m = store.resolve("box-a").manifest
    assert m["engine"] == "vllm" and m["seed"] == 7 and m["workload"]["input_len"] == 24
    assert m["machine"]["cpu_count_logical"] >= 1 and m["tokenizer"].startswith("server")
    assert m["request_fields"] == {"ignore_eos": True, "min_tokens": 6}


def test_two_runs_never_share_a_prompt(emitter: BackgroundEmitter, tmp_path: Path) -> None:
    store = Store(tmp_path / "r.db")
    sweep(emitter.url, store, concurrency=[1], requests=3, warmup=0, seed=1)
    first = {b["prompt"] for b in emitter.emitter.requests_seen[1:]}
    emitter.emitter.requests_seen.clear()
    sweep(emitter.url, store, concurrency=[1], requests=3, warmup=0, seed=1)
    second = {b["prompt"] for b in emitter.emitter.requests_seen[1:]}
    assert first and not first & second


def test_shared_prefix_when_asked(emitter: BackgroundEmitter, tmp_path: Path) -> None:
    sweep(emitter.url, Store(tmp_path / "r.db"), concurrency=[1], requests=3, warmup=0, prefix_len=10)
    prompts = [b["prompt"].split() for b in emitter.emitter.requests_seen[1:]]
    assert all(p[:10] == prompts[0][:10] for p in prompts) and len({" ".join(p) for p in prompts}) == 3


def test_rate_levels_record_schedule(emitter: BackgroundEmitter, tmp_path: Path) -> None:
    store = Store(tmp_path / "r.db")
    res = sweep(emitter.url, store, rates=[20.0], arrival="constant", requests=10, warmup=0)
    (o,) = res.outcomes  # type: ignore[attr-defined]
    assert o.summary.rate == 20.0 and o.summary.completed == 10
    recs = [r for r in store.requests(res.run_id) if r.phase == "measured"]  # type: ignore[attr-defined]
    sched = sorted(r.scheduled_ns for r in recs if r.scheduled_ns is not None)
    gaps = [(b - a) / 1e6 for a, b in zip(sched, sched[1:])]
    assert gaps == pytest.approx([50.0] * 9, abs=0.01)
    assert o.summary.send_delay_ms is not None and o.summary.send_delay_ms.n == 10


def test_duration_levels(emitter: BackgroundEmitter, tmp_path: Path) -> None:
    emitter.configure(itl_s=0.01)
    res = sweep(emitter.url, Store(tmp_path / "r.db"), concurrency=[2], requests=None, duration_s=0.6, warmup=0)
    s = res.outcomes[0].summary  # type: ignore[attr-defined]
    # each request takes ~60 ms: about 10 per slot in 0.6 s
    assert 8 <= s.completed <= 30
    # both: the level ends at whichever comes first (the docs and --help say so)
    few = sweep(emitter.url, Store(tmp_path / "r.db"), concurrency=[2], requests=4, duration_s=30, warmup=0)
    assert few.outcomes[0].summary.completed == 4 and few.outcomes[0].summary.duration_s < 5
    short = sweep(emitter.url, Store(tmp_path / "r.db"), concurrency=[2], requests=10_000, duration_s=0.6, warmup=0)
    assert 8 <= short.outcomes[0].summary.completed <= 30


def test_repetitions_report_median_and_cv(emitter: BackgroundEmitter, tmp_path: Path) -> None:
    store = Store(tmp_path / "r.db")
    res = sweep(emitter.url, store, concurrency=[2], requests=4, warmup=0, repetitions=3)
    (o,) = res.outcomes  # type: ignore[attr-defined]
    assert len(o.repetitions) == 3
    rep = res.to_json()["levels"][0]["repetitions"]  # type: ignore[attr-defined]
    assert rep["n"] == 3 and len(rep["output_throughput_tps"]["values"]) == 3
    assert rep["output_throughput_tps"]["cv"] is not None
    dist = rep["output_throughput_tps"]["distribution"]  # as every measured quantity
    assert dist["n"] == 3 and dist["min"] <= rep["output_throughput_tps"]["median"] <= dist["max"]
    assert len(store.levels(res.run_id)) == 3  # type: ignore[attr-defined]


def test_repetitions_keep_the_cost_at_the_median_throughput(emitter: BackgroundEmitter, tmp_path: Path) -> None:
    """A priced run with --repetitions above 1 dropped its cost altogether."""
    from tokenbench.pricing import cost_per_mtok
    from tokenbench.reader import load_result

    store = Store(tmp_path / "r.db")
    res = sweep(emitter.url, store, concurrency=[2], requests=4, warmup=0, repetitions=3, price_per_hour=2.0)
    for r in (res, load_result(store, res.run_id)):  # type: ignore[attr-defined]
        (o,) = r.outcomes
        tps = statistics.median(x.output_throughput_tps for x in o.repetitions)
        assert o.summary.output_throughput_tps == tps
        # priced at the rate the table shows: the median over the repetitions' plateaus where each held its load
        held = [x.plateau.output_throughput_tps for x in o.repetitions if x.plateau is not None]
        sustained = statistics.median(held) if len(held) == 3 else tps
        assert o.summary.sustained_tps == pytest.approx(sustained)
        assert o.summary.cost_per_mtok == pytest.approx(cost_per_mtok(2.0, sustained))


def test_failed_requests_counted_and_shown(emitter: BackgroundEmitter, tmp_path: Path) -> None:
    emitter.configure(fault="http500", fault_from=3)  # preflight + 2 requests pass
    res = sweep(emitter.url, Store(tmp_path / "r.db"), concurrency=[1], requests=6, warmup=0)
    s = res.outcomes[0].summary  # type: ignore[attr-defined]
    assert s.completed == 2 and s.failed == 4 and s.errors == {"http_500": 4}
    # 4 of 6 failed is above --max-error-rate (10%): the level is kept, marked failed, and so is the run
    assert res.outcomes[0].status == "failed" and "error_rate" in s.flags  # type: ignore[attr-defined]
    assert res.status == "failed" and "1 of 1 levels failed" in (res.error or "")  # type: ignore[attr-defined]


def test_unreachable_endpoint_one_line_error(tmp_path: Path) -> None:
    with pytest.raises(EndpointError, match=r"cannot reach .*is the server running\? check --url"):
        sweep("http://127.0.0.1:9/v1", Store(tmp_path / "r.db"))


def test_wrong_model_lists_served_models(emitter: BackgroundEmitter, tmp_path: Path) -> None:
    with pytest.raises(EndpointError, match="model 'nope' is not served .* served: emitter"):
        sweep(emitter.url, Store(tmp_path / "r.db"), model="nope")


def test_server_refusing_the_request_is_explained(emitter: BackgroundEmitter, tmp_path: Path) -> None:
    emitter.configure(fault="http500")
    with pytest.raises(EndpointError, match="first request failed"):
        sweep(emitter.url, Store(tmp_path / "r.db"))


def test_truncated_prompts_fail_the_level_and_keep_it(emitter: BackgroundEmitter, tmp_path: Path) -> None:
    emitter.configure(fault="truncate", truncate_to=8, fault_from=1)
    store = Store(tmp_path / "r.db")
    with pytest.raises(LevelFailed, match="truncates the prompt"):
        sweep(emitter.url, store, concurrency=[1, 2], requests=3, warmup=0, input_len=64)
    (run,) = store.runs()
    assert run.status == "failed" and "truncates" in (run.error or "")
    ((_, _, status, s),) = store.levels(run.id)
    assert status == "failed" and "prompt_truncated" in s.flags


def test_server_dying_mid_level_keeps_finished_levels(tmp_path: Path) -> None:
    with EmitterProcess("--exit-after", "6") as em:  # preflight + 5 requests, then it dies
        store = Store(tmp_path / "r.db")
        with pytest.raises(EndpointError, match=r"stopped answering during the level \(concurrency 2\)"):
            sweep(em.url, store, concurrency=[1, 2, 4], requests=4, warmup=0, stall_timeout_s=2)
        (run,) = store.runs()
        assert run.status == "partial"
        res = load_result(store, run.id)
        assert [o.summary.completed for o in res.outcomes] == [4, 1]
        assert res.outcomes[1].summary.failed == 3
        # a send retried on a fresh connection that could not open was never written: its first attempt's write
        # stamp read as a negative wait (send_queue_ms)
        assert all(r.written_ns is None or r.written_ns >= r.sent_ns for r in store.requests(run.id)), \
            [(r.sent_ns, r.written_ns, r.connection_retries) for r in store.requests(run.id)]
        assert res.outcomes[1].summary.send_queue_ms is None or res.outcomes[1].summary.send_queue_ms.min >= 0


@pytest.mark.engine
@pytest.mark.parametrize("workers", [1, 2])
def test_a_server_killed_mid_level_keeps_the_level_its_tokenizer_was_building(
        workers: int, model_cache: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A level held for a duration builds its prompts as it goes, with the server's own /tokenize where no
    --tokenizer is given. A llama-server killed mid-level ended the run with no level at all, the requests the
    level had measured lost. Sending stops, the level is kept, marked failed, and the error says why it stopped;
    so too where worker processes send (--workers 2), whom the run tops up with prompts as they go."""
    import threading

    from conftest import need_engine
    from tokenbench.engines import launch, tiny

    need_engine("llama-server")
    monkeypatch.setenv("TOKENBENCH_CACHE", str(model_cache))
    # a server of its own, not a shared one (conftest.py): this one is killed
    with launch.start("llama-server", tiny.ensure(), parallel=2) as server:
        store = Store(tmp_path / "r.db")
        threading.Timer(3.0, server.proc.kill).start()
        # which notices first is a race: the tokenizer asked for the next prompts, or the sends refused where
        # the prompts at hand (the workers' stock) outlast the server; either way the error says the server went
        with pytest.raises(EndpointError, match=r"the level \(concurrency 2\) stopped sending: the server's tokenizer|"
                                                r"the server stopped answering during the level \(concurrency 2\)"):
            sweep(server.base_url, store, concurrency=[2, 4], requests=None, duration_s=60, warmup=0,
                  stall_timeout_s=2, workers=workers)
    (run,) = store.runs()
    ((_, _, status, level),) = store.levels(run.id)
    assert status == "failed" and level.completed > 8 and level.duration_s < 10, level  # it stopped with its server


def test_a_closed_loop_stops_sending_to_a_server_gone(model_cache: Path, tmp_path: Path) -> None:
    """A server gone mid-level refuses each send at once: a closed loop with its prompts at hand (a local
    tokenizer) sent thousands a second until its duration ended (4,848 refused in 5 s). It stops after a run of
    refusals, the level kept and failed, and the run says the server stopped answering."""
    from tokenbench.engines import tiny

    tok = str(tiny.ensure(model_cache).hf_dir)
    # the check request and 5 of the level, then it dies; no usage: the emitter counts a prompt's words, which the
    # tiny tokenizer's tokens outnumber where it splits a word (24 sent read as 21 counted: "truncated")
    with EmitterProcess("--exit-after", "6", "--no-usage") as em:
        store = Store(tmp_path / "r.db")
        with pytest.raises(EndpointError, match=r"stopped answering during the level \(concurrency 2\)"):
            sweep(em.url, store, concurrency=[2], requests=None, duration_s=60, warmup=0, tokenizer=tok,
                  stall_timeout_s=2)
    (run,) = store.runs()
    ((_, _, status, level),) = store.levels(run.id)
    assert status == "failed" and level.completed >= 4 and 1 <= level.failed <= 20, level
    assert level.duration_s < 10


def test_a_level_whose_server_went_is_failed_under_its_error_threshold(model_cache: Path, tmp_path: Path) -> None:
    """A server gone after most of a level was served leaves fewer failed requests than --max-error-rate allows
    (here 2 of 402): the level was stored complete though the run then stopped because its server stopped
    answering, and the run's status came from it. The level is failed, in the database and in the run."""
    from tokenbench.engines import tiny

    tok = str(tiny.ensure(model_cache).hf_dir)
    with EmitterProcess("--exit-after", "401", "--no-usage") as em:
        store = Store(tmp_path / "r.db")
        with pytest.raises(EndpointError, match=r"stopped answering during the level \(concurrency 2\)"):
            sweep(em.url, store, concurrency=[2, 4], requests=None, duration_s=60, warmup=0, tokenizer=tok,
                  stall_timeout_s=2)
    (run,) = store.runs()
    ((_, _, status, level),) = store.levels(run.id)
    assert 0 < level.failed < 0.1 * (level.completed + level.failed), level  # under the threshold
    assert status == "failed" and run.status == "failed", (status, run.status)


def test_ctrl_c_keeps_what_was_measured(tmp_path: Path) -> None:
    """Also: the run printed is this sweep's, not the newest in the database (another sweep sharing the
    database, here one dated later, used to be printed as "the finished levels")."""
    from tokenbench.levels import ServingLevel

    db = tmp_path / "r.db"
    Store(db).save_run("other-run", "sweep", "other", {"model": "m"}, "measured",
                       [ServingLevel(concurrency=9, output_throughput_tps=1.0)], "0", "2099-01-01T00:00:00",
                       "2099-01-01T00:00:01")
    with EmitterProcess("--itl", "0.05") as em:
        url = em.url
        cli = subprocess.Popen(
            [sys.executable, "-m", "tokenbench", "sweep", "--url", url, "--input-len", "8", "--output-len", "4",
             "--concurrency", "1,2", "--requests", "200", "--warmup", "0", "--db", str(db), "--quiet"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=dict(os.environ, PYTHONUNBUFFERED="1"),
            # a shell's background job ignores SIGINT, and its children inherit that: give Ctrl-C back to the CLI
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        # wait until the emitter has served some requests, then Ctrl-C
        import json
        import urllib.request

        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with urllib.request.urlopen(em.root + "/stats") as r:
                if len(json.load(r)["stamps"]) >= 8:
                    break
            time.sleep(0.1)
        cli.send_signal(signal.SIGINT)
        out, err = cli.communicate(timeout=30)
        assert cli.returncode == 130, err.decode()
        assert b"interrupted" in err
        store = Store(db)
        (run,) = [r for r in store.runs() if r.id != "other-run"]
        assert run.status == "interrupted"
        levels = store.levels(run.id)
        assert levels and levels[0][2] == "interrupted" and levels[0][3].completed > 5
        assert b"Concurrency" in out  # the measured part is printed
        assert run.id.encode() in out and b"other-run" not in out


def test_normalize_base_url() -> None:
    assert normalize_base_url("127.0.0.1:8000") == "http://127.0.0.1:8000/v1"
    assert normalize_base_url("http://h:8000/v1/") == "http://h:8000/v1"
    assert normalize_base_url("http://h/v1/chat/completions") == "http://h/v1"


def test_no_collection_of_the_whole_heap_stops_a_timed_phase(emitter: BackgroundEmitter, tmp_path: Path) -> None:
    """A collection of Python's oldest generation walks every object the process holds and stops the event loop
    meanwhile (0.4-1.1 s measured in the test suite's own process; a CI run against vLLM read +245 ms TTFT and
    -14% decode from one). While a sweep times requests, what the process held before is frozen out of the
    collector (loadgen.still_heap); when the run ends the caller's heap is collected as before, and a stop that
    still happens is named."""
    import gc

    from tokenbench import loadgen
    from tokenbench.loadgen import LOOP_STALL_MS, ClientWatch, still_heap
    from tokenbench.offered_load import Level
    from tokenbench.progress import QuietReporter

    held = [[i] for i in range(50_000)]  # a caller's long-lived objects
    frozen_at_each_request: list[int] = []

    class Watching(QuietReporter):
        def request_done(self, record: object) -> None:
            frozen_at_each_request.append(gc.get_freeze_count())

    emitter.configure(ttft_s=0.005, itl_s=0.001)
    cfg = SweepConfig(url=emitter.url, workload=LengthsKind.fixed(8, 4), concurrency=[2], requests=6, guard="off")
    asyncio.run(run_sweep(cfg, Store(tmp_path / "r.db"), Watching()))
    assert len(frozen_at_each_request) == 6 and min(frozen_at_each_request) >= len(held)
    assert gc.get_freeze_count() == 0
    with still_heap():
        with still_heap():  # nested: only the outermost exit unfreezes
            pass
        assert gc.get_freeze_count() >= len(held)
    assert gc.get_freeze_count() == 0
    loadgen.freeze_heap()  # a load worker's process: frozen for good, its phases' exits included
    try:
        with still_heap():
            pass
        assert gc.get_freeze_count() >= len(held)
    finally:
        loadgen._frozen_depth -= 1  # this process is the test's: give it its collector back
        gc.unfreeze()
    watch = ClientWatch(lags_ms=Tally(0.01, [0.5] * 200 + [LOOP_STALL_MS * 3]))  # p99 fine, one long stop
    assert watch.verdict(Level(concurrency=2), None)[0].startswith("the event loop stopped once for 300 ms")
    assert ClientWatch(lags_ms=Tally(0.01, [0.5] * 200 + [LOOP_STALL_MS / 2])).verdict(Level(concurrency=2), None) == []


def test_a_loop_stop_says_whether_the_process_was_busy_or_not_given_a_core() -> None:
    """A stop of the event loop is the client's own work (busy: its CPU time runs with the stop, a long garbage
    collection named) or other work on the machine's cores (the process not run: little CPU in the stop). A CI run
    read two runs of three 12-13% late against vLLM's own decode times, with a stop of the loop seen and nothing
    to tell which it was."""
    import gc
    from collections.abc import Callable

    from tokenbench import loadgen
    from tokenbench.loadgen import ClientWatch

    async def stop_once(block: Callable[[], None]) -> ClientWatch:
        watch = ClientWatch()
        watch.start()
        await asyncio.sleep(0.05)
        block()
        await asyncio.sleep(0.05)
        await watch.stop()
        return watch

    def spin() -> None:  # 0.3 s of the process's own CPU time, however long the machine takes to give it
        end = time.process_time() + 0.3
        while time.process_time() < end:
            pass

    busy = asyncio.run(stop_once(spin))
    assert busy.stop_cpu_ms is not None and busy.stop_cpu_ms >= 290, busy.report()
    assert "the process busy for" in loadgen.stopped_by({**busy.report(), "loop_lag_ms_max": 300.0})
    idle = asyncio.run(stop_once(lambda: time.sleep(0.3)))  # the process not run meanwhile, as when starved
    assert idle.stop_cpu_ms is not None and idle.stop_cpu_ms < 100, idle.report()
    assert "other work held the machine's cores" in loadgen.stopped_by(idle.report())
    collected = asyncio.run(stop_once(gc.collect))
    assert collected.report()["gc_ms_max"] > 0 and collected._collected not in gc.callbacks
    assert "garbage collection" in loadgen.stopped_by({"loop_lag_ms_max": 400.0, "loop_stop_cpu_ms": 390.0,
                                                       "gc_ms_max": 350.0})
    assert "garbage collection" not in loadgen.stopped_by({"loop_lag_ms_max": 400.0, "loop_stop_cpu_ms": 390.0,
                                                           "gc_ms_max": 2.0})


def test_repetitions_combine_every_repetitions_values_and_findings() -> None:
    """--repetitions 3 kept the first repetition's findings alone (a third's client_bound lost, under a TPOT its
    burst made 0.005 ms), its count, extremes and token totals (24 requests beside one repetition's 256 tokens),
    and set the repetitions' median p50 beside the first one's min: a median below the minimum."""
    from tokenbench.distribution import Distribution
    from tokenbench.finding import Code, Finding
    from tokenbench.levels import ServingLevel
    from tokenbench.results import combine_repetitions

    def rep(tpot: list[float], tokens: int, *codes: Code) -> ServingLevel:
        s = ServingLevel(concurrency=1, completed=8, output_throughput_tps=100.0, tpot_ms=Distribution.of(tpot),
                         total_output_tokens=tokens, total_input_tokens=512)
        for c in codes:
            s.add(Finding(c, f"{c.value} seen"))
        return s

    reps = [rep([0.33, 0.4, 0.5], 256, Code.ONE_READ), rep([0.003, 0.005, 0.006], 256, Code.ONE_READ),
            rep([0.004, 0.005, 0.007], 256, Code.ONE_READ, Code.CLIENT_BOUND)]
    s = combine_repetitions(reps, None)
    assert isinstance(s, ServingLevel)
    t = s.tpot_ms
    assert t.n == 9 and t.min == 0.003 and t.max == 0.5 and t.p50 is not None and t.min <= t.p50 <= t.max
    assert t.mean == pytest.approx(statistics.fmean([0.33, 0.4, 0.5, 0.003, 0.005, 0.006, 0.004, 0.005, 0.007]))
    assert (s.completed, s.total_output_tokens, s.total_input_tokens) == (24, 768, 1536)
    assert "one_read" in s.flags and "client_bound" in s.flags
    bound = s.finding(Code.CLIENT_BOUND)
    assert bound is not None and bound.message == "repetition 3 of 3: client_bound seen"
    assert s.finding(Code.ONE_READ).message == "one_read seen"  # every repetition had it: said as it was


def test_an_open_loop_past_what_the_server_answers_says_so(tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """Two slots of 74 ms a request answer about 27 a second. At 60/s the queue grows through the level: it read
    "the server (or the client) had not settled", with more warm-up advised. It is flagged rate_not_sustained,
    with the requests in flight as they grew and what was answered, and drift is not said; at 10/s, neither."""
    import json

    from tokenbench.cli import main
    from tokenbench.emitter import EmitterConfig

    out = tmp_path / "r.json"
    with BackgroundEmitter(EmitterConfig(ttft_s=0.01, itl_s=0.004, slots=2)) as em:
        assert main(["sweep", "--url", em.url, "--rate", "10,60", "--arrival", "constant", "--requests", "90",
                     "--input-len", "16", "--output-len", "16", "--guard", "off", "--db", str(tmp_path / "r.db"),
                     "--json", str(out)]) == 0
    text = " ".join(capsys.readouterr().out.split())
    calm, over = json.loads(out.read_text())["levels"]
    assert "rate_not_sustained" not in calm["flags"], calm["flags"]
    assert "rate_not_sustained" in over["flags"] and "drift" not in over["flags"], over["flags"]
    found = next(f for f in over["findings"] if f["code"] == "rate_not_sustained")
    assert found["observed"] >= found["threshold"] >= 2 and over["request_throughput_rps"] < 40, found
    assert "[60/s] the server did not keep up with 60 requests/s (answered " in text
    assert "a lower --rate, or capacity --rate to find the highest it sustains" in text


def test_a_capped_open_loop_says_its_wait_from_arrival_not_a_client_behind(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--rate 40 --max-concurrency 2 on requests of about 60 ms: requests wait for one of the 2 slots by design.
    That wait read as the client being a limit (client_bound: "requests sent ... late", "a server on the same
    cores competes with it"), and the TTFT it adds, from each arrival, was in the JSON alone."""
    import json

    from tokenbench.cli import main
    from tokenbench.emitter import EmitterConfig

    out = tmp_path / "r.json"
    with BackgroundEmitter(EmitterConfig(ttft_s=0.02, itl_s=0.005)) as em:
        assert main(["sweep", "--url", em.url, "--rate", "40", "--max-concurrency", "2", "--arrival", "constant",
                     "--requests", "40", "--input-len", "16", "--output-len", "8", "--guard", "off",
                     "--db", str(tmp_path / "r.db"), "--json", str(out)]) == 0
    text = " ".join(capsys.readouterr().out.split())
    (level,) = json.loads(out.read_text())["levels"]
    assert not any("late at p90" in r for r in level["client"].get("reasons", [])), level["client"]
    assert "sent" not in " ".join(f["message"] for f in level["findings"] if f["code"] == "client_bound")
    assert level["ttft_from_arrival_ms"]["p50"] > 2 * level["ttft_ms"]["p50"], level["ttft_from_arrival_ms"]
    assert "[40/s] TTFT from each request's arrival: median" in text and "a --max-concurrency cap" in text, text
