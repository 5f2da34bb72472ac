"""Agent sessions on the real servers, the prefix cache on: vLLM (automatic prefix caching) and llama.cpp's
llama-server (its slot cache, asked for with cache_prompt and kept per agent with id_slot).

What must hold on both: from the second turn on the server says it served cached tokens, the responses' cached
share agrees with the server's own /metrics counters where it has them, and a turn with the cache warm starts
sooner than the same turn with a marker that busts the cache, at the same context. Measured on this 2-core
machine with the tiny model (1K shared prompt, 1K task, 384-token tool results, contexts up to about 5K tokens):
vLLM 59-87 ms warm against 233-381 ms busted from turn 2 on, cached 79% by usage and by /metrics alike;
llama-server 155-327 ms against 0.6-1.3 s, cached 78% both ways (its turn 1 is 0% cached: a slot starts empty,
and llama.cpp's slots share no prefix).

These need the engines built (`make engines`); they skip without them and fail instead under CI.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conftest import need_modules
from servers import Serving
from tokenbench.cli import main

pytestmark = pytest.mark.engine
need_modules("torch", "gguf")

#: Long enough that prefilling the whole context costs more than the server's fixed overhead per request.
WORKLOAD = ["--sessions", "2", "--turns", "6", "--shared-prefix", "1024", "--input-len", "1024",
            "--tool-len", "384", "--output-len", "8", "--metrics-interval", "1s", "--guard", "off", "--quiet"]


def _session_run(url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    out = tmp_path / "sessions.json"
    code = main(["sweep", "--url", url, *WORKLOAD, "--json", str(out)])
    printed = capsys.readouterr()
    assert code == 0, printed.err
    print(printed.out)  # the turn table, in the test's log
    return dict(json.loads(out.read_text()))


def _check_cache(run: dict[str, Any], server_counts: bool) -> None:
    warm, busted = (lv["session"] for lv in run["levels"])
    assert (warm["cache"], busted["cache"]) == ("warm", "busted")
    assert warm["sessions_finished"] == busted["sessions_finished"] == 2
    assert len(warm["turns"]) == len(busted["turns"]) == 6
    # cached tokens above 0 from the second turn on, most of the prompt by the last
    for t in warm["turns"][1:]:
        assert t["cached_tokens_mean"] > 0 and t["uncached_tokens_mean"] < t["context_tokens_mean"]
    last = warm["turns"][-1]
    assert last["cached_tokens_mean"] / last["context_tokens_mean"] > 0.6
    assert warm["cached_share"] > 0.5 and busted["cached_share"] < 0.05
    if server_counts:  # the responses' count against the server's own counters over the same level
        assert warm["server_hit_share"] == pytest.approx(warm["cached_share"], abs=0.05)
        assert busted["server_hit_share"] < 0.05
    # the same turn at the same context: warm starts sooner than busted (summed over turns 2-6, so one
    # scheduling hiccup cannot decide it, and at the last turn alone)
    for w, b in zip(warm["turns"], busted["turns"]):
        assert w["context_tokens_mean"] == pytest.approx(b["context_tokens_mean"], rel=0.02)
    warm_ttft = sum(t["ttft_ms"]["p50"] for t in warm["turns"][1:])
    busted_ttft = sum(t["ttft_ms"]["p50"] for t in busted["turns"][1:])
    assert warm_ttft < busted_ttft, (warm_ttft, busted_ttft)
    assert warm["turns"][-1]["ttft_ms"]["p50"] < busted["turns"][-1]["ttft_ms"]["p50"]


def test_vllm_session_is_served_from_its_prefix_cache(vllm_tiny: Serving, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    run = _session_run(vllm_tiny.server.base_url, tmp_path, capsys)
    assert {lv["session"]["cached_source"] for lv in run["levels"]} == {"usage"}
    _check_cache(run, server_counts=True)
    # its cached tokens by tier: all from the device (no offload tier is configured), as many as its hits
    warm = run["levels"][0]["telemetry"]
    assert set(warm["cached_by_tier"]) == {"device"}, warm["cached_by_tier"]
    assert warm["cached_by_tier"]["device"] == warm["counters"]["prefix_hits"]


def test_llama_server_session_keeps_each_agent_in_its_slot(llama_tiny_4: Serving, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    run = _session_run(llama_tiny_4.server.base_url, tmp_path, capsys)
    # two agents on a server of four slots: each keeps one of its own
    assert run["manifest"]["server"]["slots"] == 4
    # llama.cpp says what its slot held (usage's prompt_tokens_details, or timings.cache_n in older builds)
    assert {lv["session"]["cached_source"] for lv in run["levels"]} <= {"server_timings", "usage"}
    _check_cache(run, server_counts=True)


def test_a_soak_on_llama_server_reads_its_cache_in_every_tenth(llama_tiny_4: Serving, tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str],
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Four agents, each on its slot, start sessions back to back for 8 s: every tenth of the run has its turns
    and the server's cached share, steady (the cache holds), and no decay is flagged. The soak keeps 16 turns in
    memory (a soak keeps 10,000), so it lets most sessions go: its cached share, counts and tokens are still every
    stored turn's, as the server reported them."""
    from tokenbench import sessions
    from tokenbench.metrics import summarize
    from tokenbench.store import Store

    monkeypatch.setattr(sessions, "KEEP_TURNS", 16)
    out = tmp_path / "soak.json"
    assert main(["sweep", "--url", llama_tiny_4.server.base_url, "--sessions", "4", "--turns", "4",
                 "--shared-prefix", "0", "--input-len", "64", "--tool-len", "64", "--output-len", "8",
                 "--think-time", "100ms", "--duration", "8s", "--no-baseline", "--guard", "off", "--quiet",
                 "--db", str(tmp_path / "r.db"), "--json", str(out)]) == 0, capsys.readouterr().err
    [level] = json.loads(out.read_text())["levels"]
    s = level["session"]
    shares = [w["cached_share"] for w in s["over_time"]]
    with capsys.disabled():
        print(f"\nsoak: {s['sessions']} sessions ({s['cut']} cut), cached share by tenth {[round(x, 2) for x in shares]}")
    assert len(shares) == 10 and all(x is not None and abs(x - s["cached_share"]) < 0.2 for x in shares), shares
    assert s["sessions"] > 8 and s["cut"] <= 4 and "cache_decay" not in level["flags"]
    store = Store(tmp_path / "r.db")
    stored = store.requests(store.runs()[0].id, 0)
    start, end = store.db.execute("SELECT window_start_ns, window_end_ns FROM levels").fetchone()
    every = summarize(stored, concurrency=4, rate=None, window_start_ns=start, window_end_ns=end)
    assert s["sampled_sessions"] is not None and s["sampled_sessions"] < s["sessions"], s
    assert (level["completed"], level["total_input_tokens"]) == (every.completed, every.total_input_tokens)
    assert every.cached_share is not None and level["cached_share"] == pytest.approx(every.cached_share)
