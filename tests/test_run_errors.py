"""Every command that produces results returns one type, and the error that ends a stored run carries that run:
an interrupt as a ``RunInterrupted``, a user-facing error in its ``result``, each the run as a reader
loads it back. The interrupts are real SIGINTs, sent to a child process that calls the library as a script would."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tokenbench.emitter import BackgroundEmitter, EmitterProcess
from tokenbench.errors import LevelFailed
from tokenbench.levels import ServingLevel
from tokenbench.quality.runner import QualityConfig, run_quality
from tokenbench.results import RunResult
from tokenbench.store import RunRow, Store

#: A script that runs one command through the library and prints what ended it, as JSON on its last line.
SCRIPT = """
import asyncio, json, sys
from pathlib import Path
from tokenbench.errors import RunInterrupted
from tokenbench.store import Store
url, db, what = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
try:
    if what == "sweep":
        from tokenbench.sweep import SweepConfig, run_sweep
        from tokenbench.kinds.lengths import LengthsKind
        cfg = SweepConfig(url=url, workload=LengthsKind.fixed(8, 4), concurrency=[1, 2], requests=200, warmup=0,
                          guard="off")
        asyncio.run(run_sweep(cfg, Store(db)))
    elif what == "depth":
        from tokenbench.depth import DepthConfig, run_depth
        asyncio.run(run_depth(DepthConfig(url=url, depths=[0, 64], pp=8, tg=4, repetitions=100, guard="off",
                                          metrics=False), Store(db)))
    else:
        from tokenbench.quality.runner import QualityConfig, run_quality
        run_quality(QualityConfig(url=url, tasks=["agreement"], items=400, max_tokens=4), Store(db))
    print(json.dumps({"ended": "returned"}))
except RunInterrupted as e:
    print(json.dumps({"ended": type(e).__name__, "message": str(e), "run_id": e.run_id,
                      "result": e.result.to_json() if e.result is not None else None}))
"""


def _served(root: str, db: Path, what: str) -> int:
    """How far the child is: requests the emitter served (a sweep), items the run stored (quality)."""
    if what == "quality":
        runs = [r for r in Store(db).runs() if r.id != "other-run"] if db.exists() else []
        return len(Store(db).quality_items(runs[0].id)) if runs else 0
    with urllib.request.urlopen(root + "/stats") as r:
        return len(json.load(r)["stamps"])


def _interrupt(what: str, db: Path) -> dict:
    with EmitterProcess("--itl", "0.03") as em:
        child = subprocess.Popen([sys.executable, "-c", SCRIPT, em.url, str(db), what], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        deadline = time.monotonic() + 60
        # a depth's repetition is two requests (pp, then tg), after the check request and a warm-up pass of two:
        # the 10th request is the 4th repetition's first, so 3 are done (at the 8th, the 3rd could be in flight)
        while _served(em.root, db, what) < (10 if what == "depth" else 8):
            assert time.monotonic() < deadline and child.poll() is None, "the child never got going"
            time.sleep(0.05)
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=30)
    assert child.returncode == 0, err.decode()
    return json.loads(out.decode().splitlines()[-1])


def _other_run(db: Path) -> None:
    """Another run in the same database, dated later: the interrupt must never carry it."""
    Store(db).save_run("other-run", "sweep", "other", {"model": "m"}, "measured",
                       [ServingLevel(concurrency=9, output_throughput_tps=1.0)], "0", "2099-01-01T00:00:00",
                       "2099-01-01T00:00:01")


def _interrupted(what: str, db: Path) -> tuple[dict, RunRow]:
    """What the child said when its run was interrupted, and that run, beside another in the same database."""
    _other_run(db)
    said = _interrupt(what, db)
    assert said["ended"] == "RunInterrupted", said
    (run,) = [r for r in Store(db).runs() if r.id != "other-run"]
    return said, run


def test_an_interrupted_sweep_raises_its_own_run(tmp_path: Path) -> None:
    said, run = _interrupted("sweep", tmp_path / "r.db")
    assert said["run_id"] == run.id and run.status == "interrupted" and run.id in said["message"]
    doc = said["result"]
    assert doc["run_id"] == run.id and doc["kind"] == "sweep" and doc["status"] == "interrupted"
    (level,) = doc["levels"]  # the level in progress, kept and marked
    assert level["status"] == "interrupted" and level["completed"] > 3


def test_an_interrupted_depth_keeps_the_repetitions_of_the_depth_in_progress(tmp_path: Path) -> None:
    """Ctrl-C in a depth's repetitions lost all of them: the run kept only the depths it had finished."""
    said, run = _interrupted("depth", tmp_path / "r.db")
    assert run.status == "interrupted" and said["message"].endswith("keeps its finished depths"), said
    pp, tg = said["result"]["levels"]  # depth 0 of 100 repetitions, cut after a few, kept and marked
    assert pp["status"] == tg["status"] == "interrupted" and pp["depth"] == tg["depth"] == 0
    assert "interrupted" in pp["flags"] and pp["pp_tps"] > 0 and tg["tg_tps"] > 0
    (cut,) = [f for f in pp["findings"] if f["code"] == "interrupted"]
    assert cut["threshold"] == 100 and 3 <= cut["observed"] < 100, cut


def test_an_interrupted_quality_run_raises_its_own_run_with_its_items(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    said, run = _interrupted("quality", db)
    doc = said["result"]
    assert doc["run_id"] == run.id == said["run_id"] and doc["kind"] == "quality"
    assert doc["status"] == "interrupted" == run.status and doc["levels"] == []
    stored = Store(db).quality_items(run.id)
    assert 0 < len(stored) < 400 and len(doc["items"]) == len(stored)  # what it finished, every one of them


def test_quality_returns_the_result_every_command_returns(emitter: BackgroundEmitter, tmp_path: Path) -> None:
    store = Store(tmp_path / "r.db")
    res = run_quality(QualityConfig(url=emitter.url, tasks=["agreement"], items=3, max_tokens=4), store)
    assert isinstance(res, RunResult) and res.kind == "quality" and res.status == "complete"
    doc = res.to_json()
    assert doc["levels"] == [] and len(doc["items"]) == 3 and all("prompt" not in i for i in doc["items"])
    assert doc["manifest"]["summary"]["agreement"]["items"] == 3
    from tokenbench.reader import load_result

    assert load_result(store, res.run_id).to_json() | {"manifest": None} == doc | {"manifest": None}


def test_a_failed_run_carries_its_result(emitter: BackgroundEmitter, tmp_path: Path) -> None:
    import asyncio

    from tokenbench.kinds.lengths import LengthsKind
    from tokenbench.sweep import SweepConfig, run_sweep

    emitter.configure(fault="truncate", truncate_to=8, fault_from=1)
    store = Store(tmp_path / "r.db")
    cfg = SweepConfig(url=emitter.url, workload=LengthsKind.fixed(64, 6), concurrency=[1, 2], requests=3, warmup=0,
                      guard="off")
    with pytest.raises(LevelFailed) as ei:
        asyncio.run(run_sweep(cfg, store))
    res = ei.value.result
    assert res is not None and res.run_id == ei.value.run_id == store.runs()[0].id
    assert res.status == "failed" and [o.status for o in res.outcomes] == ["failed"]
    assert "prompt_truncated" in res.outcomes[0].summary.flags


def test_ctrl_c_on_quality_and_depth_prints_and_writes_the_run_it_ended(tmp_path: Path) -> None:
    """Through the CLI: exit 130, the run named, its JSON written with what it finished (quality and depth
    printed nothing of their run on Ctrl-C before)."""
    for what, args in (("quality", ["quality", "--tasks", "agreement", "--items", "400", "--max-tokens", "4"]),
                       ("depth", ["depth", "--depths", ",".join(str(16 * i) for i in range(40)), "--pp", "8", "--tg", "200",
                                  "--guard", "off"])):
        db, out = tmp_path / f"{what}.db", tmp_path / f"{what}.json"
        with EmitterProcess("--itl", "0.01") as em:
            cli = subprocess.Popen([sys.executable, "-m", "tokenbench", *args, "--url", em.url, "--db", str(db),
                                    "--json", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
            deadline = time.monotonic() + 90
            while not (db.exists() and Store(db).runs() and (what == "depth" and Store(db).levels(Store(db).runs()[0].id)
                                                           or what == "quality" and _served(em.root, db, what) >= 8)):
                assert time.monotonic() < deadline and cli.poll() is None, f"{what} never got going"
                time.sleep(0.1)
            cli.send_signal(signal.SIGINT)
            _, err = cli.communicate(timeout=60)
        (run,) = Store(db).runs()
        assert cli.returncode == 130, err.decode()
        assert f"tokenbench: interrupted: run {run.id}".encode() in err and b"Traceback" not in err
        doc = json.loads(out.read_text())
        assert doc["run_id"] == run.id and doc["status"] == "interrupted" == run.status and doc["kind"] == what
        assert (doc["items"] if what == "quality" else doc["levels"]), doc


def test_an_interrupted_level_keeps_its_guard_snapshot_and_the_servers_samples(tmp_path: Path) -> None:
    """A level cut by Ctrl-C is stored as one measured to its end is: the guard's snapshot before it (and the
    dirty bench it found), the server's /metrics samples it took. It once kept neither, and `show --guard` then
    said it had run with --guard off."""
    import asyncio

    from tokenbench import guard
    from tokenbench.emitter import EmitterConfig
    from tokenbench.errors import RunInterrupted
    from tokenbench.kinds.lengths import LengthsKind
    from tokenbench.sweep import SweepConfig, run_sweep

    dirty = guard.load_config()
    dirty["cpu_load"].update(severity="fail", max_other_pct=-1.0)  # any load is too much: the bench is dirty
    db = tmp_path / "r.db"
    with BackgroundEmitter(EmitterConfig(itl_s=0.03)) as em:
        cfg = SweepConfig(url=em.url, workload=LengthsKind.fixed(8, 4), concurrency=[2], requests=400, warmup=0,
                          guard="warn", guard_config=dirty, metrics_interval_s=0.1)

        async def cut() -> None:
            task = asyncio.create_task(run_sweep(cfg, Store(db)))
            deadline = time.monotonic() + 60
            while len(em.emitter.stamps) < 20:
                assert time.monotonic() < deadline and not task.done(), "the sweep never got going"
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.5)  # a few /metrics samples
            task.cancel()
            with pytest.raises((RunInterrupted, asyncio.CancelledError)):
                await task

        asyncio.run(cut())
    store = Store(db, readonly=True)
    (run,) = store.runs()
    ((_, _, status, level),) = store.levels(run.id)
    assert status == "interrupted" and level.completed > 5
    assert level.guard is not None and not level.guard.clean
    assert "dirty_bench" in level.flags and "interrupted" in level.flags
    # the requests in flight at the interrupt are the interrupt's, not failures of the server
    cut = level.errors.get("interrupted", 0)
    assert "errors" not in level.flags and cut >= 1
    from tokenbench.finding import Code

    said = level.finding(Code.INTERRUPTED)
    assert said is not None and said.text == f"the level was cut short: {cut} request{'s' if cut > 1 else ''} in " \
        "flight left unfinished"
    assert level.telemetry is not None and store.telemetry(run.id, 0)


def test_an_interrupt_before_anything_finished_says_so(tmp_path: Path) -> None:
    """"keeps its finished depths" was said of a run that had finished none."""
    from tokenbench.endpoint import RunLog
    from tokenbench.results import Manifest

    log = RunLog(Store(tmp_path / "r.db"), "r-1", "depth", "box")
    log.create(Manifest(model="m"))
    stop = log.abort(KeyboardInterrupt(), False)
    assert stop is not None and str(stop) == "interrupted: run r-1 had finished nothing"
    assert Store(tmp_path / "r.db").runs()[0].status == "interrupted"
