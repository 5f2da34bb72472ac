"""Quality parity without a real engine: the statistics against hand computations, the haystack, the knob
parser, the store, and the whole command against a fake server that answers needles right, half wrong, or
too slowly (a fake to inject what a real engine will not do on demand; tests/test_quality_engines.py runs the
real ones)."""

from __future__ import annotations

import asyncio
import json
import math
import os
import random
import re
import sqlite3
import subprocess
import sys
from pathlib import Path
import pytest
from aiohttp import web

from tokenbench.cli import main
from tokenbench.emitter import BackgroundEmitter, Emitter, EmitterConfig
from tokenbench.quality import agreement, haystack, knob, stats
from tokenbench.quality.items import Item
from tokenbench.store import Store

# --- statistics, against hand computations -------------------------------------------------------------------


def test_mcnemar_exact_matches_the_binomial_by_hand() -> None:
    # b=1, c=9: 2 * (C(10,0) + C(10,1)) / 2^10 = 22/1024
    assert stats.mcnemar_exact(1, 9) == pytest.approx(22 / 1024)
    assert stats.mcnemar_exact(9, 1) == pytest.approx(22 / 1024)
    # b=0, c=6: 2 * 1/64
    assert stats.mcnemar_exact(0, 6) == pytest.approx(2 / 64)
    # b=2, c=5: 2 * (1 + 7 + 21) / 128
    assert stats.mcnemar_exact(2, 5) == pytest.approx(58 / 128)
    assert stats.mcnemar_exact(3, 3) == 1.0 and stats.mcnemar_exact(0, 0) == 1.0


def test_bootstrap_is_seeded_and_brackets_the_mean() -> None:
    assert stats.bootstrap_interval([0.25] * 7) == (0.25, 0.25)
    diffs = [1.0] * 5 + [0.0] * 5
    lo, hi = stats.bootstrap_interval(diffs, seed=3)
    assert (lo, hi) == stats.bootstrap_interval(diffs, seed=3)
    # normal approximation by hand: 0.5 ± 1.96 * sqrt(0.25 / 10) = 0.5 ± 0.31
    assert lo == pytest.approx(0.19, abs=0.1) and hi == pytest.approx(0.81, abs=0.1)


def test_items_needed_by_hand() -> None:
    # Connor (1987) with psi = delta = 0.02 (identical runs): (1.95996*0.141421 + 0.841621*0.14)^2 / 0.0004
    assert stats.items_needed_binary(0.0) == 391
    # psi = 0.1: (1.95996*0.316228 + 0.841621*0.315595)^2 / 0.0004 = 1959.9
    assert stats.items_needed_binary(0.1) == 1960
    # scores: ((1.95996 + 0.841621) * 0.3 / 0.02)^2 = 1765.99
    assert stats.items_needed_scores(0.3) == 1766
    assert stats.items_needed_scores(0.0) is None


def test_wilson_interval_by_hand() -> None:
    lo, hi = stats.wilson_interval(8, 10)
    assert lo == pytest.approx(0.4902, abs=1e-3) and hi == pytest.approx(0.9433, abs=1e-3)


def test_compare_paired_verdicts() -> None:
    a = [1.0] * 16
    worse = [1.0, 0.0] * 8
    p = stats.compare_paired(a, worse)
    assert (p.a_only, p.b_only, p.test) == (8, 0, "mcnemar")
    assert p.p_value == pytest.approx(2 / 256) and p.verdict == "A better"
    assert p.diff_points == pytest.approx(50.0) and p.ci_points[0] > 0
    same = stats.compare_paired(a, a)
    assert same.verdict == "same within noise" and same.p_value == 1.0 and same.items_needed == 391
    scores = stats.compare_paired([0.5, 0.7, 0.9, 0.6] * 5, [0.4, 0.6, 0.9, 0.5] * 5)
    assert scores.test == "sign-flip" and scores.verdict == "A better"


def test_a_pass_fail_interval_holds_the_true_difference_on_few_items() -> None:
    """Runs that agree on every item read as certain: the bootstrap resampled pairs whose differences were all 0,
    and gave [+0.0, +0.0] for 6 needles. A pass/fail interval now says what the items can show, and holds the true
    difference 95% of the time where the bootstrap held a 5-point one 65% of the time over 20 items."""
    six = stats.compare_paired([1.0] * 6, [1.0] * 6)
    # no pair disagrees and a margin is empty (phi 0): each side is the Wilson bound of 6/6, 6 / (6 + z^2)
    side = 100 * (1 - 6 / (6 + 1.959964 ** 2))
    assert six.ci_points == pytest.approx((-side, side), abs=0.01) and round(side) == 39
    wide = [stats.compare_paired([1.0, 0.0] * (n // 2), [1.0, 0.0] * (n // 2)).ci_points[1] for n in (6, 60, 600)]
    assert wide[0] > wide[1] > wide[2] > 0, wide
    rng = random.Random(7)
    held = 0
    for _ in range(400):  # A passes 5% of items B fails, never the reverse: 5 points better
        draws = [rng.random() for _ in range(20)]
        a = [1.0 if r < 0.95 else 0.0 for r in draws]
        b = [1.0 if 0.05 <= r < 0.95 else 0.0 for r in draws]
        lo, hi = stats.compare_paired(a, b).ci_points
        held += lo <= 5.0 <= hi
    assert held >= 0.93 * 400, held
    # a known table (15 pairs only A passed, 5 only B, 10 both, 20 neither), within its 95% bounds
    lo, hi = stats.paired_share_interval(15, 5, 10, 20)
    assert lo < 0.2 < hi and 0 < lo < 0.05 and 0.3 < hi < 0.4


# --- the haystack, agreement, knob parsing --------------------------------------------------------------------


class Words:
    """A whitespace tokenizer: one token per word."""

    async def encode(self, text: str) -> list[int]:
        return [hash(w) % 1000 for w in text.split()]


def test_needle_scoring_is_exact() -> None:
    assert haystack.score(" 4821930.", "4821930")
    assert haystack.score("The secret number is 4,821,930", "4821930")
    assert not haystack.score("482193", "4821930")
    assert not haystack.score("48219301", "4821930")
    assert not haystack.score("I think 1234567, or 4821930", "4821930")
    assert not haystack.score("", "4821930")


def _cell(context: int, depth: int, seed: int) -> haystack.Cell:
    return asyncio.run(haystack.build_cell(Words(), context, depth, seed=seed, chat=True))


def test_cells_fit_their_context_and_place_the_needle() -> None:
    for depth in (10, 50, 90):
        cell = _cell(1000, depth, 1)
        assert 900 < cell.prompt_tokens <= 1000
        assert haystack.needle_sentence(cell.needle) in cell.prompt
        assert abs(cell.actual_depth - depth) < 5
        before = cell.prompt.index(cell.needle) / len(cell.prompt)
        assert abs(before - depth / 100) < 0.08
    again = _cell(1000, 50, 1)
    assert again == _cell(1000, 50, 1) and _cell(1000, 50, 2).needle != again.needle
    assert not any(ch.isdigit() for s in haystack.filler_sentences() for ch in s)


def test_a_cell_leaves_room_for_the_template_and_the_answer() -> None:
    """A 1k cell sent 1,029 prompt tokens to llama-server on the chat API (its template's tokens were not taken
    off), and a server of exactly that context refused every needle. The prompt, what the server adds around it
    and the answer asked now fit the context; a context that holds no filler is refused before a cell is sent."""
    cell = asyncio.run(haystack.build_cell(Words(), 1000, 50, seed=1, chat=True, around=35, answer=64))
    assert 850 < cell.prompt_tokens <= 1000 - 35 - 64
    assert haystack.needle_sentence(cell.needle) in cell.prompt
    least = asyncio.run(haystack.least_context(Words(), True, 35, 64))
    bare = asyncio.run(haystack.build_cell(Words(), least, 50, seed=1, chat=True, around=35, answer=64))
    assert bare.prompt_tokens + 35 + 64 <= least


def test_a_context_too_small_for_a_needle_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    """--contexts 10,100 sent the same 107-token prompt twice, labelled 10 and 100."""
    with serve(Answering()) as a:
        assert main(["quality", "--url", a.url, "--label", "small", "--tasks", "niah", "--contexts", "10,100",
                     "--depths", "50"]) == 2
        assert not any("secret number" in str(b) for b in a.emitter.requests_seen[1:]), "a needle was sent"
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--contexts 10: a needle cell needs" in err[0] and "64-token answer" in err[0], err


def test_agreement_first_difference() -> None:
    assert agreement.first_difference([1, 2, 3], [1, 2, 3]) is None
    assert agreement.first_difference([1, 2, 3], [1, 5, 3]) == 1
    assert agreement.first_difference([1, 2], [1, 2, 3]) == 2
    ag = agreement.agreement([([1, 2], [1, 2]), ([1, 2, 3], [1, 9, 3]), ([4, 4, 4], [4, 4, 5])], "tokens")
    assert (ag.identical, ag.n, ag.first_diff_median) == (1, 3, 1.5)
    assert agreement.prompts(4, 0, True) == agreement.prompts(4, 0, True) != agreement.prompts(4, 1, True)


def _pairs(n: int, differ: int, first: int = 0) -> agreement.Agreement:
    """``n`` paired outputs of 8 tokens, ``differ`` of them different: the first ``first`` of those from token 0,
    the others from token 5."""
    out = []
    for i in range(n):
        b = [1] * 8
        if i < first:
            b[0] = 2
        elif i < differ:
            b[5] = 2
        out.append(([1] * 8, b))
    return agreement.agreement(out, "tokens")


def test_fisher_exact_by_hand() -> None:
    # 8 of 16 against 0 of 16: C(16,8)·C(16,0)/C(32,8), the only table as extreme
    assert stats.fisher_greater(8, 16, 0, 16) == pytest.approx(math.comb(16, 8) / math.comb(32, 8))
    assert stats.fisher_greater(0, 16, 0, 16) == 1.0 and stats.fisher_greater(3, 16, 2, 16) == pytest.approx(0.5)


def test_agreement_verdict_against_the_noise_floor() -> None:
    """A host that agreed 8/16 with the first, where the same host twice agreed 16/16, was printed
    only a needle task's "same within noise"."""
    half = agreement.judge(_pairs(16, 8, first=8), _pairs(16, 0), ("r1", "r2"))
    assert half.verdict == "different" and half.p_value is not None and half.p_value < 0.01
    assert (half.floor_n, half.floor_differ, half.assumed, half.floor_runs) == (16, 0, False, ("r1", "r2"))
    same = agreement.judge(_pairs(16, 0), _pairs(16, 0), ("r1", "r2"))
    assert same.verdict == "within noise" and same.p_value == 1.0
    noisy = agreement.judge(_pairs(16, 3), _pairs(16, 2), ("r1", "r2"))  # 13/16 against a floor of 14/16
    assert noisy.verdict == "within noise" and noisy.p_value is not None and noisy.p_value > 0.5
    # late differences beyond a floor that differs late too: the first-token test finds them
    first = agreement.judge(_pairs(16, 10, first=10), _pairs(16, 8, first=0))
    assert first.verdict == "different" and not first.assumed
    # no repeat in the store: greedy decoding's floor is assumed (as many pairs, all identical)
    assumed = agreement.judge(_pairs(16, 8, first=8), None)
    assert assumed.verdict == "different" and assumed.assumed and assumed.floor_n == 16
    assert agreement.judge(_pairs(16, 1), None).verdict == "within noise"  # one stray difference is not enough
    sampled = agreement.judge(_pairs(16, 8), None, sampled=True)
    assert sampled.verdict == "no floor" and sampled.p_value is None
    assert half.to_dict()["floor_identical"] == 16


def test_param_parsing_and_nesting() -> None:
    assert knob.parse_param("reasoning_effort=low,medium,high") == ("reasoning_effort", ["low", "medium", "high"])
    assert knob.parse_param("chat_template_kwargs.enable_thinking=true,false") == \
        ("chat_template_kwargs.enable_thinking", [True, False])
    assert knob.parse_param("temperature=0,0.7") == ("temperature", [0, 0.7])
    assert knob.nest("a.b.c", 1) == {"a": {"b": {"c": 1}}}
    for bad in ("reasoning_effort", "x=", "x=low", "=a,b", "a..b=1,2", "x=a,,b", "x=a,a", "api_key=a,b"):
        with pytest.raises(Exception) as e:
            knob.parse_param(bad)
        assert type(e.value).__name__ == "UsageError"


def _items(task: str, texts: list[str]) -> list[Item]:
    return [Item(task=task, idx=i, key=str(i), prompt="p", response=t) for i, t in enumerate(texts)]


def test_agreement_reads_output_length_as_the_server_counted_it() -> None:
    """The ids compared are the answer's text encoded again: 66 of them for an answer the server counted 64 (its
    --max-tokens), and the table read "Output length 66 tokens", past the cap. The length is the server's count
    where every output has one, else the ids'."""
    def one(n_ids: int, counted: int | None) -> dict[str, Item]:
        it = Item(task="agreement", idx=0, key="k", prompt="p", status="done", response="x",
                  detail={"tokens": list(range(n_ids))}, output_tokens=counted)
        return {"k": it}

    from tokenbench.quality.parity import compare_items
    (tc,) = compare_items(list(one(66, 64).values()), list(one(66, 64).values()))
    assert tc.agreement is not None and tc.agreement.unit == "tokens" and tc.agreement.mean_length == 64
    (tc,) = compare_items(list(one(66, None).values()), list(one(66, None).values()))
    assert tc.agreement is not None and tc.agreement.mean_length == 66


def test_knob_effects_against_the_noise_floor() -> None:
    same = ["a", "b", "c", "d", "e", "f", "g", "h"]
    items = (_items(knob.knob_task("k", "low"), same) + _items(knob.knob_task("k", "low", True), same)
             + _items(knob.knob_task("k", "high"), same))
    fx = knob.effects("k", ["low", "high"], items)
    assert [e.changed for e in fx] == [0, 0, 0] and fx[2].p_value == 1.0
    assert "the knob has no measurable effect" in knob.finding("k", fx)
    items = items[:16] + _items(knob.knob_task("k", "high"), [t + "!" for t in same])
    fx = knob.effects("k", ["low", "high"], items)
    assert fx[2].changed == 8 and fx[2].effect and fx[2].p_value == pytest.approx(2 / 256)
    assert knob.finding("k", fx).startswith("k has an effect")
    # 5 outputs, every one changed: p = 0.0625 at best, so the check cannot tell (it read "no measurable effect")
    few = same[:5]
    items = (_items(knob.knob_task("k", "low"), few) + _items(knob.knob_task("k", "low", True), few)
             + _items(knob.knob_task("k", "high"), [t + "!" for t in few]))
    fx = knob.effects("k", ["low", "high"], items)
    assert fx[2].changed == 5 and not fx[2].effect
    said = knob.finding("k", fx)
    assert said.startswith("too few outputs to tell whether the knob has an effect: k = \"high\" changed 5/5")
    assert said.endswith("give --items 6 or more") and "no measurable effect" not in said


# --- the store -----------------------------------------------------------------------------------------------


def test_migration_adds_the_items_table_to_an_old_database(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE _migrations (name TEXT PRIMARY KEY, applied TEXT NOT NULL)")
    db.commit()
    db.close()
    from tokenbench import store as store_mod

    s = Store(path)
    assert "003_quality_items" in {r[0] for r in s.db.execute("SELECT name FROM _migrations")}
    assert s.schema_version == len(store_mod.MIGRATIONS)
    s.create_run("r1", "quality", "x", "2026-01-01T00:00:00+00:00", "0", {})
    it = Item(task="niah", idx=0, key="1024@50%", prompt="p", status="pass", score=1.0, detail={"depth": 50})
    s.save_quality_items("r1", [it.to_row()])
    assert [Item.from_row(r) for r in s.quality_items("r1")] == [it]


# --- the command, against a fake server ----------------------------------------------------------------------

NEEDLE = re.compile(r"The secret number is (\d+)\.")
ARITH = re.compile(r"What is (\d+) (plus|minus|times) (\d+)\?")


class Answering(Emitter):
    """The emitter, answering: the needle (or a wrong one on every ``wrong_every``-th needle), the sum asked,
    else the emitter's words (every ``corrupt_every``-th of those with a character put before them).
    ``slow_words``: prompts longer than this wait ``slow_s`` before answering."""

    def __init__(self, wrong_every: int = 0, slow_words: int | None = None, slow_s: float = 0.0,
                 corrupt_every: int = 0) -> None:
        super().__init__(EmitterConfig())
        self.wrong_every, self.slow_words, self.slow_s = wrong_every, slow_words, slow_s
        self.corrupt_every, self.needles, self.others = corrupt_every, 0, 0

    async def complete(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests_seen.append(body)
        text = body["messages"][-1]["content"] if "messages" in body else body["prompt"]
        if self.slow_words and len(text.split()) > self.slow_words:
            await asyncio.sleep(self.slow_s)
        m, q = NEEDLE.search(text), ARITH.search(text)
        if m:
            self.needles += 1
            wrong = self.wrong_every and self.needles % self.wrong_every == 0
            answer = str(int(m.group(1)) + 1) if wrong else m.group(1)
        elif q:
            a, op, b = int(q.group(1)), q.group(2), int(q.group(3))
            answer = str(a + b if op == "plus" else a - b if op == "minus" else a * b)
        else:
            answer = " ".join(text.split()[:5])
            self.others += 1
            if self.corrupt_every and self.others % self.corrupt_every == 0:
                answer = "#" + answer
        chat = "messages" in body
        choice = {"index": 0, "delta": {"content": answer}} if chat else {"index": 0, "text": answer}
        if not body.get("stream"):
            msg = {"message": {"role": "assistant", "content": answer}} if chat else {"text": answer}
            return web.json_response({"id": "x", "choices": [{"index": 0, "finish_reason": "stop", **msg}],
                                      "usage": {"prompt_tokens": len(text.split()), "completion_tokens": 1}})
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for ev in ({"id": "x", "choices": [choice]}, {"id": "x", "choices": [{"index": 0, "delta": {}, "text": "",
                                                                               "finish_reason": "stop"}]},
                   {"id": "x", "choices": [], "usage": {"prompt_tokens": len(text.split()),
                                                       "completion_tokens": len(answer.split())}}):
            await resp.write(b"data: " + json.dumps(ev).encode() + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        return resp


def serve(emitter: Emitter) -> BackgroundEmitter:
    bg = BackgroundEmitter()
    bg.emitter = emitter
    return bg


NIAH = ["--tasks", "niah", "--contexts", "200,300,400,500", "--depths", "10,40,60,90", "--timeout", "5s"]


def _run(url: str, label: str, *extra: str) -> None:
    assert main(["quality", "--url", url, "--label", label, *NIAH, *extra]) == 0


def test_needles_of_another_seed_get_no_verdict(capsys: pytest.CaptureFixture[str]) -> None:
    """Another --seed hides other needles in cells of the same name: the cells were paired by name and read "no
    difference beyond noise", exit 0. They are refused in one line that names both seeds."""
    with serve(Answering()) as good:
        _run(good.url, "s3", "--seed", "3")
        _run(good.url, "s4", "--seed", "4")
    capsys.readouterr()
    assert main(["quality", "compare", "s3", "s4"]) == 2
    captured = capsys.readouterr()
    assert "verdict" not in captured.out and len(captured.err.strip().splitlines()) == 1, captured
    assert "(--seed 3 and --seed 4): their items differ" in captured.err and "no verdict is given" in captured.err


def test_verdict_a_degraded_host_is_worse_and_a_copy_is_the_same(capsys: pytest.CaptureFixture[str],
                                                                   tmp_path: Path) -> None:
    with serve(Answering()) as good:
        _run(good.url, "good")
        _run(good.url, "good-again")
    with serve(Answering(wrong_every=2)) as bad:
        _run(bad.url, "degraded")
    capsys.readouterr()
    out = tmp_path / "cmp.json"
    assert main(["quality", "compare", "good", "degraded", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    doc = json.loads(out.read_text())
    niah = next(t for t in doc["tasks"] if t["task"] == "niah")
    s = niah["scores"]
    assert (s["n"], s["score_a"], s["score_b"], s["a_only"], s["b_only"]) == (16, 1.0, 0.5, 8, 0)
    assert s["verdict"] == "A better" and s["p_value"] < 0.05 and s["ci_points"][0] > 0
    assert "good better" in text and "+50.0" in text
    # a task has two verdicts, its scores' and its outputs': each table names its own (both read "Verdict", and a
    # headline "differs" stood over a row "same within noise" for the same task)
    assert "Score verdict" in text and "Output verdict" in text
    assert main(["quality", "compare", "good", "good-again", "--json", str(out)]) == 0
    s = json.loads(out.read_text())["tasks"][0]["scores"]
    assert s["verdict"] == "same within noise" and s["p_value"] == 1.0 and s["diff_points"] == 0
    assert "same within noise" in capsys.readouterr().out


def test_one_host_run_twice_is_named_as_such(capsys: pytest.CaptureFixture[str]) -> None:
    """Two runs of one host compared read "no second run of either host in the store", each being the other's."""
    with serve(Answering()) as good:
        _run(good.url, "twice", "--seed", "5")
        _run(good.url, "twice", "--seed", "5")
    first, second = sorted(r.id for r in Store().runs_labelled("twice"))
    capsys.readouterr()
    assert main(["quality", "compare", first, second]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "A and B are one host run twice" in text and "no second run" not in text


def test_cells_record_tokens_and_timeouts_are_kept(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    with serve(Answering(slow_words=350, slow_s=3.0)) as slow:
        out = tmp_path / "run.json"
        assert main(["quality", "--url", slow.url, "--label", "slow", "--tasks", "niah", "--contexts", "200,500",
                     "--timeout", "1s", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    cells = {(i["detail"]["context"], i["detail"]["depth"]): i for i in doc["items"]}
    assert len(cells) == 6  # every cell, the timed-out ones too
    assert {cells[(200, d)]["status"] for d in (10, 50, 90)} == {"pass"}
    assert {cells[(500, d)]["status"] for d in (10, 50, 90)} == {"timeout"}
    assert all(c["latency_ms"] >= 900 for k, c in cells.items() if k[0] == 500)
    for c in cells.values():
        if c["status"] == "pass":  # the fake counts words as the test's tokenizer does
            assert c["prompt_tokens"] == c["expected_prompt_tokens"] and c["detail"]["usage_check"] == "ok"
    assert doc["manifest"]["summary"]["niah"]["score"] == 0.5  # timeouts count as not passed
    text = capsys.readouterr().out
    assert "timeout" in text and "pass" in text
    assert main(["runs"]) == 0 and "quality" in capsys.readouterr().out


def test_agreement_between_two_hosts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with serve(Answering()) as a:
        assert main(["quality", "--url", a.url, "--label", "a", "--tasks", "agreement", "--items", "6"]) == 0
        assert main(["quality", "--url", a.url, "--label", "b", "--tasks", "agreement", "--items", "6",
                     "--seed", "5"]) == 0
        assert main(["quality", "--url", a.url, "--label", "c", "--tasks", "agreement", "--items", "6"]) == 0
    capsys.readouterr()
    out = tmp_path / "c.json"
    assert main(["quality", "compare", "a", "c", "--json", str(out)]) == 0
    ag = json.loads(out.read_text())["tasks"][0]["agreement"]
    assert (ag["n"], ag["identical"], ag["unit"]) == (6, 6, "tokens")
    # another --seed: no item in common, so no verdict (it read "same within noise on every task")
    assert main(["quality", "compare", "a", "b"]) == 2
    err = capsys.readouterr().err
    assert "no verdict" in err and "--seed" in err and len(err.strip().splitlines()) == 1


def _agreement_run(url: str, label: str, out: Path) -> str:
    assert main(["quality", "--url", url, "--label", label, "--tasks", "agreement", "--items", "16",
                 "--json", str(out)]) == 0
    return str(json.loads(out.read_text())["run_id"])


def test_outputs_that_differ_beyond_the_floor_are_named_different(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """The same host twice agreed 16/16, a host corrupting every second answer 8/16, and `quality
    compare` printed no verdict on it. The repeat in the store is the floor; the verdict line comes first and
    names the second host different."""
    with serve(Answering()) as good:
        first = _agreement_run(good.url, "host", tmp_path / "1.json")
        again = _agreement_run(good.url, "host", tmp_path / "2.json")
        other = _agreement_run(good.url, "other", tmp_path / "4.json")
        # the newest run of the host is a knob check: no output in common, so not the floor
        assert main(["quality", "knob", "--url", good.url, "--label", "host", "--param", "top_k=1,2", "--items", "2"]) == 0
    with serve(Answering(corrupt_every=2)) as bad:
        through = _agreement_run(bad.url, "proxy", tmp_path / "3.json")
    capsys.readouterr()
    out = tmp_path / "cmp.json"
    assert main(["quality", "compare", first, through, "--json", str(out)]) == 0
    text = capsys.readouterr().out
    doc = json.loads(out.read_text())
    task = doc["tasks"][0]
    assert (task["agreement"]["n"], task["agreement"]["identical"], task["agreement"]["first_diff"]) == (16, 8, [0] * 8)
    v = task["agreement_verdict"]
    assert v["verdict"] == "different" and v["p_value"] < 0.01 and v["floor_runs"] == [first, again]
    assert (v["floor_n"], v["floor_identical"], v["floor_assumed"]) == (16, 16, False)
    assert doc["verdict"]["same"] is False and doc["floor"]["runs"] == [first, again]
    line = next(ln for ln in text.splitlines() if ln.startswith("verdict:"))
    assert line.startswith("verdict: proxy differs from host: agreement: 8 of 16 outputs identical") and "same" not in line
    assert text.index("verdict:") < text.index("agreement of outputs")  # the line first, the table under it
    assert "different" in text and f"host run twice ({first} and {again}" in " ".join(text.split())
    # the same host twice: the only case that reads "same"
    assert main(["quality", "compare", first, again, "--json", str(out)]) == 0
    assert "verdict: same within noise on every task" in capsys.readouterr().out
    assert json.loads(out.read_text())["verdict"]["same"] is True
    # no repeat of either host: the floor is assumed, and the output says so
    assert main(["quality", "compare", other, through, "--json", str(out)]) == 0
    text = " ".join(capsys.readouterr().out.split())
    v = json.loads(out.read_text())["tasks"][0]["agreement_verdict"]
    assert v["verdict"] == "different" and v["floor_assumed"] and "the floor is assumed" in text
    # a floor named by hand: a repeat of A's host
    assert main(["quality", "compare", first, through, "--floor", again, "--json", str(out)]) == 0
    assert json.loads(out.read_text())["floor"] == {"runs": [first, again], "given": True,
                                                   "text": f"the floor: host run twice ({first} and {again}: "
                                                           "given by --floor)"}
    assert main(["quality", "compare", first, through, "--floor", through]) == 2
    # a run of another host (here another label) is no floor for them: it read "other run twice", exit 0
    capsys.readouterr()
    assert main(["quality", "compare", other, through, "--floor", first]) == 2
    err = capsys.readouterr().err
    assert "is no repeat of other or proxy" in err and "label host" in err and len(err.strip().splitlines()) == 1


def test_knob_check_finds_no_effect_on_a_server_that_ignores_it(capsys: pytest.CaptureFixture[str]) -> None:
    with serve(Answering()) as a:
        assert main(["quality", "knob", "--url", a.url, "--param", "reasoning_effort=low,high", "--items", "6"]) == 0
        sent = [b.get("reasoning_effort") for b in a.emitter.requests_seen]
    # the check request, then low twice (the repeat is the noise floor), then high
    assert sent == [None] + ["low"] * 12 + ["high"] * 6
    out = capsys.readouterr().out
    assert "the knob has no measurable effect" in out
    # the closing line as every command's: the run's status where "(quality, knob)" stood
    assert re.search(r"^run \S+ \(complete\) saved in \S", out, re.M), out


def test_shipped_lm_eval_task_stores_every_item(tmp_path: Path) -> None:
    """Run as a user runs it, in a process of its own and in a folder that is no git checkout: lm-eval's progress
    bars (tqdm's, drawn with carriage returns into a piped log) and its `git describe`'s "fatal: not a git
    repository" stay out of what tokenbench writes, which notes each task instead."""
    pytest.importorskip("lm_eval")
    out = tmp_path / "h.json"
    env = {k: v for k, v in os.environ.items() if k != "TQDM_DISABLE"}
    with serve(Answering()) as a:
        proc = subprocess.run([sys.executable, "-m", "tokenbench", "quality", "--url", a.url, "--label", "h",
                               "--tasks", "tokenbench_arith", "--limit", "6", "--json", str(out)],
                              capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "it/s" not in proc.stderr and "\r" not in proc.stderr and "fatal" not in proc.stderr, proc.stderr
    doc = json.loads(out.read_text())
    assert len(doc["items"]) == 6 and {i["status"] for i in doc["items"]} == {"pass"}
    assert all(i["latency_ms"] is not None and i["score"] == 1.0 for i in doc["items"])
    rows = Store().quality_items(doc["run_id"])
    assert len(rows) == 6 and all("What is" in r["prompt"] and r["response"] for r in rows)


def test_bad_input_is_one_line_and_secrets_stay_out(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["quality", "knob", "--url", "http://127.0.0.1:9/v1", "--param", "temperature"]) == 2
    assert main(["quality", "--url", "http://127.0.0.1:9/v1", "--tasks", "niah"]) == 3
    assert main(["quality", "--url", "http://127.0.0.1:9/v1", "--contexts", "lots"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 3 and "Traceback" not in err
    out = tmp_path / "s.json"
    with serve(Answering()) as a:
        assert main(["quality", "--url", a.url, "--tasks", "agreement", "--items", "2", "--api-key", "sk-SECRET1",
                     "--json", str(out)]) == 0
    captured = capsys.readouterr()
    assert "sk-SECRET1" not in captured.out + captured.err + out.read_text()
    db = Path(Store().path)
    assert b"sk-SECRET1" not in b"".join(p.read_bytes() for p in db.parent.glob(db.name + "*"))


def test_unknown_task_is_refused_before_anything_runs(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("lm_eval")
    assert main(["quality", "--url", "http://127.0.0.1:9/v1", "--tasks", "niah,no_such_task_xyz"]) == 2
    err = capsys.readouterr().err
    assert "unknown task 'no_such_task_xyz'" in err and len(err.strip().splitlines()) == 1


def test_unknown_task_is_refused_before_the_embedded_engine_starts(monkeypatch: pytest.MonkeyPatch,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """Without --url the embedded engine starts first (tens of seconds, a model loaded) unless the names are
    checked before it."""
    pytest.importorskip("lm_eval")
    import tokenbench.engines.embedded as embedded

    def start(*args: object, **kwargs: object) -> None:
        raise AssertionError("the embedded engine was started for a task no one knows")

    monkeypatch.setattr(embedded, "running", start)
    assert main(["quality", "--tasks", "no_such_task_xyz"]) == 2
    assert "unknown task 'no_such_task_xyz'" in capsys.readouterr().err


def test_a_task_whose_data_cannot_come_down_is_refused_before_the_embedded_engine_starts(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """With no hub and no cached data the task could only fail after the engine's start: an empty table, the error
    twice and exit 5. A .invalid host never resolves, and an empty datasets cache holds nothing."""
    pytest.importorskip("lm_eval")
    import datasets.config

    import tokenbench.engines.embedded as embedded

    def start(*args: object, **kwargs: object) -> None:
        raise AssertionError("the embedded engine was started for a task whose data is not here")

    monkeypatch.setattr(embedded, "running", start)
    monkeypatch.setenv("HF_ENDPOINT", "https://hub.invalid")
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path)
    assert main(["quality", "--tasks", "gsm8k", "--limit", "2"]) == 2
    err = capsys.readouterr().err
    assert "task gsm8k needs its data from the Hugging Face hub" in err and len(err.strip().splitlines()) == 1


def test_no_verdict_without_an_item_answered_and_asked_in_both() -> None:
    """Two runs whose servers failed every needle (or that share no item) read "same within noise on every task",
    0.0 against 0.0; an item both servers failed says nothing of either model. One side answering is still
    evidence (a box that fails long contexts against one that passes them)."""
    from tokenbench.quality.parity import compare_items, overall

    def needles(status: str, score: float | None, n: int = 12) -> list[Item]:
        return [Item("niah", i, f"k{i}", "p", status=status, score=score, error="http_400: too long"
                     if status == "error" else None) for i in range(n)]

    both_failed = overall(compare_items(needles("error", None), needles("error", None)), "a", "b")
    assert not both_failed.same and both_failed.text.startswith("no verdict")
    apart = overall(compare_items(needles("error", None), [Item("niah", 99, "other", "p", status="pass", score=1.0)]),
                    "a", "b")
    assert apart.text.startswith("no verdict")
    one_side = overall(compare_items(needles("error", None), needles("pass", 1.0)), "a", "b")
    assert "differs" in one_side.text and not one_side.same, one_side.text


def test_needle_grid_counts_read_as_the_progress_writes_them() -> None:
    """A cell the server refused was written '65518/?'; the progress lines write '65,518'."""
    from io import StringIO

    from rich.console import Console

    from tokenbench.cli.quality import _print_tasks

    cells = [Item("niah", 0, "65536@50%", "p", status="error", error="http_400", expected_prompt_tokens=65518,
                  detail={"context": 65536, "depth": 50, "usage_check": "absent"}),
             Item("niah", 1, "1024@50%", "p", status="pass", score=1.0, expected_prompt_tokens=1010,
                  prompt_tokens=1012, latency_ms=900.0, detail={"context": 1024, "depth": 50, "usage_check": "ok"})]
    out = StringIO()
    _print_tasks(Console(file=out, width=120), {}, cells, "table")
    text = out.getvalue()
    assert "65,518/—" in text and "1,010/1,012" in text and "?" not in text


def test_a_cells_progress_writes_both_counts_alike(capsys: pytest.CaptureFixture[str]) -> None:
    """It read "1,028 prompt tokens sent, the server counted 1028"."""
    with serve(Answering()) as a:
        assert main(["quality", "--url", a.url, "--tasks", "niah", "--contexts", "1100", "--depths", "50"]) == 0
    line = next(ln for ln in capsys.readouterr().err.splitlines() if "the server counted" in ln)
    assert re.search(r" 1,\d{3} prompt tokens sent, the server counted 1,\d{3}$", line), line


def test_a_needle_cell_larger_than_the_embedded_model_is_refused_before_it_starts(
        capsys: pytest.CaptureFixture[str]) -> None:
    """--contexts 8k on the embedded llama-server sent 8,193 tokens to a model that reads 8,192: HTTP 400, a
    failed run. It is refused first, with the largest context that fits."""
    assert main(["quality", "--engine", "llama-server", "--tasks", "niah", "--contexts", "8k"]) == 2
    err = capsys.readouterr().err
    assert "the embedded model reads at most 8,192 tokens" in err and "contexts up to 8,064 tokens" in err, err
    assert len(err.strip().splitlines()) == 1


def test_a_knob_check_takes_one_param(capsys: pytest.CaptureFixture[str]) -> None:
    """A second --param took the first's place unsaid: temperature was never tested, and the check exited 0."""
    assert main(["quality", "knob", "--url", "http://127.0.0.1:9/v1", "--param", "temperature=0,1.5",
                 "--param", "top_k=1,2"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "give one --param (got 2: temperature, top_k)" in err, err


def test_a_first_request_past_the_timeout_names_the_timeout(capsys: pytest.CaptureFixture[str]) -> None:
    """--timeout 1ms failed the first request and was blamed on the server alone ("check the server")."""
    with serve(Answering(slow_words=1, slow_s=0.05)) as a:  # every prompt of 2 words or more waits 50 ms
        assert main(["quality", "--url", a.url, "--label", "t", "--tasks", "niah", "--timeout", "1ms"]) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "did not finish within --timeout 0.001 s" in err[0] and "longer --timeout" in err[0], err
