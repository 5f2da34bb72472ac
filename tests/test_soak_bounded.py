"""A soak holds a bounded number of records (``sessions.KEEP_TURNS``, set small here): past it, the sessions that
end are folded into exact totals and latency sketches, a uniform sample of them is kept, and the rest are stored
at once. Its figures must still be every turn's: the same as a summary over every turn the store holds."""

from __future__ import annotations

import json
from importlib.resources import files
from pathlib import Path

import jsonschema
import pytest

from tokenbench import sessions, soak_totals
from tokenbench.cli import main
from tokenbench.distribution import tolerance
from tokenbench.emitter import BackgroundEmitter
from tokenbench.metrics import session_stats, summarize
from tokenbench.records import RequestRecord
from tokenbench.store import Store


def test_a_soak_past_its_bound_keeps_a_sample_and_reports_every_turn(
        emitter: BackgroundEmitter, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sessions, "KEEP_TURNS", 6)  # 3 turns a session: 2 ended sessions kept
    monkeypatch.setattr(soak_totals, "COMPACT_AT", 8)
    held: list[int] = []
    add = soak_totals.Keeper.add

    def counted(self: soak_totals.Keeper, rec: RequestRecord) -> None:
        held.append(len(self.records))
        add(self, rec)

    monkeypatch.setattr(soak_totals.Keeper, "add", counted)
    out, db = tmp_path / "run.json", tmp_path / "r.db"
    capsys.readouterr()
    code = main(["sweep", "--url", emitter.url, "--guard", "off", "--no-metrics", "--quiet", "--seed", "3",
                 "--input-len", "20", "--output-len", "6", "--tool-len", "12", "--shared-prefix", "16",
                 "--sessions", "2", "--turns", "3", "--think-time", "5ms", "--duration", "2s", "--no-baseline",
                 "--slo", "ttft_p99=10s", "--json", str(out), "--db", str(db)])
    assert code == 0
    doc = json.loads(out.read_text())
    [level] = doc["levels"]
    stored = Store(db).requests(doc["run_id"], 0)
    measured = [r for r in stored if r.phase == "measured"]
    # far more turns than the bound, and never more held than the bound, two agents' live sessions and a batch
    assert len(measured) > 60 and max(held) <= 2 + 6 + 2 * 3 + 8 + 2, (len(measured), max(held))
    assert sorted(r.index for r in stored) == list(range(len(stored)))  # every turn stored once, in order
    s = level["session"]
    schema = json.loads(files("tokenbench").joinpath("data/run.schema.json").read_text())
    jsonschema.Draft202012Validator(schema).validate(doc)  # the sampled shape is in the contract
    assert 2 <= s["sampled_sessions"] <= 4 and s["sessions"] > 20

    # the same figures from every stored turn
    start, end = Store(db).db.execute("SELECT window_start_ns, window_end_ns FROM levels").fetchone()
    whole = summarize(stored, concurrency=2, rate=None, window_start_ns=start, window_end_ns=end)
    stats = session_stats(stored, "warm", frozenset())
    assert (level["completed"], level["failed"]) == (whole.completed, whole.failed)
    assert level["total_output_tokens"] == whole.total_output_tokens
    assert level["total_input_tokens"] == whole.total_input_tokens
    assert level["output_throughput_tps"] == pytest.approx(whole.output_throughput_tps)
    assert level["achieved_concurrency"] == pytest.approx(whole.achieved_concurrency)
    assert level["goodput_rps"] == pytest.approx(whole.completed / whole.duration_s)
    for name in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "ttfb_ms"):
        got, exact = level[name], getattr(whole, name)
        assert got["n"] == exact.n and got["mean"] == pytest.approx(exact.mean), name
        for q in ("p50", "p90", "p99"):
            assert abs(got[q] - getattr(exact, q)) <= tolerance(getattr(exact, q)) + 1e-9, (name, q)
    assert s["sessions"] == stats.sessions and s["turns_per_session"] == pytest.approx(stats.turns_per_session)
    assert s["sessions_finished"] + s["cut"] == s["sessions"] and s["cut"] <= 2
    assert sum(w["turns"] for w in s["over_time"]) == whole.completed
    assert main(["show", doc["run_id"], "--db", str(db)]) == 0
    shown = " ".join(capsys.readouterr().out.split())
    assert f"kept {s['sampled_sessions']} of {s['sessions']} sessions in memory (every turn stored)" in shown


def test_a_bounded_soak_cut_by_ctrl_c_keeps_every_turn(emitter: BackgroundEmitter, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A SIGINT past the bound: the sessions let go were stored as they went, the rest at the interrupt, and the
    interrupted level's figures are every stored turn's."""
    import contextlib
    import os
    import signal
    import sqlite3
    import threading
    import time

    monkeypatch.setattr(sessions, "KEEP_TURNS", 6)
    monkeypatch.setattr(soak_totals, "COMPACT_AT", 8)
    out, db = tmp_path / "run.json", tmp_path / "r.db"
    def interrupt_once_stored() -> None:  # some sessions let go and stored: the soak is past its bound
        deadline = time.monotonic() + 50
        while time.monotonic() < deadline and not done.is_set():
            with contextlib.suppress(sqlite3.Error):
                if db.exists() and sqlite3.connect(db).execute("SELECT count(*) FROM requests").fetchone()[0] > 20:
                    break
            time.sleep(0.05)
        if not done.is_set():
            os.kill(os.getpid(), signal.SIGINT)

    done = threading.Event()
    watcher = threading.Thread(target=interrupt_once_stored)
    watcher.start()
    try:
        code = main(["sweep", "--url", emitter.url, "--guard", "off", "--no-metrics", "--quiet", "--seed", "3",
                     "--input-len", "20", "--output-len", "6", "--tool-len", "12", "--sessions", "2", "--turns",
                     "3", "--think-time", "5ms", "--duration", "60s", "--no-baseline", "--json", str(out),
                     "--db", str(db)])
    finally:
        done.set()
        watcher.join()
    assert code == 130
    store = Store(db)
    [run] = store.runs()
    [(_, _, status, level)] = store.levels(run.id)
    stored = [r for r in store.requests(run.id, 0) if r.phase == "measured"]
    assert status == "interrupted" and level.session is not None and level.session.sampled_sessions is not None
    assert len(stored) > 20 and level.completed == sum(r.ok for r in stored)
    assert level.session.sessions == len({r.session for r in stored})
