"""Recorded agent trajectories (tokenbench.trajectories): each format loads its packaged example with figures worked
out here by hand, formats are told apart by content, the Weka readings (floor/ceil hash ids, a subagent's ``t`` as
its return, the pause after a call without ``api_time``) hold, and every malformed kind is refused in one line that
names the file, the line or record, and the field."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import fuzz_examples
from tokenbench.errors import UsageError
from tokenbench.trajectories.load import detect_format, is_trajectory_file, load_trajectories
from tokenbench.trajectories.model import TRACE_FORMATS, Call, TrajectorySet

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "trajectories"
WEKA = EXAMPLES / "weka-claude-code.json"
MLCOMMONS = EXAMPLES / "mlcommons-agentic.jsonl"
TRACELAB = EXAMPLES / "tracelab-rounds.jsonl"
SESSION_LOG = EXAMPLES / "session-log.jsonl"
SESSION_LENGTHS = EXAMPLES / "session-log-lengths.jsonl"


def test_the_trace_format_names_are_the_option_s_choices() -> None:
    assert TRACE_FORMATS == ("mooncake", "csv", "weka", "mlcommons", "tracelab", "session-log")


# ---- Weka ---------------------------------------------------------------------------------------------------------

def test_the_weka_example_loads_with_its_figures() -> None:
    s = load_trajectories(WEKA)
    assert (s.format, s.block, len(s.trajectories)) == ("weka", 64, 1)
    f = s.figures
    ins = [700, 900, 1000, 1300, 1400] + [300, 400] + [128]
    assert (f.calls, f.subagents, f.input_tokens, f.output_tokens) == (8, 2, sum(ins), 50 + 40 + 30 + 60 + 10 + 20 + 10 + 5)
    # by send time: c0 c1 c2, explore's first (14.0), background's (14.2), explore's second (17.0), c3, c4
    served = (10 * 64) + (14 * 64) + 0 + 0 + (4 * 64) + (15 * 64) + (20 * 64 + 20)  # c4 reaches c3's 20-token tail
    distinct = 640 + 256 + 64 + 256 + 128 + 128 + (5 * 64 + 20) + (64 - 20)
    assert f.ideal_cached_share == pytest.approx(served / sum(ins))
    assert f.distinct_block_tokens == distinct
    assert f.max_concurrent_subagents == 2  # background (14.2-14.7) runs inside explore (14.0-20.0)


def test_weka_hash_ids_cover_the_floor_or_the_ceil_of_in_over_block() -> None:
    calls = load_trajectories(WEKA).trajectories[0].calls
    c3, c4 = calls[3].blocks, calls[4].blocks
    assert c3 is not None and c4 is not None
    assert (c3.rounding, len(c3.hash_ids), c3.partial, c3.block_tokens()[-1]) == ("ceil", 21, 1300 - 20 * 64, 20)
    assert (c4.rounding, len(c4.hash_ids), c4.partial, c4.block_tokens()[-1]) == ("floor", 21, 1400 - 21 * 64, 64)
    assert calls[0].blocks is not None and calls[0].blocks.rounding == "floor" and calls[0].blocks.partial == 60


def test_weka_calls_that_extend_the_last_share_its_hash_id_buffer() -> None:
    calls = load_trajectories(WEKA).trajectories[0].calls
    b0, b1, b2 = (c.blocks.hash_ids for c in calls[:3])  # type: ignore[union-attr]
    assert b1.shares_buffer(b0) and b2.shares_buffer(b1)
    assert list(b0) == list(range(1, 11)) and list(b2) == list(range(1, 16)) and b2[-1] == 15 and b2[:2] == (1, 2)


def test_a_completed_weka_subagent_starts_duration_before_its_t_and_the_parent_waits() -> None:
    root = load_trajectories(WEKA).trajectories[0]
    explore, background = root.subagents
    # explore: t 20.0 is its return; 6 s long, so it started at 14.0, 0.5 s after c2 ended (12 + 1.5)
    assert (explore.start_s, explore.end_s, explore.after_call, explore.joined_by) == (14.0, 20.0, 2, 3)
    assert explore.delay_s == pytest.approx(0.5)
    assert explore.trajectory.id == "example-session/agent_001" and explore.trajectory.kind == "Explore"
    assert [c.start_s for c in explore.trajectory.calls] == [0.0, 3.0]
    # async_launched: starts at t, nobody waits
    assert (background.start_s, background.end_s, background.joined_by) == (14.2, None, None)
    # c3 waited for explore: its pause runs from explore's return (20.0) to its send (22.0)
    assert (root.calls[3].pause_from, root.calls[3].pause_s) == ("subagents", 2.0)


def test_after_a_call_without_api_time_the_pause_is_the_gap_less_an_estimated_duration() -> None:
    calls = load_trajectories(WEKA).trajectories[0].calls
    assert [(c.pause_from, c.pause_s) for c in (calls[0], calls[1], calls[4])] == [
        ("start", 0.0), ("answer", 3.0), ("answer", 5.0)]
    # c1 has no api_time: the median seconds per output token of c0, c2, c3, c4 (0.04, 0.05, 0.05, 0.1) is 0.05,
    # so c1 (40 tokens) took ~2 s and c2 came 12 - 5 - 2 = 5 s after it; its think_time (10) counts from c0's end
    assert calls[2].pause_from == "estimated-answer" and calls[2].pause_s == pytest.approx(5.0)
    assert calls[1].duration_s is None and calls[0].duration_s == 2.0


def test_a_folder_of_weka_traces_is_one_set(tmp_path: Path) -> None:
    for name in ("a.json", "b.json"):
        shutil.copy(WEKA, tmp_path / name)
    (tmp_path / "notes.txt").write_text("not a trace")
    s = load_trajectories(tmp_path)
    assert (s.format, len(s.trajectories), s.figures.calls) == ("weka", 2, 16)
    assert [t.path.name for t in s.trajectories] == ["a.json", "b.json"]
    assert s.figures.ideal_cached_share == pytest.approx(load_trajectories(WEKA).figures.ideal_cached_share)
    assert detect_format(tmp_path) == "weka" and is_trajectory_file(tmp_path)


# ---- MLCommons ----------------------------------------------------------------------------------------------------

def test_the_mlcommons_example_loads_a_call_per_client_row() -> None:
    s = load_trajectories(MLCOMMONS)
    a, b = s.trajectories
    assert (a.id, b.id, s.figures.calls, s.figures.input_tokens) == ("swe-example-1", "swe-example-2", 7, None)
    assert [len(c.messages) for c in a.calls] == [2, 4, 7, 9]  # system+user; +assistant+tool; +assistant+2 tools; ...
    assert [c.pause_s for c in a.calls] == [0.0, 0.5, 1.25, 4.0] and [c.where for c in a.calls] == [
        "line 1", "line 3", "line 5", "line 7"]
    assert all(c.start_s is None for c in a.calls)
    answer = a.calls[1].answer
    assert answer is not None and [t.id for t in answer.tool_calls] == ["functions.bash:1", "functions.bash:2"]
    assert a.calls[0].answer is not None and a.calls[0].answer.reasoning_content == "Look at the file first."
    assert [m.tool_call_id for m in a.calls[2].messages[-2:]] == ["functions.bash:1", "functions.bash:2"]
    assert a.calls[3].messages[-1].content == "Thanks. Run the whole suite too."
    # a tool row followed by a user row: that call has no recorded answer
    assert [c.answer is None for c in b.calls] == [False, True, False]


def test_mlcommons_calls_share_their_history_and_tools() -> None:
    a = load_trajectories(MLCOMMONS).trajectories[0]
    assert all(x is y for x, y in zip(a.calls[3].messages, a.calls[2].messages))
    assert a.calls[1].messages[2] is a.calls[0].answer
    assert a.calls[0].tools is not None and all(c.tools is a.calls[0].tools for c in a.calls)
    assert a.calls[0].messages[0].to_wire() == {"role": "system", "content": "You are a helpful coding agent."}
    wire = a.calls[1].messages[2].to_wire()
    assert wire["content"] is None and wire["tool_calls"][0]["function"]["name"] == "bash"


# ---- TraceLab -----------------------------------------------------------------------------------------------------

def test_the_tracelab_example_loads_sessions_in_time_order() -> None:
    s = load_trajectories(TRACELAB)
    claude, codex = s.trajectories
    assert s.skipped == (("with no timestamped event", 1),)
    assert [c.where for c in codex.calls] == ["line 2", "line 5", "line 4"]  # round 2 was sent before round 1
    ids = [list(c.blocks.hash_ids) for c in codex.calls]  # type: ignore[union-attr]
    assert ids == [list(range(1, 8)), list(range(1, 11)), list(range(1, 5)) + list(range(11, 21))]
    assert [(c.pause_from, c.pause_s) for c in claude.calls] == [("start", 0.0), ("answer", 1.5), ("answer", 52.0)]
    assert [c.pause_s for c in codex.calls] == [0.0, 1.5, 3.0]  # a usage_report is not output
    assert [c.start_s for c in claude.calls] == [0.0, 6.5, 60.0]
    assert claude.epoch_s == pytest.approx(1780308000.0)  # 2026-06-01T10:00:00Z
    assert claude.calls[0].tool_uses[0].name == "Bash" and claude.calls[0].tool_uses[0].seconds == 1.5
    assert codex.calls[0].tool_uses[0].seconds == 1.0  # the tool's own latency wins over the wall latency
    served = 15 * 64 + 20 * 64 + 7 * 64 + 4 * 64
    assert s.figures.ideal_cached_share == pytest.approx(served / (1000 + 1300 + 1500 + 500 + 700 + 900))
    assert s.figures.distinct_block_tokens == 23 * 64 + 20 * 64


def test_tracelab_hash_ids_follow_the_block_asked_for() -> None:
    s = load_trajectories(TRACELAB, block=100)
    assert s.block == 100 and [len(c.blocks.hash_ids) for c in s.trajectories[0].calls] == [10, 13, 15]  # type: ignore[union-attr]


# ---- session log --------------------------------------------------------------------------------------------------

def test_the_session_log_example_anchors_its_subagent_from_the_times() -> None:
    s = load_trajectories(SESSION_LOG)
    (main,) = s.trajectories
    (sub,) = main.subagents
    assert (sub.trajectory.id, sub.after_call, sub.start_s, sub.joined_by, sub.end_s) == ("main/explore", 0, 2.5, 1, 5.0)
    assert sub.delay_s == pytest.approx(0.5)
    assert [(c.pause_from, c.pause_s) for c in main.calls] == [("start", 0.0), ("subagents", 1.0), ("answer", 2.0)]
    assert [c.start_s for c in main.calls] == [0.0, 6.0, 9.0] and main.calls[0].ttft_s == pytest.approx(0.4)
    assert main.epoch_s == pytest.approx(1777626000.0)  # 2026-05-01T09:00:00Z
    assert (s.figures.calls, s.figures.input_tokens, s.figures.output_tokens) == (5, 216, 95)
    assert main.calls[2].tool_choice == "auto" and main.calls[2].answer is not None


def test_session_log_calls_share_re_sent_messages_and_answers() -> None:
    main = load_trajectories(SESSION_LOG).trajectories[0]
    c0, c1, c2 = main.calls
    assert c1.messages[0] is c0.messages[0] and c1.messages[2] is c0.answer and c2.messages[4] is c1.answer
    assert c1.tools is c0.tools


def test_a_session_log_that_keeps_the_text_may_leave_the_counts_unsaid(tmp_path: Path) -> None:
    """A stream the client asked no usage of has no counts: the line says null, the call has None (a replay counts
    it), and a pause left null (two requests of one session in flight) is taken from the times."""
    body = _lines(SESSION_LOG, 3, _set("usage", {"prompt_tokens": None, "completion_tokens": None,
                                                 "cached_tokens": None}))
    body = "".join(json.dumps({**json.loads(x), "pause": None}) + "\n" if i == 4 else x
                   for i, x in enumerate(body.splitlines(True)))
    s = load_trajectories(_write(tmp_path, "s.jsonl", body))
    sub = s.trajectories[0].subagents[0].trajectory
    assert (sub.calls[0].input_tokens, sub.calls[0].output_tokens, sub.calls[0].cached_tokens) == (None, None, None)
    assert sub.calls[1].input_tokens == 36 and s.figures.input_tokens == 216 - 20
    assert s.trajectories[0].calls[1].pause_s == 1.0


def test_a_session_log_cut_in_the_middle_of_its_last_write_loads_up_to_its_last_whole_line(tmp_path: Path) -> None:
    """A crash or a full disk during the recorder's write leaves a last line with no newline, not JSON: it is left
    out and counted, and the replay's heading says so. A broken line anywhere else is still refused, and a whole
    last line without its newline is a request like any other."""
    from tokenbench.replay import ReplayPlan
    from tokenbench.replay_table import replay_heading
    from tokenbench.trajectories.session_log import CUT_LAST_LINE

    lines = SESSION_LOG.read_text().splitlines(True)
    cut = load_trajectories(_write(tmp_path, "cut.jsonl", "".join(lines[:-1]) + lines[-1][: len(lines[-1]) // 2]))
    whole = load_trajectories(SESSION_LOG)
    assert cut.skipped == ((CUT_LAST_LINE, 1),)
    assert cut.figures.calls == whole.figures.calls - 1
    assert "1 line cut short in its write" in ReplayPlan(cut).describe()
    assert "left out" not in ReplayPlan(whole).describe()
    # the heading printed above the tables and in reports, read from the run's stored manifest
    assert "1 line cut short in its write" in replay_heading(json.loads(json.dumps(ReplayPlan(cut).to_dict())))
    unended = load_trajectories(_write(tmp_path, "unended.jsonl", "".join(lines).rstrip("\n")))
    assert unended.skipped == () and unended.figures.calls == whole.figures.calls
    broken = "".join(lines[:2]) + lines[2][:20] + "\n" + "".join(lines[3:])
    with pytest.raises(UsageError, match=r"broken.jsonl:3: line: not JSON"):
        load_trajectories(_write(tmp_path, "broken.jsonl", broken))


def test_the_lengths_only_session_log_has_the_same_calls_and_blocks() -> None:
    s = load_trajectories(SESSION_LENGTHS)
    assert s.block == 16 and all(c.messages == () for c in s.trajectories[0].calls)
    # by send: main 40 [1,2,3], explore 20 [50,51], explore 36 [50,51,52], main 56 [1..4], main 64 [1..4]
    served = 0 + 0 + (16 + 4) + (32 + 8) + (48 + 8)
    assert s.figures.ideal_cached_share == pytest.approx(served / (40 + 20 + 36 + 56 + 64))
    assert s.figures.distinct_block_tokens == 40 + 20 + 16 + 16 + 8


# ---- detection ----------------------------------------------------------------------------------------------------

def _write(tmp_path: Path, name: str, body: str | bytes) -> Path:
    p = tmp_path / name
    p.write_bytes(body if isinstance(body, bytes) else body.encode())
    return p


@pytest.mark.parametrize(("name", "body", "fmt"), [
    ("t.json", '{"timestamp": 0, "input_length": 5, "output_length": 2, "hash_ids": [1]}\n', "mooncake"),
    ("t.jsonl", WEKA.read_text(), "weka"),
    ("t.json", json.dumps(json.loads(WEKA.read_text()), indent=2), "weka"),
    ("t.txt", MLCOMMONS.read_text(), "mlcommons"),
    ("t.json", TRACELAB.read_text(), "tracelab"),
    ("t.jsonl", SESSION_LOG.read_text(), "session-log"),
    ("t.json", "timestamp,input_length,output_length\n0,5,2\n", "csv"),
    ("t.jsonl", '{"prompt": "hello"}\n', None),
    ("t.jsonl", "[1, 2]\n", None),  # an array of no records tells no format: read as Mooncake, its fault said
])
def test_the_format_is_detected_by_content_not_suffix(tmp_path: Path, name: str, body: str, fmt: str | None) -> None:
    p = _write(tmp_path, name, body)
    assert detect_format(p) == fmt
    assert is_trajectory_file(p) == (fmt in ("weka", "mlcommons", "tracelab", "session-log"))


def test_a_mooncake_trace_is_not_loaded_as_trajectories(tmp_path: Path) -> None:
    p = _write(tmp_path, "t.json", '{"timestamp": 0, "input_length": 5, "output_length": 2}\n')
    assert one_line(lambda: load_trajectories(p)) == f"{p}: a mooncake trace, not agent trajectories (it replays as a " \
                                                   "trace: --trace-format mooncake)"


def test_a_named_format_is_used_as_named(tmp_path: Path) -> None:
    assert load_trajectories(MLCOMMONS, fmt="mlcommons").format == "mlcommons"
    assert ":2: line: a second JSON record: a Weka trace is one JSON object, not JSON lines" in one_line(
        lambda: load_trajectories(MLCOMMONS, fmt="weka"))
    assert "--trace-format 'nope'" in one_line(lambda: load_trajectories(MLCOMMONS, fmt="nope"))


# ---- one-line refusals --------------------------------------------------------------------------------------------

def one_line(load: Callable[[], TrajectorySet]) -> str:
    with pytest.raises(UsageError) as e:
        load()
    text = str(e.value)
    assert len(text.splitlines()) == 1, text
    return text


def _weka(edit: Callable[[dict[str, Any]], None]) -> str:
    d = json.loads(WEKA.read_text())
    edit(d)
    return json.dumps(d)


def _lines(path: Path, line: int, edit: Callable[[dict[str, Any]], Any]) -> str:
    rows = [json.loads(x) for x in path.read_text().splitlines()]
    out = edit(rows[line - 1])
    if out is not None:
        rows[line - 1] = out
    return "".join(json.dumps(r) + "\n" for r in rows)


def _set(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(d: dict[str, Any]) -> None:
        *path, last = key.split(".")
        for k in path:
            d = d[int(k)] if k.isdigit() else d[k]  # type: ignore[index]
        if value is _DEL:
            del d[last]
        else:
            d[int(last) if last.isdigit() else last] = value  # type: ignore[index]
    return edit


_DEL = object()

#: (name, file suffix, body, what the message names: the record or line and the field, and why)
REFUSALS: list[tuple[str, str, str | bytes, str]] = [
    ("not utf-8", "weka.json", b'{"id": "\xff"}', ": not UTF-8 text (byte 8)"),
    ("empty", "weka.json", "  \n", ": an empty file: no trajectories in it"),
    ("not json", "weka.json", '{"id": "x", "block_size": 64, "requests": [', "t.json: file: not JSON (Expecting value at line 1, column 44)"),
    ("weka in negative", "weka.json", _weka(_set("requests.2.in", -4)),
     ": requests[2].in: -4 is not a positive number of tokens"),
    ("weka out not a number", "weka.json", _weka(_set("requests.0.out", "50")),
     ": requests[0].out: '50' is not a whole number of tokens"),
    ("weka in too long", "weka.json", _weka(_set("requests.0.in", 1 << 30)),
     ": requests[0].in: 1073741824 tokens is more than one call may send or answer"),
    ("weka missing block_size", "weka.json", _weka(_set("block_size", _DEL)), ": block_size: missing"),
    ("weka hash ids inconsistent", "weka.json", _weka(_set("requests.0.hash_ids", [1, 2, 3])),
     ": requests[0].hash_ids: 3 hash ids for 700 tokens in blocks of 64, where 10 (floor(in / block)) or 11"),
    ("weka hash ids not ints", "weka.json", _weka(_set("requests.0.hash_ids", [1, True])),
     ": requests[0].hash_ids: not a list of whole numbers"),
    ("weka subagent with no requests", "weka.json", _weka(_set("requests.3.requests", [])),
     ": requests[3].requests: an empty list: a subagent with no calls"),
    ("weka nested field", "weka.json", _weka(_set("requests.3.requests.1.in", 0)),
     ": requests[3].requests[1].in: 0 is not a positive number of tokens"),
    ("weka time going back", "weka.json", _weka(_set("requests.2.t", 4.0)),
     ": requests[2].t: 4 s is before requests[1]'s 5 s"),
    ("weka unknown type", "weka.json", _weka(_set("requests.1.type", "x")), ": requests[1].type: 'x' is not n, s"),
    ("weka negative think", "weka.json", _weka(_set("requests.1.think_time", -1)),
     ": requests[1].think_time: -1 is negative"),
    ("weka nan time", "weka.json", _weka(_set("requests.1.t", float("nan"))),
     ": requests[1].t: nan is not a number of seconds"),
    ("weka global scope", "weka.json", _weka(_set("hash_id_scope", "global")), ": hash_id_scope: 'global'"),
    ("weka not an object", "weka.json", "[1, 2]", ": file: a list is not a JSON object"),
    ("weka as json lines", "weka.json", json.dumps(json.loads(WEKA.read_text())) + "\n" + '{"id": "b"}\n',
     "t.json:2: line: a second JSON record: a Weka trace is one JSON object, not JSON lines"),
    ("mlcommons unknown role", "m.jsonl", _lines(MLCOMMONS, 2, _set("role", "robot")),
     ":2: role: 'robot' is not user, assistant or tool"),
    ("mlcommons tool call without id", "m.jsonl", _lines(MLCOMMONS, 2, _set("tool_calls.0.id", _DEL)),
     ":2: tool_calls[0].id: missing"),
    ("mlcommons turn gap", "m.jsonl", _lines(MLCOMMONS, 3, _set("turn", 4)),
     ":3: turn: 4 where turn 3 comes next"),
    ("mlcommons turn not a number", "m.jsonl", _lines(MLCOMMONS, 3, _set("turn", "3")),
     ":3: turn: '3' is not a whole number"),
    ("mlcommons role order", "m.jsonl", _lines(MLCOMMONS, 2, _set("role", "user")), ":2: role: user after user"),
    ("mlcommons unanswered tool result", "m.jsonl",
     _lines(MLCOMMONS, 3, _set("tool_results.0.tool_call_id", "functions.bash:9")),
     ":3: tool_results[0].tool_call_id: 'functions.bash:9' answers no tool call"),
    ("mlcommons split conversation", "m.jsonl",
     MLCOMMONS.read_text() + json.dumps({"conversation_id": "swe-example-1", "turn": 9, "role": "user",
                                         "content": "x"}) + "\n",
     ":14: conversation_id: 'swe-example-1' again after other conversations"),
    ("mlcommons negative delay", "m.jsonl", _lines(MLCOMMONS, 3, _set("delay_seconds", -0.5)),
     ":3: delay_seconds: -0.5 is negative"),
    ("mlcommons empty assistant", "m.jsonl", _lines(MLCOMMONS, 6, _set("content", None)), ":6: content: missing"),
    ("mlcommons not an object", "m.jsonl", MLCOMMONS.read_text() + "[]\n", ":14: line: not a JSON object"),
    ("tracelab token split", "t.jsonl", _lines(TRACELAB, 3, _set("prefix_tokens", 999)),
     ":3: input_tokens_total: 1300 is not prefix_tokens + newly_append_tokens (999 + 300)"),
    ("tracelab bad time", "t.jsonl", _lines(TRACELAB, 1, _set("timing_events.1.timestamp", "10 o'clock")),
     ":1: timing_events[1].timestamp: \"10 o'clock\" is not an ISO 8601 time"),
    ("tracelab negative output", "t.jsonl", _lines(TRACELAB, 2, _set("output_tokens", -1)),
     ":2: output_tokens: -1 is not a non-negative number of tokens"),
    ("tracelab missing field", "t.jsonl", _lines(TRACELAB, 2, _set("prefix_tokens", _DEL)), ":2: prefix_tokens: missing"),
    ("tracelab tool latency", "t.jsonl", _lines(TRACELAB, 1, _set("tools.0.tool_wall_latency_ms", -3)),
     ":1: tools[0].tool_wall_latency_ms: -3 is negative"),
    ("session log without header", "s.jsonl", "".join(SESSION_LOG.read_text().splitlines(True)[1:]),
     ":1: format: this line is a call, not the header a session log starts with (naming 'tokenbench-session-log', "
     "as record writes it first): was the header line removed?"),
    ("session log header not a log's", "s.jsonl", _lines(SESSION_LOG, 1, _set("format", "other")),
     ":1: format: 'other': a session log starts with a header naming 'tokenbench-session-log'"),
    ("session log version", "s.jsonl", _lines(SESSION_LOG, 1, _set("version", 2)), ":1: version: 2"),
    ("session log headers", "s.jsonl", _lines(SESSION_LOG, 2, _set("headers", {"x": "y"})),
     ":2: headers: a session log holds no headers or keys"),
    ("session log api key", "s.jsonl", _lines(SESSION_LOG, 2, _set("request.api_key", "k")),
     ":2: request.api_key: a session log holds no headers or keys"),
    ("session log pause", "s.jsonl", _lines(SESSION_LOG, 5, _set("pause", 1.0)),
     ":5: pause: 1 s where the times say 4 s"),
    ("session log end order", "s.jsonl", _lines(SESSION_LOG, 3, _set("end", 1.0)),
     ":3: end: sent 2.5, first_byte 2.7, end 1 s are not in that order"),  # the field out of order is named
    ("session log first byte order", "s.jsonl", _lines(SESSION_LOG, 3, _set("first_byte", 2.0)),
     ":3: first_byte: sent 2.5, first_byte 2, end 3.5 s are not in that order"),
    ("session log lines order", "s.jsonl", _lines(SESSION_LOG, 3, lambda d: {**d, "sent": 1.0, "first_byte": 1.2, "end": 1.5}),
     ":3: end: 1.5 s is before the line before's 2 s"),
    ("session log unknown role", "s.jsonl", _lines(SESSION_LOG, 2, _set("request.messages.1.role", "boss")),
     ":2: request.messages[1].role: 'boss' is not system, developer, user, assistant or tool"),
    ("session log tool call without id", "s.jsonl", _lines(SESSION_LOG, 2, _set("response.tool_calls.0.id", "")),
     ":2: response.tool_calls[0].id: missing"),
    ("session log tool message without id", "s.jsonl",
     _lines(SESSION_LOG, 5, _set("request.messages.3.tool_call_id", _DEL)),
     ":5: request.messages[3].tool_call_id: missing"),
    ("session log unknown parent", "s.jsonl", _lines(SESSION_LOG, 3, lambda d: {**d, "session": "other", "parent": "ghost"}),
     ":3: parent: 'ghost' is no session of this log"),
    ("session log cached", "s.jsonl", _lines(SESSION_LOG, 2, _set("usage.cached_tokens", 41)),
     ":2: usage.cached_tokens: 41 is more than the 40 prompt tokens"),
    ("session log lengths ids", "s.jsonl", _lines(SESSION_LENGTHS, 2, _set("hash_ids", [1, 2])),
     ":2: hash_ids: 2 hash ids for 40 tokens in blocks of 16, where 3 (ceil(in / block))"),
    ("session log lengths without counts", "s.jsonl", _lines(SESSION_LENGTHS, 2, _set("usage.prompt_tokens", None)),
     ":2: usage.prompt_tokens: None is not a whole number of tokens"),
    ("session log cached of no count", "s.jsonl",
     _lines(SESSION_LOG, 2, _set("usage", {"prompt_tokens": None, "completion_tokens": None, "cached_tokens": 3})),
     ":2: usage.cached_tokens: 3 where the prompt tokens are not said"),
]


@pytest.mark.parametrize(("suffix", "body", "expected"), [r[1:] for r in REFUSALS], ids=[r[0] for r in REFUSALS])
def test_a_malformed_file_is_refused_in_one_line_naming_file_record_and_field(
        tmp_path: Path, suffix: str, body: str | bytes, expected: str) -> None:
    p = _write(tmp_path, "t" + Path(suffix).suffix, body)
    fmt = {"weka.json": "weka", "m.jsonl": "mlcommons", "t.jsonl": "tracelab", "s.jsonl": "session-log"}[suffix]
    text = one_line(lambda: load_trajectories(p, fmt=fmt))
    assert text.startswith(str(p)) and expected in text, text


def test_a_session_descending_from_itself_is_refused(tmp_path: Path) -> None:
    head = SESSION_LOG.read_text().splitlines(True)[0]
    rows = [json.loads(x) for x in SESSION_LOG.read_text().splitlines()[1:3]]
    rows[0].update(session="a", parent="b")
    rows[1].update(session="b", parent="a")
    p = _write(tmp_path, "s.jsonl", head + "".join(json.dumps(r) + "\n" for r in rows))
    assert ":2: parent: session 'a' descends from itself" in one_line(lambda: load_trajectories(p))


def test_a_weka_block_other_than_the_file_s_is_refused() -> None:
    text = one_line(lambda: load_trajectories(WEKA, block=512))
    assert text.startswith(f"{WEKA}: block_size: the file's 64 disagrees with the block size asked for (512)")


# ---- property: a generated Weka trace round-trips its totals ------------------------------------------------------

@st.composite
def weka_traces(draw: st.DrawFn) -> tuple[dict[str, Any], list[tuple[int, int]]]:
    size = draw(st.sampled_from([4, 16, 64]))
    sent: list[tuple[int, int]] = []
    next_id = [1]

    def calls(n: int, t0: float) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        prefix: list[int] = []
        t = t0
        for _ in range(n):
            n_in = draw(st.integers(1, 2000))
            blocks = draw(st.sampled_from([n_in // size, -(-n_in // size)]))
            keep = draw(st.integers(0, min(len(prefix), blocks)))
            ids = prefix[:keep] + list(range(next_id[0], next_id[0] + blocks - keep))
            next_id[0] += blocks - keep
            n_out = draw(st.integers(0, 500))
            api = draw(st.none() | st.floats(0, 30))
            out.append({"t": t, "type": draw(st.sampled_from("ns")), "in": n_in, "out": n_out, "hash_ids": ids,
                        "api_time": api, "think_time": draw(st.floats(0, 10))})
            sent.append((n_in, n_out))
            prefix, t = ids, t + draw(st.floats(0, 100))
        return out

    requests = calls(draw(st.integers(1, 6)), 0.0)
    for _ in range(draw(st.integers(0, 2))):
        t = requests[-1]["t"] + draw(st.floats(1, 50))
        requests.append({"t": t, "type": "subagent", "status": "completed", "agent_id": f"a{len(requests)}",
                         "duration_ms": draw(st.integers(0, 1000)), "requests": calls(draw(st.integers(1, 3)), 0.0)})
        requests += [dict(c, t=c["t"] + t + 1) for c in calls(1, 0.0)]
    return {"id": "gen", "block_size": size, "requests": requests}, sent


@settings(max_examples=fuzz_examples(60), deadline=None, suppress_health_check=list(HealthCheck))
@given(weka_traces())
def test_a_generated_weka_trace_round_trips_its_totals(tmp_path_factory: pytest.TempPathFactory,
                                                       gen: tuple[dict[str, Any], list[tuple[int, int]]]) -> None:
    trace, sent = gen
    p = tmp_path_factory.mktemp("gen") / "t.json"
    p.write_text(json.dumps(trace))
    f = load_trajectories(p).figures
    assert (f.calls, f.input_tokens, f.output_tokens) == (len(sent), sum(a for a, _ in sent), sum(b for _, b in sent))
    assert f.subagents == sum(1 for r in trace["requests"] if r["type"] == "subagent")
    assert f.ideal_cached_share is not None and 0.0 <= f.ideal_cached_share <= 1.0
    assert f.distinct_block_tokens is not None and f.distinct_block_tokens <= f.input_tokens
    calls: list[Call] = [c for _, t in load_trajectories(p).trajectories[0].walk() for c in t.calls]
    assert all(c.pause_s >= 0 for c in calls)


@pytest.mark.parametrize("holds", [[], ["a.jsonl", "b.jsonl"], ["notes.json"]])
def test_a_folder_that_holds_no_weka_trace_says_what_a_folder_must_hold(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], holds: list[str]) -> None:
    """A folder of session logs (or nothing) given to --trace: not "cannot read it (Is a directory)", but what a
    folder is read as, what it holds, and to give one file."""
    from tokenbench.cli import main

    folder = tmp_path / "logs"
    folder.mkdir()
    for name in holds:
        (folder / name).write_text(SESSION_LOG.read_text() if name.endswith(".jsonl") else '{"notes": 1}')
    assert main(["sweep", "--url", "http://127.0.0.1:9/v1", "--trace", str(folder)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Is a directory" not in err
    assert "a folder is read as Weka/AgentX traces" in err and "give one file" in err
    assert ("it is empty" in err) if not holds else all(name in err for name in holds)


def test_milliseconds_are_held_to_a_year_as_milliseconds(tmp_path: Path) -> None:
    """A tool left running overnight (11 h, 4e7 ms) or a subagent of 11 h is a real recording, not another unit;
    a year of milliseconds is still refused, and said in milliseconds."""
    hours = 11 * 3600 * 1000
    p = _write(tmp_path, "t.jsonl", _lines(TRACELAB, 1, _set("tools.0.tool_wall_latency_ms", hours)))
    tool = load_trajectories(p, fmt="tracelab").trajectories[0].calls[0].tool_uses[0]
    assert tool.seconds == 11 * 3600
    p = _write(tmp_path, "y.jsonl", _lines(TRACELAB, 1, _set("tools.0.tool_wall_latency_ms", 400 * 86400e3)))
    assert "3.456e+10 ms is more than a year" in one_line(lambda: load_trajectories(p, fmt="tracelab"))

    def long_subagent(d: dict[str, Any]) -> None:
        sub = next(r for r in d["requests"] if r.get("status") == "completed")
        sub["t"], sub["duration_ms"] = 12 * 3600.0, hours
    p = _write(tmp_path, "w.json", _weka(long_subagent))
    subs = load_trajectories(p, fmt="weka").trajectories[0].subagents
    assert any(s.start_s == 3600.0 for s in subs)


def test_a_full_text_sets_ideal_counts_the_system_prompt_its_sessions_share(tmp_path: Path) -> None:
    """Two recorded sessions of one agent: the same tools and system prompt, each its own task. A replay's salt
    goes before the first user message, so the second session's tools and system prompt are served from the
    first's: the ideal counted only what a session's own call before sent (0 here), and the server read 42-55%
    cached against an "ideal" 6%."""
    tools = [{"type": "function", "function": {"name": "grep", "parameters": {"type": "object", "properties": {}}}}]
    system = {"role": "system", "content": "You are a coding agent. " * 20}

    def call(session: str, sent: float, task: str) -> str:
        return json.dumps({"session": session, "parent": None, "sent": sent, "first_byte": sent + 0.1,
                           "end": sent + 0.5, "pause": None,
                           "usage": {"prompt_tokens": 120, "completion_tokens": 2, "cached_tokens": 0},
                           "request": {"messages": [system, {"role": "user", "content": task}], "tools": tools},
                           "response": {"role": "assistant", "content": "ok"}})

    head = {"format": "tokenbench-session-log", "version": 1, "lengths_only": False,
            "started_at": "2026-05-01T09:00:00Z"}
    p = tmp_path / "two.jsonl"
    p.write_text("\n".join([json.dumps(head), call("a", 0.0, "fix the parser"), call("b", 1.0, "add a test")]) + "\n")
    figures = load_trajectories(p).figures
    schemas, prompt = len(json.dumps(tools)), len(system["content"])
    sent = 2 * (schemas + prompt) + len("fix the parser") + len("add a test")
    assert figures.ideal_basis == "characters"
    assert figures.ideal_cached_share == pytest.approx((schemas + prompt) / sent)
