from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from tokenbench.errors import UsageError
from tokenbench.metrics import summarize
from tokenbench.records import RequestRecord
from tokenbench.store import Store, default_db_path
from tokenbench.store_schema import MIGRATIONS


def _level(store: Store, run_id: str, idx: int) -> None:
    r = RequestRecord(index=idx, sent_ns=0, first_token_ns=10, end_ns=20, chunk_ns=[10, 20], output_tokens=2)
    s = summarize([r], concurrency=1, rate=None, window_start_ns=0)
    store.save_level(run_id, idx, 0, s, [r], status="complete", started="t", finished="t", window=(0, 20))


def test_env_var_moves_the_database(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOKENBENCH_DB", str(tmp_path / "x.db"))
    assert default_db_path() == tmp_path / "x.db"


def test_migrations_applied_once_and_versioned(tmp_path: Path) -> None:
    s = Store(tmp_path / "a.db")
    assert s.schema_version == len(MIGRATIONS)
    s.close()
    s2 = Store(tmp_path / "a.db")  # re-opening applies nothing twice
    assert s2.schema_version == len(MIGRATIONS)


def test_newer_database_is_refused(tmp_path: Path) -> None:
    Store(tmp_path / "a.db").close()
    db = sqlite3.connect(tmp_path / "a.db")
    db.execute("INSERT INTO _migrations VALUES ('999_future', 'now')")
    db.commit()
    db.close()
    with pytest.raises(UsageError, match="newer tokenbench"):
        Store(tmp_path / "a.db")


def test_resolve_by_id_prefix_and_label(tmp_path: Path) -> None:
    s = Store(tmp_path / "a.db")
    s.create_run("20260101-000000-aaaa", "sweep", "h100", "2026-01-01T00:00:00", "0", {"model": "m"})
    s.create_run("20260102-000000-bbbb", "sweep", "h100", "2026-01-02T00:00:00", "0", {"model": "m"})
    assert s.resolve("20260101-000000-aaaa").id.endswith("aaaa")
    assert s.resolve("20260102").id.endswith("bbbb")
    with pytest.raises(UsageError, match="label 'h100' names 2 runs"):  # shared: refused, never picked silently
        s.resolve("h100")
    assert s.resolve("h100", latest=True).id.endswith("bbbb")  # --latest: the newest with that label
    with pytest.raises(UsageError, match="ambiguous"):
        s.resolve("2026010")
    with pytest.raises(UsageError, match="tokenbench runs"):
        s.resolve("nope")


def test_levels_and_records_round_trip(tmp_path: Path) -> None:
    s = Store(tmp_path / "a.db")
    s.create_run("r1", "sweep", None, "2026", "0", {})
    _level(s, "r1", 0)
    _level(s, "r1", 1)
    s.finish_run("r1", "complete", "2026")
    assert [idx for idx, *_ in s.levels("r1")] == [0, 1]
    (rec,) = s.requests("r1", 1)
    assert list(rec.chunk_ns) == [10, 20] and rec.output_tokens == 2
    assert s.resolve("r1").status == "complete"


def test_a_failed_write_leaves_no_half_level(tmp_path: Path) -> None:
    s = Store(tmp_path / "a.db")
    s.create_run("r1", "sweep", None, "2026", "0", {})
    _level(s, "r1", 0)
    with pytest.raises(sqlite3.IntegrityError):
        # a level for a run that does not exist: the level row and its requests are rolled back together
        _level(s, "missing", 0)
    assert s.db.execute("SELECT COUNT(*) FROM requests WHERE run_id='missing'").fetchone()[0] == 0


def test_a_record_stores_and_loads_whole_without_copying_its_stamps() -> None:
    """to_dict is a shallow view (asdict deep-copied every chunk stamp): the JSON round trip is unchanged."""
    import json

    from tokenbench.records import RequestRecord

    r = RequestRecord(index=3, sent_ns=10, written_ns=12, first_token_ns=40, end_ns=90, chunk_ns=[40, 60, 90],
                      chunk_chars=[2, 3, 1], answer_text="abcdef", output_tokens=3, server_timings={"prompt_n": 5})
    d = r.to_dict()
    assert d["chunk_ns"] is r.chunk_ns and d["answer_chars"] == 6 and "answer_text" not in d
    back = RequestRecord.from_dict(json.loads(json.dumps(d)))
    assert list(back.chunk_ns) == [40, 60, 90] and back.written_ns == 12 and back.server_timings == {"prompt_n": 5}
    assert back.answer_text == "" and back.ttft_ns == 30 and back.e2e_ns == 80


def test_a_finished_record_keeps_its_stamps_packed_and_stores_them_as_before() -> None:
    """A level keeps its records until it ends (a soak's hour of them): once a stream ends its chunk stamps and
    sizes are machine words, 8 and 2 bytes a chunk against a list's 40 and 8, and the stored JSON is the same."""
    import json
    import sys
    import time

    from tokenbench.records import RequestRecord

    t0 = time.perf_counter_ns()
    stamps, chars = [t0 + 1_000_000 * k for k in range(512)], [4] * 512
    loose = RequestRecord(index=0, chunk_ns=list(stamps), chunk_chars=list(chars), output_tokens=512)
    packed = RequestRecord(index=0, chunk_ns=list(stamps), chunk_chars=list(chars), output_tokens=512)
    packed.pack()
    packed.pack()  # once is enough; again changes nothing
    assert list(packed.chunk_ns) == stamps and list(packed.chunk_chars) == chars
    assert sys.getsizeof(packed.chunk_ns) <= 8 * 512 + 100 and sys.getsizeof(packed.chunk_chars) <= 2 * 512 + 100
    huge = RequestRecord(index=1, chunk_ns=[1, 2], chunk_chars=[70_000, 3])  # a non-streamed answer's one chunk
    huge.pack()
    assert list(huge.chunk_chars) == [70_000, 3]
    assert sys.getsizeof(loose.chunk_ns) + sum(map(sys.getsizeof, loose.chunk_ns)) >= 4 * sys.getsizeof(packed.chunk_ns)
    assert json.dumps(packed.to_dict()) == json.dumps(loose.to_dict())
    back = RequestRecord.from_dict(json.loads(json.dumps(packed.to_dict())))
    assert list(back.chunk_ns) == stamps


def test_a_released_text_leaves_its_lengths_to_the_stored_record() -> None:
    """An agent's answer goes into its conversation and out of its record: the stored record says the same."""
    import json

    from tokenbench.records import RequestRecord

    kept = RequestRecord(index=0, answer_text="four", reasoning_text="thinking", output_tokens=3)
    let_go = RequestRecord(index=0, answer_text="four", reasoning_text="thinking", output_tokens=3)
    let_go.release_text()
    let_go.release_text()  # a second time keeps the lengths of the first
    assert let_go.answer_text == let_go.reasoning_text == ""
    assert json.dumps(let_go.to_dict()) == json.dumps(kept.to_dict())
    assert kept.to_dict()["answer_chars"] == 4 and "released_chars" not in kept.to_dict(keep_text=True)
