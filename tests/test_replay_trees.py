"""A replay level's trees one by one (``show RUN --trees``): a row per tree the level started, its subagents'
calls in it, whether it finished or was cut, at 80 columns and in --json. Against the emitter."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tokenbench.cli import main
from tokenbench.emitter import BackgroundEmitter
from tokenbench.records import RequestRecord

from test_replay import EXAMPLES, call, replay, weka


def _sub(t: float, calls: list[dict[str, Any]], name: str) -> dict[str, Any]:
    return {"t": t, "type": "subagent", "agent_id": name, "status": "completed", "duration_ms": 100,
            "requests": calls}


#: three trees: the first makes 3 calls of its own and spawns 2 subagents of 2 calls each (7 calls, 2 subagents);
#: the second 4 calls; the third 1 call and a subagent of 1 (2 calls, 1 subagent)
TREES = [[call(0, 8, 2, [1, 2]), _sub(1.0, [call(0, 8, 2, [7, 8]), call(0.2, 12, 2, [7, 8, 9])], "a1"),
          call(1.5, 12, 2, [1, 2, 3]), _sub(2.0, [call(0, 8, 1, [5, 6]), call(0.2, 12, 1, [5, 6, 4])], "a2"),
          call(3.0, 16, 2, [1, 2, 3, 4])],
         [call(k, 4 * (k + 2), 1, list(range(1, k + 3))) for k in range(4)],
         [call(0, 8, 1, [1, 2]), _sub(0.5, [call(0, 8, 1, [3, 4])], "b1")]]


def test_show_trees_has_a_row_per_tree_with_its_calls_and_subagents(emitter: BackgroundEmitter, tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str],
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    db = str(tmp_path / "t.db")
    assert main(["sweep", "--url", emitter.url, "--guard", "off", "--no-metrics", "--quiet", "--db", db,
                 "--trace", str(weka(tmp_path, TREES)), "--max-think", "0s", "--concurrency", "1",
                 "--repetitions", "2", "--label", "trees"]) == 0
    capsys.readouterr()
    assert main(["show", "trees", "--trees", "--db", db]) == 0
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 80, out
    assert "(1 warm, repetition 2): each tree" in out and "Subagents" in " ".join(out.split()), out
    assert main(["show", "trees", "--trees", "1", "--db", db, "--json", "-"]) == 0
    levels = json.loads(capsys.readouterr().out)
    # each repetition's own trees (numbered afresh in each: read together, the two would be one tree of 14 calls)
    assert [(x["level"], x["repetition"]) for x in levels] == [(1, 0), (1, 1)]
    for rows in (x["trees"] for x in levels):
        # one row per trajectory, in the trace's order (closed loop), its subagents' calls counted in it
        assert [(t["tree"], t["calls"], t["subagents"], t["status"]) for t in rows] == \
            [(1, 7, 2, "finished"), (2, 4, 0, "finished"), (3, 2, 1, "finished")], rows
        assert all(t["time_s"] > 0 and t["ttft_ms_p50"] is not None and t["first_call"] == 1 for t in rows)


def test_a_replay_in_lanes_says_the_calls_its_mid_trajectory_starts_left_out(
        emitter: BackgroundEmitter, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Three lanes of a three-tree set, each lane's first tree from a random call: a replay of 13 calls measured
    fewer, and its output said so only as a count to compare with the heading's. The level's line says how many
    trees started mid-trajectory and how many calls before were not measured, as the trees view counts them."""
    db = str(tmp_path / "t.db")
    out = tmp_path / "run.json"
    assert main(["sweep", "--url", emitter.url, "--guard", "off", "--no-metrics", "--db", db, "--seed", "5",
                 "--trace", str(weka(tmp_path, TREES)), "--max-think", "0s", "--concurrency", "3",
                 "--json", str(out)]) == 0
    said = " ".join(capsys.readouterr().out.split())
    stats = json.loads(out.read_text())["levels"][0]["replay"]
    assert main(["show", "last", "--trees", "--db", db, "--json", "-"]) == 0
    rows = json.loads(capsys.readouterr().out)[0]["trees"]
    late = [t["first_call"] - 1 for t in rows if t["first_call"] > 1]
    assert late, rows  # seed 5 starts at least one lane past its trajectory's first call
    assert (stats["mid_trees"], stats["calls_skipped"]) == (len(late), sum(late))
    assert f"{len(late)} tree{'s' * (len(late) > 1)} started mid-trajectory" in said, said
    assert f"{sum(late)} call{'s' * (sum(late) > 1)} before not measured" in said, said


def test_a_subagent_is_no_tree_of_its_own() -> None:
    """A subagent's calls (nested too) belong to its root tree's row: a view that grouped by session alone would
    give the five sessions here five rows."""
    from tokenbench.replay_stats import replay_stats
    from tokenbench.replay_trees import tree_rows

    def rec(session: int, parent: int | None = None, sent_s: float = 1.0) -> RequestRecord:
        return RequestRecord(index=0, session=session, parent=parent, sent_ns=int(sent_s * 1e9),
                             first_token_ns=int((sent_s + 0.1) * 1e9), end_ns=int((sent_s + 1) * 1e9), turn=0)

    calls = [rec(0), rec(1, 0, 2.0), rec(2, 1, 3.0), rec(0, sent_s=5.0), rec(3, sent_s=6.0), rec(4, 3, 7.0)]
    rows = tree_rows(calls, replay_stats(calls, None))
    assert [(t.tree, t.calls, t.subagents) for t in rows] == [(1, 4, 2), (2, 2, 1)]
    assert rows[0].time_s == pytest.approx(5.0) and rows[0].ttft_ms_p50 == pytest.approx(100.0)


def test_a_tree_the_levels_end_cut_is_said_cut(emitter: BackgroundEmitter, tmp_path: Path) -> None:
    from tokenbench.replay_trees import tree_rows

    res, recs = replay(emitter.url, EXAMPLES / "weka-claude-code.json", tmp_path, max_think_s=0.0, concurrency=[1],
                       requests=3)
    (row,) = tree_rows(recs, res.outcomes[0].summary.replay)
    assert (row.status, row.calls) == ("cut", 3)


def test_which_trees_the_levels_end_cut_is_stored_not_guessed() -> None:
    """Two trees running at the level's last send, one of them cut: the stored calls alone cannot say which (a
    level stored without ``cut_trees`` reads both "cut?"); the level's own account of the trees it sent to their
    last call says it, and a tree that failed stays failed."""
    from tokenbench.replay_stats import replay_stats
    from tokenbench.replay_trees import tree_notes, tree_rows

    def rec(session: int, sent_s: float, end_s: float, error: str | None = None) -> RequestRecord:
        return RequestRecord(index=0, session=session, sent_ns=int(sent_s * 1e9), turn=0,
                             first_token_ns=int((sent_s + 0.1) * 1e9), end_ns=int(end_s * 1e9), error_kind=error)

    calls = [rec(0, 1.0, 2.0), rec(1, 1.5, 9.0), rec(2, 3.0, 9.5), rec(3, 2.0, 3.0, "http_500")]
    stats = replay_stats(calls, None, ended={0, 2})
    assert stats.cut_trees == [1] and stats.trees_finished == 2
    rows = tree_rows(calls, stats)
    assert [t.status for t in rows] == ["finished", "cut", "finished", "failed"]
    assert not tree_notes(rows, stats)
    stats.cut_trees = None  # as a level stored before it was kept
    guessed = tree_rows(calls, stats)
    assert [t.status for t in guessed] == ["finished", "cut?", "cut?", "failed"] and tree_notes(guessed, stats)


def test_trees_of_a_run_that_replayed_none_are_refused_in_one_line(emitter: BackgroundEmitter, tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "t.db")
    assert main(["sweep", "--url", emitter.url, "--guard", "off", "--no-metrics", "--quiet", "--db", db,
                 "--concurrency", "1", "--requests", "2", "--label", "plain"]) == 0
    capsys.readouterr()
    assert main(["show", "plain", "--trees", "--db", db]) == 2
    err = capsys.readouterr().err
    assert "replayed no agent trajectories" in err and len(err.strip().splitlines()) == 1, err
