"""The results database against the wrong file, a foreign schema, racing first uses, a held lock and damage: one
clear line each, and no finished level lost."""

from __future__ import annotations

import multiprocessing as mp
import sqlite3
import threading
import time
from pathlib import Path

import pytest

from tokenbench.cli import main
from tokenbench.levels import DepthLevel, ServingLevel
from tokenbench.store import Store


def _runs(db: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(["runs", "--db", str(db)])
    cap = capsys.readouterr()
    return code, cap.out + cap.err


def test_a_file_that_is_not_sqlite(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "notes.txt"
    db.write_text("my notes, not a database\n" * 100)
    code, out = _runs(db, capsys)
    assert code == 2 and "not an SQLite database" in out and len(out.strip().splitlines()) == 1
    assert db.read_text().startswith("my notes")  # untouched


def test_another_programs_database_is_not_taken_over(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "app.db"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
    con.commit()
    con.close()
    with pytest.raises(Exception, match="another program's tables"):
        Store(db)
    code, out = _runs(db, capsys)
    assert code == 2 and "another program's tables (users)" in out
    names = {r[0] for r in sqlite3.connect(db).execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert names == {"users"}  # no tokenbench table was added to it


def test_reading_commands_create_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "new" / "dir" / "r.db"
    code, out = _runs(db, capsys)
    assert code == 2 and "no results database" in out
    assert not (tmp_path / "new").exists()
    assert main(["show", "x", "--db", str(db)]) == 2


def _filled(db: Path, runs: int) -> Path:
    """A database of ``runs`` runs, all in its main file (no write-ahead log beside it), to damage."""
    store = Store(db)
    for i in range(runs):
        store.save_run(f"run-{i:04d}", "sweep", "x" * 200, {"model": "m" * 500}, "measured", [], "0", "t", "t")
    store.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    store.close()
    return db


def test_a_damaged_database_is_noticed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = _filled(tmp_path / "r.db", 200)
    data = bytearray(db.read_bytes())
    page = 4096
    for p in range(2, len(data) // page - 1):  # scribble over the middle of every page but the header page
        data[p * page + 100: p * page + 400] = b"\xa5" * 300
    db.write_bytes(bytes(data))
    code, out = _runs(db, capsys)
    assert code == 2 and ("damaged" in out or "not an SQLite database" in out), out
    assert "Traceback" not in out and len(out.strip().splitlines()) == 1, out  # SQLite's report spans lines


def test_a_damaged_page_is_said_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """SQLite's integrity report of a damaged page spans lines ("*** in database main ***", "Page 38: ..."): the
    error quoted it as it came, four lines where every error is one."""
    db = _filled(tmp_path / "r.db", 300)
    data = bytearray(db.read_bytes())
    data[150_000:153_000] = b"\xa5" * 3000  # inside one page of the runs' table
    db.write_bytes(bytes(data))
    code, out = _runs(db, capsys)
    assert code == 2 and "is damaged (*** in database main *** Page " in out, out
    assert len(out.strip().splitlines()) == 1, out


def test_a_database_this_user_cannot_write_is_one_line_before_anything_runs(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """A results database of mode 0444, up to date: SQLite opens it for reading without a word, and every command
    that writes (sweep, depth, capacity, import, predict --save) ended on an internal error at its first row, exit
    70. (The test runs where root writes anything: the file's mode is what os.access answers.)"""
    import os

    db = tmp_path / "r.db"
    Store(db).close()
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: False if Path(p) == db and mode == os.W_OK else real(p, mode))
    assert main(["predict", "--hardware", "h100", "--model", "llama-3.1-8b", "--save", "p", "--db", str(db)]) == 2
    err = capsys.readouterr().err
    assert "is read-only here" in err and "pass --db PATH" in err and len(err.strip().splitlines()) == 1, err
    assert main(["runs", "--db", str(db)]) == 0  # reading it still works


def _open_new(path: str, start: "mp.synchronize.Barrier", q: "mp.Queue[str]") -> None:
    start.wait()
    try:
        Store(path).close()
        q.put("ok")
    except Exception as e:  # noqa: BLE001 - the test reports whatever went wrong
        q.put(f"{type(e).__name__}: {e}")


def test_first_use_by_two_processes_at_once(tmp_path: Path) -> None:
    """1 of 10 pairs of sweeps on a new database crashed on 'table telemetry already exists'."""
    ctx = mp.get_context("spawn")
    for i in range(10):
        path = str(tmp_path / f"r{i}.db")
        start, q = ctx.Barrier(2), ctx.Queue()
        procs = [ctx.Process(target=_open_new, args=(path, start, q)) for _ in range(2)]
        for p in procs:
            p.start()
        results = [q.get(timeout=60) for _ in procs]
        for p in procs:
            p.join(timeout=30)
        assert results == ["ok", "ok"], results
        assert Store(path).schema_version == Store(path).schema_version  # both migrations recorded once
        names = [r[0] for r in Store(path).db.execute("SELECT name FROM _migrations")]
        assert len(names) == len(set(names))


def test_a_writer_holding_the_lock_is_waited_for(tmp_path: Path) -> None:
    """Another writer holds the lock for 6 s (SQLite's default wait is 5 s: it used to crash and lose the
    level); the level is saved once the lock is free."""
    db = tmp_path / "r.db"
    store = Store(db)
    store.create_run("r1", "sweep", None, "t", "0", {})
    held = threading.Event()

    def hold() -> None:
        con = sqlite3.connect(db, isolation_level=None)
        con.execute("BEGIN IMMEDIATE")
        held.set()
        time.sleep(6)
        con.execute("COMMIT")
        con.close()

    t = threading.Thread(target=hold)
    t.start()
    held.wait(10)
    t0 = time.monotonic()
    store.save_level("r1", 0, 0, ServingLevel(concurrency=1), [], status="complete", started="t",
                     finished="t", window=(0, 0))
    waited = time.monotonic() - t0
    t.join()
    assert waited > 4 and len(store.levels("r1")) == 1


def test_show_of_a_huge_run_prints_the_first_levels_and_says_so(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """A 158,000-level import took 290 s to show; show now prints the first 200 in its own table (pp/tg at
    depths, not a sweep's) and says how to get the rest. benchmarks/store_scale.py times it at 200,000."""
    db = tmp_path / "r.db"
    levels = [DepthLevel(concurrency=1, test="tg128", depth=i, tg_tps=80.0, tg_tps_sd=0.4) for i in range(250)]
    Store(db).save_run("big", "bench", "big", {"model": "m"}, "imported", levels, "0", "t", "t")
    assert main(["show", "big", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert "tg128 @ d199" in out and "tg128 @ d200" not in out and "80.00" in out
    assert "showing the first 200 of 250 levels" in out
    assert main(["show", "big", "--db", str(db), "--all", "--json", str(tmp_path / "o.json")]) == 0
    assert "tg128 @ d249" in capsys.readouterr().out
    import json
    assert len(json.loads((tmp_path / "o.json").read_text())["levels"]) == 250


def test_a_directory_for_the_database_and_an_empty_run_name_are_refused_as_such(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """show --db DIR said "no results database at DIR: run a sweep first"; show '' said the empty name was
    ambiguous (every run starts so); a name with LIKE's own characters matched ids it does not start."""
    assert main(["show", "x", "--db", str(tmp_path)]) == 2
    assert "is a directory: give a file, such as --db" in capsys.readouterr().err
    db = str(tmp_path / "r.db")
    assert main(["import", str(Path(__file__).parent / "data" / "vllm_serve_result.json"), "--db", db]) == 0
    capsys.readouterr()
    assert main(["show", "", "--db", db]) == 2
    assert "not by nothing" in capsys.readouterr().err
    for wild in ("%", "_", "2026%"):
        assert main(["show", wild, "--db", db]) == 2
        assert "no run" in capsys.readouterr().err.lower(), wild
