"""SQLite results database: runs, levels, every request's raw record, machine snapshots.

The schema is versioned by named, append-only migrations (never edit one that has shipped; add the next).
Each level is written in one transaction, so a killed run leaves the levels it finished.
Location: ``--db PATH``, else ``TOKENBENCH_DB``, else the user data directory.
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import platformdirs
import psutil

from .errors import UsageError
from .levels import LevelSummary
from .records import RequestRecord
from .store_schema import MIGRATIONS

DB_ENV = "TOKENBENCH_DB"


def default_db_path() -> Path:
    env = os.environ.get(DB_ENV)
    return Path(env) if env else Path(platformdirs.user_data_dir("tokenbench")) / "results.db"


def process_mark() -> dict[str, Any]:
    """This process, so that a reader can tell whether the process that opened a run still runs it."""
    me = psutil.Process()
    return {"host": socket.gethostname(), "pid": me.pid, "pid_started": me.create_time()}


def process_gone(mark: Any) -> bool:
    """True when ``mark`` names a process on this host that no longer exists (or whose pid was reused)."""
    if not isinstance(mark, dict) or mark.get("host") != socket.gethostname() or not isinstance(mark.get("pid"), int):
        return False  # another machine's run, or an old run without a mark: cannot tell
    try:
        return bool(psutil.Process(mark["pid"]).create_time() != mark.get("pid_started"))
    except psutil.NoSuchProcess:
        return True
    except (psutil.AccessDenied, ValueError):
        return False


@dataclass(slots=True)
class RunRow:
    id: str
    kind: str
    label: str | None
    status: str
    started: str
    finished: str | None
    tool_version: str
    provenance: str
    error: str | None
    manifest: dict[str, Any]

    @property
    def shown_kind(self) -> str:
        """The command that made the run, as a user typed it: a capacity search is stored as the sweep it ran (its
        manifest says how it searched) and reads "capacity"."""
        if self.kind == "sweep" and self.manifest.get("capacity"):
            return "capacity"
        return self.kind


#: How long a write waits for another writer's lock before it gives up (SQLite's busy timeout), seconds.
LOCK_WAIT_S = 60.0
#: Files up to this size are checked with PRAGMA quick_check when opened (a few ms); larger ones on request.
QUICK_CHECK_BYTES = 64 << 20


class Store:
    """The results database. ``readonly`` opens an existing database for reading only: it never creates a file
    or a directory, and works on a database the user may not write."""

    def __init__(self, path: Path | str | None = None, readonly: bool = False) -> None:
        self.path = Path(path) if path is not None else default_db_path()
        self.readonly = readonly
        where = f"the results database {self.path}"
        try:
            if readonly:
                if not self.path.is_file():
                    raise UsageError(f"the results database {self.path} is a directory: give a file, such as --db "
                                     f"{self.path / 'results.db'}" if self.path.is_dir() else
                                     f"no results database at {self.path}: run a sweep first, or pass --db PATH")
                self.db = sqlite3.connect(f"{self.path.resolve().as_uri()}?mode=ro", uri=True,
                                          isolation_level=None, timeout=LOCK_WAIT_S)
            else:
                if path is not None and not self.path.parent.is_dir():  # the default's folder is made below
                    raise UsageError(f"{where}: the directory {self.path.parent} does not exist; create it first")
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self.db = sqlite3.connect(self.path, isolation_level=None, timeout=LOCK_WAIT_S)
            self.db.row_factory = sqlite3.Row
            self.db.execute("PRAGMA foreign_keys = ON")
            tables = {r[0] for r in self.db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        except sqlite3.OperationalError as e:  # a file it cannot open or write: what it is does not come into it
            raise UsageError(self._cannot(e)) from None
        except sqlite3.DatabaseError as e:
            raise UsageError(f"{where} is not an SQLite database ({e}): pass --db PATH for a new one") from None
        except OSError as e:
            raise UsageError(f"cannot open {where}: {e.strerror or e}; pass --db PATH") from None
        if tables and "_migrations" not in tables:
            raise UsageError(f"{where} holds another program's tables ({', '.join(sorted(tables)[:4])}): give "
                             "tokenbench a database of its own with --db PATH")
        self._check_integrity()
        if readonly:
            if not tables:
                raise UsageError(f"{where} is empty: run a sweep first, or pass --db PATH")
            return
        try:
            # a database up to date, in WAL mode already, opens without a write, and SQLite opens a file it cannot
            # write for reading: it would fail at the run's first row, after the server was started
            if not os.access(self.path, os.W_OK):
                raise UsageError(self._read_only())
            self._wal()
            self.migrate()
        except sqlite3.OperationalError as e:
            raise UsageError(self._cannot(e)) from None

    def _read_only(self) -> str:
        return (f"the results database {self.path} is read-only here: reading commands (runs, show, compare) still "
                "work; pass --db PATH to write elsewhere")

    def _cannot(self, e: sqlite3.OperationalError) -> str:
        """Why a database cannot be opened or written, in one line."""
        where = f"the results database {self.path}"
        if "readonly" in str(e) or "read-only" in str(e):
            return self._read_only()
        if "unable to open" in str(e) and not os.access(self.path.parent, os.W_OK):
            return f"cannot open {where}: its directory {self.path.parent} cannot be written; pass --db PATH"
        return f"{where} cannot be opened or written ({e}); pass --db PATH"

    def _wal(self) -> None:
        """Write-ahead logging, so readers never block a sweep. Switching to it skips SQLite's busy wait, so two
        first uses at once retry instead of failing on "database is locked"."""
        deadline = time.monotonic() + LOCK_WAIT_S
        while True:
            try:
                self.db.execute("PRAGMA journal_mode = WAL")
                return
            except sqlite3.OperationalError as e:
                if "locked" not in str(e) or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def _check_integrity(self) -> None:
        try:
            if self.path.stat().st_size > QUICK_CHECK_BYTES:
                return
            bad = [r[0] for r in self.db.execute("PRAGMA quick_check(3)")]
        except (OSError, sqlite3.DatabaseError) as e:
            bad = [str(e)]
        if bad != ["ok"]:
            said = " ".join("; ".join(bad).split())  # SQLite's report spans lines: one line, as every error
            raise UsageError(f"the results database {self.path} is damaged ({said[:200]}): restore it from a copy, "
                             "or pass --db PATH for a new one")

    def close(self) -> None:
        self.db.close()

    @contextmanager
    def tx(self) -> Iterator[sqlite3.Connection]:
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield self.db
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    def migrate(self) -> None:
        """Apply the missing migrations. Each is checked and applied under one write lock, so two processes opening
        a new database at once cannot both apply it (one used to fail: "table telemetry already exists")."""
        self.db.execute("CREATE TABLE IF NOT EXISTS _migrations (name TEXT PRIMARY KEY, applied TEXT NOT NULL)")
        known = {name for name, _ in MIGRATIONS}
        done = {r[0] for r in self.db.execute("SELECT name FROM _migrations")}
        unknown = done - known
        if unknown:
            raise UsageError(
                f"{self.path} was written by a newer tokenbench (migrations {sorted(unknown)}): upgrade tokenbench"
            )
        for name, fn in MIGRATIONS:
            if name in done:
                continue
            with self.tx() as db:
                if db.execute("SELECT 1 FROM _migrations WHERE name = ?", (name,)).fetchone():
                    continue
                fn(db)
                db.execute("INSERT INTO _migrations VALUES (?, datetime('now'))", (name,))

    @property
    def schema_version(self) -> int:
        return int(self.db.execute("SELECT COUNT(*) FROM _migrations").fetchone()[0])

    # --- writing -------------------------------------------------------------------------------------

    def create_run(
        self, run_id: str, kind: str, label: str | None, started: str, tool_version: str, manifest: dict[str, Any],
        provenance: str = "measured",
    ) -> None:
        # who runs it: a run left 'running' by a process that is gone reads as abandoned
        manifest = {**manifest, "process": process_mark()}
        with self.tx() as db:
            db.execute(
                "INSERT INTO runs (id, kind, label, status, started, tool_version, manifest, provenance)"
                " VALUES (?, ?, ?, 'running', ?, ?, ?, ?)",
                (run_id, kind, label, started, tool_version, json.dumps(manifest), provenance),
            )

    def save_run(self, run_id: str, kind: str, label: str | None, manifest: dict[str, Any], provenance: str,
                 levels: list[LevelSummary], tool_version: str, started: str, finished: str) -> None:
        """A whole run at once (an import or a prediction): all of it or none of it."""
        with self.tx():
            self.save_run_in_tx(run_id, kind, label, manifest, provenance, levels, tool_version, started, finished)

    def save_run_in_tx(self, run_id: str, kind: str, label: str | None, manifest: dict[str, Any], provenance: str,
                       levels: list[LevelSummary], tool_version: str, started: str, finished: str) -> None:
        """save_run inside a transaction the caller holds (several runs of one file, all or none)."""
        self.db.execute(
            "INSERT INTO runs (id, kind, label, status, started, finished, tool_version, manifest, provenance)"
            " VALUES (?, ?, ?, 'complete', ?, ?, ?, ?, ?)",
            (run_id, kind, label, started, finished, tool_version, json.dumps(manifest), provenance),
        )
        self.db.executemany(
            "INSERT INTO levels VALUES (?, ?, 0, ?, ?, 'complete', ?, ?, NULL, NULL, ?)",
            [(run_id, i, s.concurrency, s.rate, started, finished, json.dumps(s.to_dict()))
             for i, s in enumerate(levels)],
        )

    def save_requests_in_tx(self, run_id: str, level_idx: int, records: list[RequestRecord]) -> None:
        """An imported level's requests (a tool's per-request export), inside the caller's transaction."""
        self.db.executemany("INSERT INTO requests VALUES (?, ?, 0, ?, ?, ?, ?)",
                            ((run_id, level_idx, r.index, r.phase, int(r.ok), json.dumps(r.to_dict()))
                             for r in records))  # as save_level: each row's JSON written and dropped

    def update_manifest(self, run_id: str, manifest: dict[str, Any]) -> None:
        with self.tx() as db:
            db.execute("UPDATE runs SET manifest = ? WHERE id = ?", (json.dumps(manifest), run_id))

    def save_level(
        self,
        run_id: str,
        idx: int,
        repetition: int,
        summary: LevelSummary,
        records: list[RequestRecord],
        *,
        status: str,
        started: str,
        finished: str,
        window: tuple[int, int],
    ) -> None:
        with self.tx() as db:
            db.execute(
                "INSERT OR REPLACE INTO levels VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    run_id,
                    idx,
                    repetition,
                    summary.concurrency,
                    summary.rate,
                    status,
                    started,
                    finished,
                    window[0],
                    window[1],
                    json.dumps(summary.to_dict()),
                ),
            )
            self._requests(db, run_id, idx, repetition, records)

    def restate_level(self, run_id: str, idx: int, repetition: int, status: str, summary: LevelSummary) -> None:
        """A stored level's status and summary, changed by what was learnt after it was stored (its server gone)."""
        with self.tx() as db:
            db.execute("UPDATE levels SET status = ?, summary = ? WHERE run_id = ? AND idx = ? AND repetition = ?",
                       (status, json.dumps(summary.to_dict()), run_id, idx, repetition))

    def save_requests(self, run_id: str, idx: int, repetition: int, records: list[RequestRecord]) -> None:
        """Records of a level still running (a soak's sessions it let go): its ``save_level`` stores the rest."""
        with self.tx() as db:
            self._requests(db, run_id, idx, repetition, records)

    @staticmethod
    def _requests(db: sqlite3.Connection, run_id: str, idx: int, repetition: int,
                  records: list[RequestRecord]) -> None:
        # a generator, not a list: each row's JSON is written and dropped (a list held every row's at once,
        # 2 KiB a 64-token record: 77 MiB more at the end of a soak's 38,000 turns)
        db.executemany(
            "INSERT INTO requests VALUES (?, ?, ?, ?, ?, ?, ?)",
            ((run_id, idx, repetition, r.index, r.phase, int(r.ok), json.dumps(r.to_dict())) for r in records),
        )

    def save_telemetry(self, run_id: str, level_idx: int, repetition: int,
                       samples: list[tuple[int, dict[str, float]]], source: str = "metrics") -> None:
        with self.tx() as db:
            db.executemany(
                "INSERT INTO telemetry VALUES (?, ?, ?, ?, ?, ?)",
                [(run_id, level_idx, repetition, t, source, json.dumps(v)) for t, v in samples],
            )

    def telemetry(self, run_id: str, level_idx: int | None = None) -> list[tuple[int, int, int, dict[str, float]]]:
        q = "SELECT level_idx, repetition, t_ns, sample FROM telemetry WHERE run_id = ?"
        args: tuple[Any, ...] = (run_id,)
        if level_idx is not None:
            q += " AND level_idx = ?"
            args += (level_idx,)
        return [(r[0], r[1], r[2], json.loads(r[3])) for r in self.db.execute(q + " ORDER BY t_ns", args)]

    def finish_run(self, run_id: str, status: str, finished: str, error: str | None = None) -> None:
        with self.tx() as db:
            db.execute(
                "UPDATE runs SET status = ?, finished = ?, error = ? WHERE id = ?", (status, finished, error, run_id)
            )

    # --- reading -------------------------------------------------------------------------------------

    def _row(self, r: sqlite3.Row) -> RunRow:
        d = dict(r)
        d["manifest"] = json.loads(d["manifest"])
        if d["status"] == "running" and process_gone(d["manifest"].get("process")):
            d["status"] = "abandoned"
            d["error"] = d["error"] or "the process running it is gone (killed, or the machine restarted)"
        return RunRow(**d)

    def runs(self, limit: int = 50) -> list[RunRow]:
        rows = self.db.execute("SELECT * FROM runs ORDER BY started DESC, id DESC LIMIT ?", (limit,))
        return [self._row(r) for r in rows]

    def runs_labelled(self, label: str) -> list[RunRow]:
        """Every run with this label, newest first."""
        rows = self.db.execute("SELECT * FROM runs WHERE label = ? ORDER BY started DESC, id DESC", (label,))
        return [self._row(r) for r in rows]

    def resolve(self, ref: str, latest: bool = False, kinds: tuple[str, ...] | None = None,
                command: str = "") -> RunRow:
        """A run by id, unique id prefix, or label, or "last": the newest (of ``kinds``). A label several runs
        share is refused with the candidates, unless ``latest`` (then the newest is taken); a run whose kind is not
        in ``kinds`` is refused by name."""
        if not ref.strip():
            raise UsageError("a run is named by its id, an id prefix or its label, not by nothing: see tokenbench runs")
        # an id, or a prefix of one as written (LIKE would take % and _ as patterns)
        rows = self.db.execute("SELECT * FROM runs WHERE substr(id, 1, ?) = ? ORDER BY started DESC",
                               (len(ref), ref)).fetchall()
        rows = [x for x in rows if x["id"] == ref] or rows
        if len(rows) > 1:
            raise UsageError(f"run '{ref}' is ambiguous ({len(rows)} runs start so): give more of the id")
        r = self._row(rows[0]) if rows else self._labelled(ref, latest, kinds)
        if r is None and ref == "last":  # the newest run (of the kinds asked for), unless a label says "last"
            of = [x for x in self.db.execute("SELECT id, kind FROM runs ORDER BY started DESC, id DESC")]
            newest = next((x["id"] for x in of if not kinds or x["kind"] in kinds), of[0]["id"] if of else None)
            r = self._row(self.db.execute("SELECT * FROM runs WHERE id = ?", (newest,)).fetchone()) if newest else None
        if r is None:
            # an import of several boxes labels each LABEL/box/model/weights: name them where the label was given
            under = [x["label"] for x in self.db.execute(
                "SELECT DISTINCT label FROM runs WHERE substr(label, 1, ?) = ? ORDER BY label", (len(ref) + 1, ref + "/"))]
            if under:
                more = f" and {len(under) - 3} more" if len(under) > 3 else ""
                raise UsageError(f"no run '{ref}' in {self.path}; runs labelled under it: {', '.join(under[:3])}{more}")
            raise UsageError(f"no run '{ref}' in {self.path}: 'tokenbench runs' lists them")
        if kinds and r.kind not in kinds:
            # the command that reads such a run, where it is another: quality runs have their own compare
            other = " ('tokenbench quality compare' compares quality runs)" \
                if r.kind == "quality" and command == "compare" else ""
            raise UsageError(f"run {r.label or r.id} is a {r.shown_kind} run: {command or 'this command'} takes "
                             f"{' or '.join(kinds)} runs{other}")
        return r

    def _labelled(self, label: str, latest: bool, kinds: tuple[str, ...] | None) -> RunRow | None:
        """The run a label names: the one of ``kinds`` where several share it, or the newest of them with ``latest``
        (a box's speed runs and its quality runs share a label: compare --latest took the newer quality run)."""
        rows = self.runs_labelled(label)
        if kinds:
            rows = [x for x in rows if x.kind in kinds] or rows
        if len(rows) > 1 and not latest:
            shown = "; ".join(f"{x.id} ({x.shown_kind}, {x.started})" for x in rows[:5])
            more = f" and {len(rows) - 5} more" if len(rows) > 5 else ""
            raise UsageError(f"label '{label}' names {len(rows)} runs: {shown}{more}; give a run id, or --latest "
                             "for the newest")
        return rows[0] if rows else None

    def level_counts(self, run_ids: list[str]) -> dict[str, int]:
        """Levels per run, counted in SQL (loading every level's summary made `runs` take 22 s on a big import)."""
        if not run_ids:
            return {}
        marks = ",".join("?" * len(run_ids))
        rows = self.db.execute(f"SELECT run_id, COUNT(DISTINCT idx) FROM levels WHERE run_id IN ({marks}) "
                               "GROUP BY run_id", run_ids)
        return {r[0]: r[1] for r in rows}

    def runs_from_source(self, digest: str) -> list[str]:
        """Runs imported from a file with these bytes (its SHA-256), oldest first."""
        rows = self.db.execute("SELECT id FROM runs WHERE json_extract(manifest, '$.source_sha256') = ? "
                               "ORDER BY started, id", (digest,))
        return [r[0] for r in rows]

    def levels(self, run_id: str, first: int | None = None) -> list[tuple[int, int, str, LevelSummary]]:
        """The run's levels; ``first``: only those of the first ``first`` positions."""
        rows = self.db.execute(
            "SELECT idx, repetition, status, summary FROM levels WHERE run_id = ? AND idx < ? ORDER BY idx, repetition",
            (run_id, first if first is not None else 2**62),
        )
        return [(r[0], r[1], r[2], LevelSummary.from_dict(json.loads(r[3]))) for r in rows]

    def requests(self, run_id: str, level_idx: int | None = None, repetition: int | None = None
                 ) -> list[RequestRecord]:
        q = "SELECT record FROM requests WHERE run_id = ?"
        args: tuple[Any, ...] = (run_id,)
        if level_idx is not None:
            q += " AND level_idx = ?"
            args += (level_idx,)
        if repetition is not None:  # a replay's trees are numbered afresh in each repetition
            q += " AND repetition = ?"
            args += (repetition,)
        # in the order sent: a soak stores the sessions it let go before the level's end stores the rest
        return [RequestRecord.from_dict(json.loads(r[0]))
                for r in self.db.execute(q + " ORDER BY level_idx, repetition, idx", args)]

    #: What a record's times and token counts are (``request_times``), as stored: the rest is not read.
    TIMED = ("index", "sent_ns", "first_token_ns", "end_ns", "input_tokens", "output_tokens")

    def request_times(self, run_id: str, level_idx: int) -> list[RequestRecord]:
        """A level's measured successful requests with their times and token counts only (what compare's bootstrap
        resamples): SQLite reads the fields out of each record, never its chunk stamps, most of a long answer's
        bytes (10,000 records of 64 tokens: 0.4 s through ``requests``)."""
        fields = ", ".join(f"json_extract(record, '$.{f}')" for f in self.TIMED)
        rows = self.db.execute(f"SELECT {fields} FROM requests WHERE run_id = ? AND level_idx = ? AND "
                               "phase = 'measured' AND ok = 1", (run_id, level_idx))
        return [RequestRecord(**{k: v for k, v in zip(self.TIMED, r) if v is not None}) for r in rows]

    # --- quality items (quality/items.py's Item rows) --------------------------------------------------

    QUALITY_COLUMNS = ("task", "idx", "key", "status", "score", "latency_ms", "prompt_tokens",
                       "expected_prompt_tokens", "output_tokens", "reasoning_tokens", "prompt", "response",
                       "reasoning", "expected", "error", "detail")

    def save_quality_items(self, run_id: str, rows: list[dict[str, Any]]) -> None:
        """Items of a quality run, each as it finishes (a killed run keeps those it finished)."""
        cols = self.QUALITY_COLUMNS
        with self.tx() as db:
            db.executemany(f"INSERT OR REPLACE INTO quality_items (run_id, {', '.join(cols)}) "
                           f"VALUES (?, {', '.join('?' * len(cols))})",
                           [(run_id, *(r[c] for c in cols)) for r in rows])

    def quality_items(self, run_id: str) -> list[dict[str, Any]]:
        if "quality_items" not in {r[0] for r in self.db.execute("SELECT name FROM sqlite_master")}:
            return []  # a read-only database from before migration 003
        q = f"SELECT {', '.join(self.QUALITY_COLUMNS)} FROM quality_items WHERE run_id = ? ORDER BY task, idx"
        return [dict(r) for r in self.db.execute(q, (run_id,))]
