"""quality compare on stored runs: two runs made with different request settings sent or generated different
things, so they are not compared as two servers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tokenbench.cli import main
from tokenbench.quality.items import Item
from tokenbench.quality.parity import compare_task
from tokenbench.quality.runner import task_summary
from tokenbench.store import Store

WORKLOAD = {"tasks": ["niah"], "api": "completions", "max_tokens": 64, "temperature": 0.0, "request_fields": {}}


def _quality(store: Store, label: str, wrong_every: int = 0, run: str | None = None, **workload: Any) -> None:
    """12 needle cells (every ``wrong_every``-th answered wrong), made with WORKLOAD's settings but ``workload``;
    stored as run ``run`` (default: q-LABEL)."""
    run = run or f"q-{label}"
    items = [Item("niah", i, f"cell{i}", "p", status="fail" if wrong_every and i % wrong_every == 0 else "pass",
                  score=0.0 if wrong_every and i % wrong_every == 0 else 1.0, latency_ms=100.0,
                  detail={"context": 512, "depth": 50}) for i in range(12)]
    store.save_run(run, "quality", label, {"label": label, "model": "m", "seed": 0,
                                                     "workload": {**WORKLOAD, **workload},
                                                     "summary": task_summary(items)}, "measured", [], "0",
                   "2026-01-02T00:00:00", "2026-01-02T00:01:00")
    store.save_quality_items(run, [it.to_row() for it in items])


@pytest.fixture
def db(tmp_path: Path) -> str:
    store = Store(tmp_path / "r.db")
    _quality(store, "completions")
    _quality(store, "chat", wrong_every=2, api="chat")  # the same server: a chat template changed the prompts
    _quality(store, "longer", max_tokens=128, request_fields=None)
    _quality(store, "extra", request_fields={"top_k": 1})
    _quality(store, "same", request_fields=None)  # no --extra-body, as an older run stored it
    return str(tmp_path / "r.db")


def test_runs_made_with_another_api_are_refused_not_named_different(db: str,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """A completions run and a chat run of one server read "chat differs from completions" (p = 0.0022): the
    prompts sent were not the same. The refusal names the setting, both values and the rerun that pairs them."""
    assert main(["quality", "compare", "completions", "chat", "--db", db]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert "differs" not in captured.out and len(err.splitlines()) == 1, err
    assert "--api completions and --api chat" in err and "rerun chat with --api completions" in err


@pytest.mark.parametrize("b, said", [("longer", "--max-tokens 64 and --max-tokens 128"),
                                     ("extra", "no --extra-body and --extra-body '{\"top_k\":1}'")])
def test_every_output_setting_is_checked(db: str, b: str, said: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["quality", "compare", "completions", b, "--db", db]) == 2
    assert said in capsys.readouterr().err


def test_the_same_settings_stored_either_way_are_compared(db: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["quality", "compare", "completions", "same", "--db", db]) == 0
    assert "verdict: same within noise" in capsys.readouterr().out


def test_a_floor_given_by_hand_is_held_to_the_runs_settings(db: str, capsys: pytest.CaptureFixture[str]) -> None:
    """A floor found in the store matches the runs' settings; one given by --floor was taken as it came, so a
    chat run of A's host judged two completions runs' outputs against outputs of other prompts."""
    store = Store(Path(db))
    _quality(store, "completions", run="q-again")  # A's host run again: a floor
    _quality(store, "completions", run="q-again-chat", api="chat")  # A's host again, with another --api
    store.close()
    assert main(["quality", "compare", "q-completions", "same", "--floor", "q-again-chat", "--db", db]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert "verdict" not in captured.out and len(err.splitlines()) == 1, err
    assert err.endswith("--floor q-again-chat and run completions were made with different settings (--api "
                        "completions and --api chat): the prompts sent differ, so it is no floor for them: give "
                        "a repeat made with --api completions"), err
    assert main(["quality", "compare", "q-completions", "same", "--floor", "q-again", "--db", db]) == 0
    assert "(q-completions and q-again: given by --floor)" in capsys.readouterr().out


def test_no_item_in_common_names_what_pairs_the_task() -> None:
    """Agreement prompts are chosen by --seed and shaped by --api (the chat cue): the hint named contexts and
    depths, which agreement has none of."""
    def one(task: str, key: str) -> dict[str, Item]:
        return {key: Item(task, 0, key, "p", status="done", response="x")}

    assert compare_task("agreement", one("agreement", "a"), one("agreement", "b")).notes == [
        "no item in common: were both runs made with the same --seed and --api?"]
    assert "contexts and depths" in compare_task("niah", one("niah", "512@10%"), one("niah", "512@50%")).notes[0]
