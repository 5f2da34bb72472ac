"""compare, cost and recommend as a library: each command's one entrypoint called with its typed config,
no argparse in between, answers with a typed result (what the CLI prints and writes as JSON)."""

from __future__ import annotations

from pathlib import Path

import pytest

from test_compare_cost_report import _run, serve
from test_session_views import session_runs

from tokenbench.compare.runs import CompareConfig, Compared, compare_runs
from tokenbench.cost import CostConfig, Costed, cost
from tokenbench.errors import UsageError
from tokenbench.recommend import RecommendConfig, Recommendation, recommend
from tokenbench.store import Store


@pytest.fixture
def sessions_db(tmp_path: Path) -> Path:
    """Two agent-session runs (h100 priced in EUR, strix unpriced) and a plain sweep."""
    return session_runs(tmp_path / "s.db")


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
    assert c.effective == ["mini-pc: ~13.1 s as one sequential stream (8 requests in turn, each TTFT 50 ms + 99 x "
                           "TPOT 16.0 ms)",  # 8 agents x 100 tokens
                           "gpu: ~5.4 s batched (2 rounds of 4, each TTFT 120 ms + 99 x TPOT 26.0 ms); 150 tok/s "
                           "aggregate (measured at concurrency 4, the nearest)"]
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


def test_cost_prices_a_rate_and_says_an_api_price_it_cannot_convert() -> None:
    done = cost(CostConfig(tps=684, price_per_hour=1.79, currency="EUR", api_price=14))
    assert isinstance(done, Costed)
    assert done.run is None and done.sessions is None and done.currency == "EUR" and done.api == 14
    (p,) = done.points
    assert p.operating_point == "given rate" and f"{p.cost_per_mtok:.2f}" == "0.73" and p.vs_api() == "19.3x cheaper"
    assert done.to_dict() == {"tool": "tokenbench", "kind": "cost", "currency": "EUR", "run_id": None, "predicted": None,
                              "pricing": "rented at 1.79 EUR/hour", "points": [
                                  {"operating_point": "given rate", "output_tps": 684, "cost_per_mtok": p.cost_per_mtok,
                                   "api_cost_per_mtok": 14}]}
    usd = cost(CostConfig(tps=684, price_per_hour=1.79, currency="EUR", api_price=14, api_currency="USD"))
    assert usd.api is None and usd.api_note is not None and usd.api_note.startswith("API: 14 USD/M output tokens")
    owned = cost(CostConfig(tps=100, owned=True, purchase=2500, watts=100, kwh_price=0.25))
    assert owned.pricing.owned and owned.currency == "USD"
    with pytest.raises(UsageError, match="give a run, or --tps"):
        cost(CostConfig())
    with pytest.raises(UsageError, match="--owned needs --purchase"):
        cost(CostConfig(tps=100, owned=True))


def test_cost_prices_a_run_at_its_own_price_and_a_session_run_per_session(tmp_path: Path, sessions_db: Path) -> None:
    db = tmp_path / "c.db"
    _run(Store(db), "gpu", [serve(1, 40, 80, 25), serve(16, 500, 300, 32)], model="m", price_per_hour=1.2,
         currency="EUR")
    done = cost(CostConfig(run="gpu", db=str(db)))
    assert done.run is not None and done.run.run_id == "run-gpu" and done.sessions is None
    assert done.currency == "EUR" and done.pricing.price_per_hour == 1.2
    assert [p.output_tps for p in done.points] == [40, 500]
    assert done.points[1].cost_per_mtok == pytest.approx(1.2 / (500 * 3600) * 1e6)
    sessions = cost(CostConfig(run="strix", price_per_hour=0.4, db=str(sessions_db)))
    assert sessions.sessions is not None
    assert [(p.level, p.sessions_finished) for p in sessions.sessions] == [
        ("4 warm", 8), ("4 busted", 7), ("8 warm", 8), ("8 busted", 7)]
    assert [p["level"] for p in sessions.to_dict()["sessions"]] == ["4 warm", "4 busted", "8 warm", "8 busted"]


def test_recommend_answers_a_typed_config_with_a_ranking(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    _run(Store(db), "my-h100", [serve(16, 700, 1000, 20)], model="qwen3.6-35b-a3b", price_per_hour=1.79)
    done = recommend(RecommendConfig("qwen3.6-35b-a3b", agents=16, ttft_p99_ms=10_000, currency="EUR",
                                     prices=("nvidia-l40s=0.9",), runs=("my-h100",), db=str(db)))
    assert isinstance(done, Recommendation)
    assert done.workload.ttft_p99_ms == 10_000 and done.workload.currency == "EUR" and not done.capacity
    costs = [c.cost_per_mtok or 0 for c in done.ranked]
    assert len(costs) >= 3 and costs == sorted(costs)
    assert any(c.box == "my-h100" and c.source == "measured" for c in done.ranked)
    assert done.closest == [] and done.excluded and all(c.excluded for c in done.excluded)
    doc = done.to_dict()
    assert doc["kind"] == "recommend" and doc["ranked_by"] == "cost_per_mtok" and doc["currency"] == "EUR"
    assert [c["box"] for c in doc["ranked"]] == [c.box for c in done.ranked]
    with pytest.raises(UsageError, match="--capacity ranks by the agents"):
        recommend(RecommendConfig("qwen3.6-35b-a3b", capacity=True))
    with pytest.raises(UsageError, match="--agents must be at least 1"):
        recommend(RecommendConfig("qwen3.6-35b-a3b", agents=0))


@pytest.mark.parametrize("cost_, api, said", [(12.88, 13.34, "1.04x cheaper"), (13.34, 12.88, "1.04x dearer"),
                                              (1.0, 3.0, "3.0x cheaper"), (2.5, 1.0, "2.5x dearer"), (1.0, 1.0, "the same price"),
                                              (1.004, 1.0, "the same price"), (1.006, 1.0, "1.01x dearer")])
def test_a_price_against_the_api_keeps_what_tells_two_prices_apart(cost_: float, api: float, said: str) -> None:
    """A ratio under 1.1 gets two decimals: 13.34 against 12.88 read "1.0x dearer", as equal prices did; prices
    within half a percent are the same price, not "1.00x dearer"."""
    from tokenbench.pricing import vs_api

    assert vs_api(cost_, api) == said
