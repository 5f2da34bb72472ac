"""predict --sessions: an agent session on a box you do not own, turn by turn, with the prefix cache and without it.
The figures come from the depth and serving estimates, so they are checked against those, not
against numbers written here."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tokenbench.cli import main
from tokenbench.draws import Draw
from tokenbench.predict.calibration import Calibration
from tokenbench.predict.setup import Setup
from tokenbench.predict.tables import _seconds, session_table, shown_turns
from tokenbench.predict.session import SessionShape, predict_session
from tokenbench.predict.specs import Catalog
from tokenbench.reader import load_result
from tokenbench.store import Store

STRIX = ("amd-ryzen-ai-max-395", "gpt-oss-20b", "Q4_K_M", "F16", "llama.cpp")
H100 = ("nvidia-h100-sxm", "gpt-oss-20b", "MXFP4", "AUTO", "vllm")
SESSION = ["--sessions", "--turns", "20", "--shared-prefix", "2000", "--input-len", "1000", "--tool-len", "800",
           "--output-len", "400"]
DEVICE = Path(__file__).resolve().parents[1] / "benchmarks" / "device"
STRIX_ARGS = ["predict", "--hardware", STRIX[0], "--model", STRIX[1], "--engine", STRIX[4], *SESSION]


@pytest.fixture(scope="module")
def cat() -> Catalog:
    return Catalog.load()


@pytest.fixture(scope="module")
def cal() -> Calibration:
    return Calibration.packaged()


def shape(**kw: object) -> SessionShape:
    base: dict[str, object] = dict(turns=20, shared_prefix=2000, input_len=Draw.fixed(1000),
                                   tool_len=Draw.fixed(800), output_len=Draw.fixed(400),
                                   think_time=Draw.fixed(5.0, "s"))
    base.update(kw)
    return SessionShape(**base)  # type: ignore[arg-type]


def setup(cat: Catalog, cal: Calibration, box: tuple[str, ...], parallel: int = 1) -> Setup:
    return Setup.make(cat, cal, *box, parallel=parallel)


@pytest.fixture
def screen(monkeypatch: pytest.MonkeyPatch) -> None:
    """An 80-column terminal, whatever the caller's environment says of colour, locale, zone or home."""
    monkeypatch.setenv("COLUMNS", "80")
    for var, value in (("NO_COLOR", "1"), ("LANG", "C"), ("TZ", "Pacific/Kiritimati")):
        monkeypatch.setenv(var, value)


def test_a_turn_sends_the_whole_conversation_and_prefills_only_what_is_new() -> None:
    sh = shape()
    assert [sh.context(k) for k in (1, 2, 3)] == [3000, 4200, 5400]
    assert sh.cached(1) == 2000 and sh.cached(2) == 3000 and sh.cached(3) == 4200  # the previous prompt
    assert sh.context(2) - sh.cached(2) == 400 + 800  # the previous answer and the new tool result


@pytest.mark.parametrize("box,agents", [(STRIX, 1), (STRIX, 8), (H100, 1), (H100, 8)])
def test_cached_ttft_is_below_uncached_after_the_first_turn_and_the_gap_grows(
        cat: Catalog, cal: Calibration, box: tuple[str, ...], agents: int) -> None:
    p = predict_session(setup(cat, cal, box), shape(), agents)
    assert len(p.turns) == 20
    later = p.turns[1:]
    assert all(t.ttft_s.estimate < t.cold_ttft_s.estimate for t in later)
    assert all(t.ttft_s.ceiling < t.cold_ttft_s.ceiling for t in later)
    gaps = [t.cold_ttft_s.estimate - t.ttft_s.estimate for t in p.turns]
    if p.kind == "batching" and agents > 1:
        # the engine's scheduler packs whole steps of prompt tokens: as the contexts grow, 8 uncached prompts
        # split into its token budget differently and the median TTFT moves in steps, up on the whole
        assert gaps[-1] > 3 * gaps[0]
        assert all(g > 0.75 * max(gaps[:i + 1]) for i, g in enumerate(gaps[1:]))
    else:
        assert all(b > a for a, b in zip(gaps, gaps[1:]))


def test_one_agent_is_the_depth_prediction(cat: Catalog, cal: Calibration) -> None:
    """The uncached TTFT of turn k is the whole prompt's prefill at that context, the cached one the prefill of the
    new tokens after the cached ones, and the decode rate tg at the middle of the answer: what --test depth
    predicts, by the same calls."""
    s = setup(cat, cal, STRIX)
    p = predict_session(s, shape(), 1)
    for t in p.turns:
        whole = s.prefill(t.context)
        assert (t.cold_ttft_s.estimate, t.cold_ttft_s.ceiling) == (whole.estimate, whole.ceiling)
        assert t.ttft_s.estimate == s.prefill(t.uncached, t.cached).estimate
        assert t.tpot_s.estimate == s.decode(t.context + 400 // 2).estimate
    # and the printed cell is that prefill, rounded
    head, rows = session_table(s, cal, p)
    col = head.index("20")
    uncached = next(r for r in rows if r[0].startswith("TTFT uncached"))
    assert uncached[col] == _seconds(s.prefill(p.turns[19].context).estimate)


def test_several_agents_go_through_the_serving_loop(cat: Catalog, cal: Calibration) -> None:
    s = setup(cat, cal, H100)
    p = predict_session(s, shape(), 8)
    t = p.turns[9]
    served = s.serve(8, t.uncached, 400, t.cached)
    assert t.ttft_s.estimate == served.ttft_s.estimate and t.tpot_s.estimate == served.tpot_s.estimate
    cold = s.serve(8, t.context, 400)
    assert t.cold_ttft_s.estimate == cold.ttft_s.estimate
    one = predict_session(s, shape(), 1).turns[9]
    assert t.ttft_s.estimate > one.ttft_s.estimate and t.tpot_s.estimate > one.tpot_s.estimate  # shared


@pytest.mark.parametrize("agents", [1, 8])
def test_an_h100_beats_a_strix_halo_on_ttft_for_the_same_session(cat: Catalog, cal: Calibration, agents: int) -> None:
    h100 = predict_session(setup(cat, cal, H100), shape(), agents)
    strix = predict_session(setup(cat, cal, STRIX), shape(), agents)
    for a, b in zip(h100.turns, strix.turns):
        assert a.ttft_s.estimate < b.ttft_s.estimate and a.cold_ttft_s.estimate < b.cold_ttft_s.estimate
    assert h100.time().total.estimate < strix.time().total.estimate


def test_session_time_adds_up_to_its_parts(cat: Catalog, cal: Calibration) -> None:
    p = predict_session(setup(cat, cal, STRIX), shape(), 1)
    t = p.time()
    ttft = sum(x.ttft_s.estimate for x in p.turns)
    decode = sum(399 * x.tpot_s.estimate for x in p.turns)
    assert t.ttft.estimate == pytest.approx(ttft) and t.decode.estimate == pytest.approx(decode)
    assert t.think_s == 19 * 5.0
    assert t.total.estimate == pytest.approx(ttft + decode + 95.0)
    assert t.total.ceiling == pytest.approx(t.ttft.ceiling + t.decode.ceiling + 95.0)
    cold = p.time(cache=False)
    assert cold.total.estimate > t.total.estimate and cold.think_s == t.think_s
    assert p.output_tokens == 20 * 400 and p.prompt_tokens == sum(3000 + 1200 * k for k in range(20))
    assert p.prefilled_tokens == 1000 + 19 * 1200


def test_max_context_ends_the_session_and_a_first_turn_past_it_is_refused(cat: Catalog, cal: Calibration) -> None:
    sh = shape(max_context=10_000)
    assert sh.sent() == 6  # turn 6 sends 9,000 and answers 400; turn 7 would need 10,600
    p = predict_session(setup(cat, cal, STRIX), sh, 1)
    assert len(p.turns) == 6 and p.capped
    assert any("ends after turn 6 of 20" in n and "10,600" in n for n in p.notes)
    with pytest.raises(Exception, match="first turn already needs 3,400 tokens"):
        predict_session(setup(cat, cal, STRIX), shape(max_context=3000), 1)


def test_contexts_past_the_box_are_flagged(cat: Catalog, cal: Calibration) -> None:
    s = Setup.make(cat, cal, "nvidia-l4", "llama-3.1-8b", "FP8", "AUTO", "vllm")
    p = predict_session(s, shape(turns=60, tool_len=Draw.fixed(2000), output_len=Draw.fixed(500)), 4)
    assert p.turns[0].fits and not p.turns[-1].fits
    first = next(t.turn for t in p.turns if not t.fits)
    assert any(f"from turn {first} the box cannot hold 4 contexts" in n and "evicts cached prefixes" in n
               for n in p.notes)
    head, rows = session_table(s, cal, p)
    assert rows[-1][0] == "Fits" and rows[-1][-1] == "no"


def test_a_context_past_the_model_s_own_is_said_wherever_fit_said_it_fits(capsys: pytest.CaptureFixture[str],
                                                                          tmp_path: Path) -> None:
    """fit, a depth prediction and a session prediction said a context fits that the model cannot take: llama-2-7b
    at 65,536 tokens (it was trained for 4,096), llama-3.1-8b's 1,000th turn at 256K (131,072). fit exits 1 there,
    as where the memory does not hold it: vLLM refuses to start with that --max-model-len (it exited 0, "fits")."""
    assert main(["fit", "--hardware", "nvidia-a100-sxm-80gb", "--model", "llama-2-7b", "--context", "65536"]) == 1
    out = " ".join(capsys.readouterr().out.split())
    assert "-> fits in memory, but not llama-2-7b's own context of 4,096 tokens" in out
    assert "117,648 tokens (the model's own: 4,096)" in out
    assert main(["fit", "--hardware", "nvidia-a100-sxm-80gb", "--model", "llama-2-7b", "--context", "65536",
                 "--json", str(tmp_path / "fit.json")]) == 1
    capsys.readouterr()
    doc = json.loads((tmp_path / "fit.json").read_text())  # written either way: the verdict, as printed and exited
    assert doc["fits"] is False and doc["fits_in_memory"] is True and doc["past_model_context"] is True
    assert doc["model_context"] == 4096
    # a model whose own context is not known is judged by the memory alone, and says nothing of a context
    assert main(["fit", "--hardware", "nvidia-a100-sxm-80gb", "--model", "m8b-random", "--weights", "Q4_0",
                 "--context", "65536"]) == 0
    assert "own context" not in capsys.readouterr().out
    assert "past model: 65,536 tokens of context pass llama-2-7b's own 4,096 (its config's max_position_embeddings)" \
        in out
    assert main(["fit", "--hardware", "nvidia-a100-sxm-80gb", "--model", "llama-2-7b", "--context", "4096"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "-> fits largest" in out and "past model" not in out
    assert main(["predict", "--hardware", "nvidia-h100-sxm", "--model", "llama-2-7b", "--test", "depth", "--depth",
                 "0,2k,8k"]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()]
    fits = {r[0]: " ".join(r[-2:]) if r[-1] == "model" else r[-1] for r in rows if r and r[0] in ("0", "2,048", "8,192")}
    assert fits == {"0": "yes", "2,048": "yes", "8,192": "past model"}  # 2,048 + 640 fit 4,096; 8,192 do not
    assert main(["predict", "--hardware", "nvidia-h100-sxm", "--model", "llama-3.1-8b", "--sessions", "--turns",
                 "1000"]) == 0
    out = capsys.readouterr().out
    fits = next(line for line in out.splitlines() if line.lstrip().startswith("Fits")).split()
    assert fits[1:] == ["yes", "yes", "yes", "yes", "past", "model"]  # turn 500's 128,512 tokens fit 131,072
    assert "past model: 256,512 tokens of context pass llama-3.1-8b's own 131,072" in " ".join(out.split())


FIT_SCHEMA = Path(__file__).resolve().parents[1] / "src" / "tokenbench" / "data" / "fit.schema.json"


@pytest.mark.parametrize("argv", [
    ["--hardware", "nvidia-a30", "--model", "llama-3.1-8b", "--context", "8k"],  # fits
    ["--hardware", "nvidia-a100-sxm-80gb", "--model", "llama-2-7b", "--context", "65536"],  # past the model's own
    ["--hardware", "nvidia-a30", "--model", "qwen3-coder-next-80b-a3b", "--weights", "Q4_K_M", "--kv", "q4_0",
     "--context", "64k"],  # a hybrid split
    ["--hardware", "nvidia-a100-sxm-80gb", "--model", "m8b-random", "--weights", "Q4_0", "--context", "65536"]])
def test_fit_json_says_the_verdict_it_prints_and_exits_on(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """fit --json's fits was the memory's answer alone: llama-2-7b at 65,536 tokens printed "fits in memory, but
    not llama-2-7b's own context", exited 1, and wrote fits true. fits is the verdict, the memory's answer is
    fits_in_memory, and the JSON meets its schema."""
    import jsonschema

    rc = main(["fit", *argv, "--json", "-"])
    doc = json.loads(capsys.readouterr().out)
    jsonschema.Draft202012Validator.check_schema(json.loads(FIT_SCHEMA.read_text()))
    jsonschema.validate(doc, json.loads(FIT_SCHEMA.read_text()))
    assert doc["fits"] is (rc == 0)
    assert doc["fits"] is (doc["fits_in_memory"] and not doc["past_model_context"])
    assert doc["fits_in_memory"] is (doc["total_gb"] <= doc["usable_gb"])


def test_shown_turns_are_all_or_a_readable_subset() -> None:
    assert shown_turns(4) == [1, 2, 3, 4]
    assert shown_turns(20) == [1, 2, 5, 10, 20]
    assert shown_turns(30) == [1, 2, 10, 20, 30]
    assert all(len(shown_turns(k)) <= 5 and shown_turns(k)[-1] == k for k in range(1, 500))


def _table_cell(out: str, row: str, turn: str) -> str:
    lines = out.splitlines()
    head = next(i for i, line in enumerate(lines) if line.split()[:1] == ["Turn"])
    turns = lines[head].split()[1:]
    cells = re.split(r"\s{2,}", next(line for line in lines[head:] if line.strip().startswith(row)).strip())
    return cells[1 + turns.index(turn)]


@pytest.mark.usefixtures("screen")
def test_the_table_fits_80_columns_and_the_headline_is_read_off_it(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*STRIX_ARGS, "--concurrency", "1,8", "--think-time", "5s"]) == 0
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 80
    assert out.count("PREDICTED") >= 1 and "1 agent:" in out and "8 agents:" in out
    assert re.search(r"^\s+Turn\s+1\s+2\s+5\s+10\s+20\s*$", out, re.M)  # a table, not one block per value
    cached = _table_cell(out, "TTFT cached", "20")
    uncached = _table_cell(out, "TTFT uncached", "20")
    text = " ".join(out.split())  # the lines under the table wrap at 80 columns
    assert f"turn 20: TTFT {cached} with the prefix cache, {uncached} without" in text
    assert re.search(r"session: 20 turns; tokens: shared prefix \d+, .*; think 5 s ", text)  # a time, not tokens
    assert re.search(r"TTFT cached ±\d+%", out)  # the band, on the estimate's row
    # llama-server's own 4 slots (its default since November 2025's builds): 8 agents wait for them
    assert "8 agents on 4 slots" in text and "host-memory prompt cache" in text
    m = re.search(r"session \(20 turns\): ([\d.,]+) s = ([\d.,]+) s to first tokens \+ ([\d.,]+) s decoding "
                  r"\(20 x 399 tokens after the first\) \+ ([\d.,]+) s thinking \(19 x 5 s\)", text)
    assert m, out
    total, *parts = (float(g.replace(",", "")) for g in m.groups())
    assert total == pytest.approx(sum(parts), abs=1.5)  # each printed to 3 figures


@pytest.mark.usefixtures("screen")
def test_an_uncalibrated_backend_shows_ceilings_marked(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["predict", "--hardware", STRIX[0], "--model", STRIX[1], "--engine", "llama.cpp sycl",
                 *SESSION]) == 0
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 80
    assert "TTFT cached, floor" in out and "Decode tok/s, ceiling" in out
    text = " ".join(out.split())
    assert "PREDICTED, UNCALIBRATED" in text and "(ceilings: UNCALIBRATED, no estimate)" in text


@pytest.mark.parametrize("args,says", [
    (["--sessions", "--test", "depth"], "--test predicts llama-bench's one stream"),
    (["--sessions", "--depth", "8k"], "--depth predicts llama-bench's one stream"),
    (["--sessions", "--against", "rows.csv"], "--against predicts the rows of a file"),
    (["--turns", "20"], "--turns describes an agent's session: add --sessions"),
    (["--tool-len", "800", "--think-time", "5s"], "--tool-len, --think-time describe an agent's session"),
    (["--max-context", "32k"], "add --sessions"),
    (["--input-len", "uniform:500-1500"], "a drawn length goes with --sessions"),
    (["--sessions", "4", "--concurrency", "1,8"], "only 4 agents could run at once"),
    (["--sessions", "--tool-len", "lots"], "--tool-len: 'lots' is not a token count"),
    (["--sessions", "--think-time", "soon"], "--think-time: 'soon' is not a time"),
    (["--sessions", "--input-len", "2000", "--max-context", "2k"], "the first turn already needs"),
])
def test_flags_that_make_no_sense_with_sessions_are_refused_in_one_line(
        args: list[str], says: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["predict", "--hardware", H100[0], "--model", H100[1], *args]) == 2
    out = capsys.readouterr()
    assert says in out.err and out.out == "" and len(out.err.strip().splitlines()) == 1


def test_a_saved_session_prediction_round_trips_through_the_store(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "r.db")
    assert main([*STRIX_ARGS, "--concurrency", "1,8", "--think-time", "5s", "--sessions", "16", "--save",
                 "strix-session", "--db", db]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert ") saved in " in out and "16 sessions on 8 agents: 2 after another" in out
    res = load_result(Store(db, readonly=True), "strix-session")
    assert res.kind == "predict" and res.manifest.predicted_mark == "PREDICTED"
    assert res.manifest.workload is not None and res.manifest.workload["turns"] == 20
    # with the cache and without it, as a measured session run with its baseline
    assert [(o.summary.concurrency, o.summary.session and o.summary.session.cache) for o in res.outcomes] == [
        (1, "warm"), (1, "busted"), (8, "warm"), (8, "busted")]
    assert res.manifest.shape is not None and res.manifest.shape["parallel"] == 4  # llama-server's own slots
    s = Setup.make(Catalog.load(), Calibration.packaged(), *STRIX).with_slots(4)
    for o in res.outcomes:
        st = o.summary.session
        assert st is not None and st.sessions == 16 and st.cached_source == "predicted"
        warm = st.cache == "warm"
        p = predict_session(s, shape(), o.summary.concurrency or 1)
        assert [t.turn for t in st.turns] == list(range(20))  # TurnPoint counts from 0
        for tp, t in zip(st.turns, p.turns):
            assert tp.context_tokens_mean == t.context and tp.cached_tokens_mean == (t.cached if warm else 0)
            assert tp.n == 0
            assert tp.ttft_ms.p50 == pytest.approx((t.ttft_s if warm else t.cold_ttft_s).estimate * 1000)
        assert st.session_s.p50 == pytest.approx(p.time(warm).total.estimate)
        # the hours it holds the box: 16 sessions, back to back on its agents (what cost prices a session at)
        assert o.summary.duration_s == pytest.approx(16 // (o.summary.concurrency or 1) * p.time(warm).total.estimate)
    assert main(["show", "strix-session", "--db", db]) == 0
    shown = capsys.readouterr().out
    assert "PREDICTED" in shown and "1 agent: each turn" in shown
    said = " ".join(shown.split())  # the workload is the session's, not one request of the task's length
    assert "sessions x 20 turns, shared prompt" in said and " in / " not in said
    gain = next(ln for ln in shown.splitlines() if ln.split()[:1] == ["20"])
    assert "—" not in gain and gain.split()[-2].endswith("x")  # TTFT busted and the gain, per turn
    # the report says the session in words, each draw once: no "input len", "think time s" of the means stored
    from tokenbench.report.facts import workload
    words = workload(res)
    assert words is not None and words.startswith("16 agent sessions of 20 turns, 2,000-token shared prefix, task ")
    assert ", tool results " in words and ", answers " in words and ", think " in words
    assert " len " not in words and "time s" not in words, words
    assert main(["cost", "strix-session", "--db", db, "--price-per-hour", "2"]) == 0
    priced = [ln.split() for ln in capsys.readouterr().out.splitlines() if ln.split()[1:2] in (["warm"], ["busted"])]
    assert len(priced) == 4 and all(float(r[5]) > 0 for r in priced)  # USD/session, no longer blank


def test_llama_server_agents_wait_for_its_slot_saves_as_measured_on_the_h200(cat: Catalog) -> None:
    """Four agents, 8 sessions of 6 turns (512 shared tokens, a 1,024-token task, tool results of 64-192,
    answers of 128) against llama-server with 32 slots on an H200 (benchmarks/device/h200-2026-11/
    sessions.json, never in a fit): sessions took 9.3 s (p50) with the prefix cache and turns 2-6 waited 0.7-0.9 s
    for a first token where prefilling ~270 new tokens takes ~30 ms. As each turn starts llama-server saves the
    other agents' idle slots, their whole context's KV cache, to its host prompt cache (--cache-ram) with no slot
    running (serving.LLAMA_SAVE_GBS). Without the saves in the model, those turns came to 47 ms and the session to
    3.7 s."""
    runs = json.loads((DEVICE / "h200-2026-11" / "sessions.json").read_text())
    warm = next(lv["session"] for lv in runs["levels"] if lv["session"]["cache"] == "warm")
    s = Setup.make(cat, Calibration.packaged(), "nvidia-h200-sxm", "m8b-random", "Q4_0", "F16", "llama.cpp",
                   parallel=32)
    p = predict_session(s, shape(turns=6, shared_prefix=512, input_len=Draw.fixed(1024), tool_len=Draw.fixed(128),
                                 output_len=Draw.fixed(128), think_time=Draw.fixed(0.0, "s")), 4)
    assert p.time().total.estimate == pytest.approx(warm["session_s"]["p50"], rel=0.25)
    for t in warm["turns"][1:]:
        predicted = p.turns[t["turn"]].ttft_s.estimate
        assert 0.7 < predicted / (t["ttft_ms"]["p50"] / 1e3) < 1.4, t["turn"]
    assert any("saves the slot" in n for n in p.notes)


def test_llama_servers_slot_saves_one_a_request_and_none_of_an_agents_own_next_turn() -> None:
    """llama-server saves every idle slot not yet saved as it launches a task. A sweep's next request goes to the
    least recently used slot, so the slot its agent just left is saved: one save a request. An agent's next turn
    continues its own slot (the most similar prompt), which is then overwritten, not saved: only the slots of the
    agents idle at that moment are. Other engines keep no such cache: no saves counted."""
    from tokenbench.predict import queue

    def saves_per_request(n: int, cached: int, slot_saves: bool = True) -> float:
        """The saves an agent's cycle holds (a save timed as 1 s: its cycle's length), over the agents."""
        loop = queue.closed_loop(n, 512, 127, 2048, True, "together", 1, cached, 1, slot_saves)
        return queue.evaluate(loop, [float(k.saves) for k in loop.kinds]).cycle / n

    assert saves_per_request(1, 0) == pytest.approx(1.0)
    assert saves_per_request(4, 0) == pytest.approx(1.0)
    assert saves_per_request(1, 1024) == 0.0  # one agent alone: its own slot, nobody else's to save
    # four agents in step: each turn's first launch saves the three others' slots, then none is left to save
    assert saves_per_request(4, 1024) == pytest.approx(3 / 4)
    assert saves_per_request(4, 0, slot_saves=False) == 0.0


def test_turns_the_box_cannot_hold_get_no_speed(tmp_path: Path) -> None:
    """An A30 cannot hold 8 agents' contexts from turn 17: turn 20's TTFT and decode were printed, and the session's
    time and the agents' rate summed them, beside "Fits no" (plain predict gives no speed for a setup that cannot
    run)."""
    out = tmp_path / "p.json"
    assert main(["predict", "--hardware", "nvidia-a30", "--model", "llama-3.1-8b", "--sessions", "--turns", "20",
                 "--concurrency", "8", "--json", str(out)]) == 0
    [table] = json.loads(out.read_text())["tables"]
    rows = {r[0].split(" ±")[0].strip(): r[1:] for r in table["rows"]}
    fits = rows["Fits"]
    assert fits[0] == "yes" and fits[-1].startswith("no")
    for name in ("TTFT cached", "TTFT uncached", "Decode tok/s"):
        assert rows[name][-1] == "—" and rows[name][0] != "—", (name, rows[name])
    assert any(ln.startswith("session (20 turns): no time or rate predicted: from turn 17 the box cannot hold "
                             "8 contexts") for ln in table["lines"]), table["lines"]
    assert not any("sessions back to back" in ln for ln in table["lines"])


@pytest.mark.parametrize("agents", [1, 8, 19, 40])
def test_a_turn_without_the_cache_is_never_predicted_faster_than_with_it(cat: Catalog, cal: Calibration,
                                                                         agents: int) -> None:
    """An H100 at 19 agents read turn 2 at 663 ms uncached against 733 ms cached: the closed loop timed each
    apart, spreading the long uncached prompts one a step where the short cached ones came in waves. Without the
    cache a turn does the cached turn's work and more, at the floor and in the estimate."""
    s = Setup.make(cat, cal, "nvidia-h100-sxm", "qwen3-30b-a3b-2507", "FP8", "fp8", "vllm")
    p = predict_session(s, shape(shared_prefix=4000, input_len=Draw.fixed(2000), tool_len=Draw.fixed(1650)), agents)
    for t in p.turns:
        assert t.cold_ttft_s.ceiling >= t.ttft_s.ceiling and t.cold_ttft_s.estimate >= t.ttft_s.estimate, t.turn
        assert t.cold_tpot_s.estimate >= t.tpot_s.estimate, t.turn


def test_agents_past_the_cache_cliff_are_said_stored_and_priced_so(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """A Strix Halo keeps 7 such sessions warm, yet 16 agents were printed, stored and priced "16 warm" as if
    every session stayed in the cache. The table says where its agents pass the cliff, the stored warm level is
    flagged past_cache_cliff, and cost marks its row."""
    db, out = tmp_path / "r.db", tmp_path / "p.json"
    args = ["predict", "--hardware", "amd-ryzen-ai-max-395", "--model", "qwen3-30b-a3b-2507", "--kv", "q8_0",
            "--sessions", "--turns", "20", "--shared-prefix", "4000", "--input-len", "2000", "--tool-len", "1650",
            "--output-len", "400", "--concurrency", "4,16", "--db", str(db), "--save", "strix", "--json", str(out)]
    assert main(args) == 0
    said = " ".join(capsys.readouterr().out.split())
    doc = json.loads(out.read_text())
    holds = doc["warm"]["holds"]
    assert 4 < holds < 16, holds
    assert f"16 agents pass the {holds} live sessions the cache keeps warm" in said and "4 agents pass" not in said
    flagged = {(lv["concurrency"], lv["session"]["cache"]) for lv in doc["levels"] if "past_cache_cliff" in lv["flags"]}
    assert flagged == {(16, "warm")}, flagged
    assert main(["cost", "strix", "--db", str(db), "--owned", "--purchase", "2500", "--life-years", "3",
                 "--watts", "120"]) == 0
    rows = [line.split()[:2] for line in capsys.readouterr().out.splitlines() if line.startswith(" 16 ")]
    assert rows == [["16", "warm*"], ["16", "busted"]], rows


def test_the_reasons_a_band_widened_are_in_the_order_of_their_numbers(capsys: pytest.CaptureFixture[str]) -> None:
    """"concurrency 16, 32, 40, 8 beyond the highest row" read as a plain sort put them."""
    assert main(["predict", "--hardware", "amd-ryzen-ai-max-395", "--model", "qwen3-30b-a3b-2507", "--kv", "q8_0",
                 "--input-len", "512", "--output-len", "64", "--parallel", "4", "--concurrency", "8,16,32,40",
                 "--db", "/dev/null/none"]) == 0
    said = [int(m) for m in re.findall(r"concurrency (\d+) beyond the highest row", capsys.readouterr().out)]
    assert len(said) >= 2 and said == sorted(said), said


def test_a_ratio_whose_band_has_no_upper_end_says_so_in_words(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """A Strix Halo's session throughput band reaches no rate at all at its slow end, so the H100's ratio over it
    has no upper end: it read "21.36× (2.08–∞)"."""
    db = tmp_path / "r.db"
    session = ["--sessions", "--turns", "20", "--shared-prefix", "4000", "--input-len", "2000", "--tool-len", "1650",
               "--output-len", "400", "--concurrency", "16", "--db", str(db)]
    assert main(["predict", "--hardware", "nvidia-h100-sxm", "--model", "qwen3-30b-a3b-2507", "--weights", "FP8",
                 "--kv", "fp8", *session, "--save", "h100"]) == 0
    assert main(["predict", "--hardware", "amd-ryzen-ai-max-395", "--model", "qwen3-30b-a3b-2507", "--kv", "q8_0",
                 *session, "--save", "strix"]) == 0
    capsys.readouterr()
    assert main(["compare", "h100", "strix", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    rate = next(line for line in out.splitlines() if line.lstrip().startswith("Output tok/s"))
    assert "∞" not in out and re.search(r"× \([\d.]+ or more\)$", rate.rstrip()), rate


def test_a_sweeps_ratio_whose_band_has_no_upper_end_says_so_in_words(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "r.db"
    shape = ["--concurrency", "1,16", "--input-len", "2000", "--output-len", "400", "--db", str(db)]
    assert main(["predict", "--hardware", "nvidia-h100-sxm", "--model", "qwen3-30b-a3b-2507", *shape,
                 "--save", "h"]) == 0
    assert main(["predict", "--hardware", "amd-ryzen-ai-max-395", "--model", "qwen3-30b-a3b-2507", *shape,
                 "--save", "s"]) == 0
    capsys.readouterr()
    assert main(["compare", "h", "s", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert "∞" not in out and re.search(r"\([\d.]+ or more, band\)", out), out
