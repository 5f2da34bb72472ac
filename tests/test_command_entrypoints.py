"""compare as a library (issue 20): each command's one entrypoint called with its typed config,
no argparse in between, answers with a typed result (what the CLI prints and writes as JSON)."""

from __future__ import annotations

from pathlib import Path

import pytest

from test_compare_cost_report import _run, serve
from test_session_views import _serve, _store, session_level

from tokenbench.compare import CompareConfig, Compared, compare_runs
from tokenbench.errors import UsageError
from tokenbench.store import Store


@pytest.fixture
def sessions_db(tmp_path: Path) -> Path:
    """Two agent-session runs (h100 priced in EUR, strix unpriced) and a plain sweep."""
    path = tmp_path / "s.db"
    store = Store(path)
    _store(store, "h100", [session_level(c, m, prefill_tps=20000, tpot_ms=10) for c in (1, 4)
                           for m in ("warm", "busted")], price_per_hour=2.5, currency="EUR")
    _store(store, "strix", [session_level(c, m, prefill_tps=800, tpot_ms=25, fail=int(m == "busted"))
                            for c in (4, 8) for m in ("warm", "busted")])
    store.save_run("run-plain", "sweep", "plain", {"label": "plain", "model": "m"}, "measured",
                   [_serve(1, 50), _serve(4, 150)], "0", "2026", "2026")
    return path


def test_compare_runs_answers_a_typed_config_with_a_typed_comparison(tmp_path: Path) -> None:
    db = tmp_path / "c.db"
    store = Store(db)
    _run(store, "mini-pc", [serve(1, 60, 50, 16), serve(4, 62, 400, 16), serve(16, 61, 2000, 16)], model="m")
    _run(store, "gpu", [serve(1, 40, 80, 25), serve(4, 150, 120, 26), serve(16, 500, 300, 32)], model="m")
    done = compare_runs(CompareConfig("mini-pc", "gpu", agents=8, tokens=100, db=str(db)))
    assert isinstance(done, Compared)
    assert (done.run_a.run_id, done.run_b.run_id) == ("run-mini-pc", "run-gpu")
    assert done.sessions is None and done.capacity is None and done.quality is None
    c = done.comparison
    assert {r.concurrency for r in c.rows} == {1, 4, 16}
    assert c.effective == ["mini-pc: ~13.3 s as one sequential stream at 60.0 tok/s",  # 8 agents x 100 tokens
                           "gpu: ~5.3 s batched, 150 tok/s aggregate (measured at concurrency 4, the nearest)"]
    doc = done.to_dict()
    assert doc["tool"] == "tokenbench" and doc["kind"] == "compare"
    assert doc["quality"] is None and doc["capacity"] is None and "sessions" not in doc
    assert len(doc["rows"]) == len(c.rows) and doc["rows"][0]["winner"] in ("mini-pc", "gpu", None)


def test_compare_runs_turn_by_turn_and_refuses_a_session_run_beside_a_sweep(sessions_db: Path) -> None:
    done = compare_runs(CompareConfig("h100", "strix", db=str(sessions_db)))
    assert done.sessions is not None and [b.concurrency for b in done.sessions.blocks] == [4]
    (block,) = done.to_dict()["sessions"]["blocks"]
    assert block["turns"][4]["warm_ratio"] == pytest.approx(250.0 / 5050.0)
    with pytest.raises(UsageError, match="compare session runs with session runs"):
        compare_runs(CompareConfig("h100", "plain", db=str(sessions_db)))
