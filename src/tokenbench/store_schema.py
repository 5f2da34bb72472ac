"""The results database's schema: named, append-only migrations (never edit one that has shipped; add the next),
applied in order by ``Store.migrate``."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable


def _script(db: sqlite3.Connection, sql: str) -> None:
    """Run statements one by one: ``executescript`` would commit the migration's transaction half way."""
    for stmt in sql.split(";"):
        lines = [ln.split("--", 1)[0] for ln in stmt.splitlines()]
        if "".join(lines).strip():
            db.execute("\n".join(lines))


def _m001_initial(db: sqlite3.Connection) -> None:
    _script(
        db,
        """
        CREATE TABLE runs (
            id TEXT PRIMARY KEY,
            kind TEXT NOT NULL,
            label TEXT,
            status TEXT NOT NULL,          -- running | complete | partial | interrupted | failed
            started TEXT NOT NULL,
            finished TEXT,
            tool_version TEXT NOT NULL,
            provenance TEXT NOT NULL DEFAULT 'measured',
            error TEXT,
            manifest TEXT NOT NULL         -- JSON: endpoint, model, engine, workload, machine, command, seed
        );
        CREATE INDEX runs_label ON runs(label);
        CREATE TABLE levels (
            run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
            idx INTEGER NOT NULL,          -- position in the sweep
            repetition INTEGER NOT NULL,
            concurrency INTEGER,
            rate REAL,
            status TEXT NOT NULL,          -- complete | interrupted | failed
            started TEXT,
            finished TEXT,
            window_start_ns INTEGER,
            window_end_ns INTEGER,
            summary TEXT NOT NULL,         -- JSON LevelSummary
            PRIMARY KEY (run_id, idx, repetition)
        );
        CREATE TABLE requests (
            run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
            level_idx INTEGER NOT NULL,
            repetition INTEGER NOT NULL,
            idx INTEGER NOT NULL,
            phase TEXT NOT NULL,
            ok INTEGER NOT NULL,
            record TEXT NOT NULL           -- JSON RequestRecord, raw perf_counter_ns timestamps
        );
        CREATE INDEX requests_level ON requests(run_id, level_idx, repetition);
        """
    )


def _m002_telemetry(db: sqlite3.Connection) -> None:
    _script(
        db,
        """
        CREATE TABLE telemetry (
            run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
            level_idx INTEGER NOT NULL,
            repetition INTEGER NOT NULL,
            t_ns INTEGER NOT NULL,         -- perf_counter_ns of the sample
            source TEXT NOT NULL,          -- 'metrics' (the server's /metrics), 'nvml'
            sample TEXT NOT NULL           -- JSON {metric name: value}, the names telemetry.py summarizes
        );
        CREATE INDEX telemetry_level ON telemetry(run_id, level_idx, repetition)
        """,
    )


def _m003_quality_items(db: sqlite3.Connection) -> None:
    _script(
        db,
        """
        CREATE TABLE quality_items (
            run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
            task TEXT NOT NULL,            -- niah, agreement, knob ..., or an lm-evaluation-harness task
            idx INTEGER NOT NULL,
            key TEXT NOT NULL,             -- pairs the item with the same item of another run
            status TEXT NOT NULL,          -- pass | fail | done | timeout | error
            score REAL,
            latency_ms REAL,
            prompt_tokens INTEGER,         -- the server's usage
            expected_prompt_tokens INTEGER,  -- our tokenizer's count of what was sent
            output_tokens INTEGER,
            reasoning_tokens INTEGER,
            prompt TEXT NOT NULL,
            response TEXT NOT NULL,
            reasoning TEXT NOT NULL,
            expected TEXT,
            error TEXT,
            detail TEXT NOT NULL,          -- JSON: the quality task's facts (depth, needle, token ids, metrics)
            PRIMARY KEY (run_id, task, idx)
        )
        """,
    )


MIGRATIONS: list[tuple[str, Callable[[sqlite3.Connection], None]]] = [
    ("001_initial", _m001_initial),
    ("002_telemetry", _m002_telemetry),
    ("003_quality_items", _m003_quality_items),
]
