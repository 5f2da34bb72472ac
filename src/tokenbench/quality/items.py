"""One evaluated item: what was sent, what came back, how it scored and how long it took."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal

#: pass/fail: scored by exact match; done: an output kept for comparison only (agreement, knob);
#: timeout: the item did not finish within the limit (recorded, never dropped); error: the server failed it.
Status = Literal["pass", "fail", "done", "timeout", "error"]


def prompt_key(text: str) -> str:
    """A short stable id of a prompt, to pair the same item across runs."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(slots=True)
class Item:
    task: str
    idx: int
    key: str  # pairs this item with the same item of another run (same task, same key)
    prompt: str
    status: Status = "done"
    score: float | None = None  # 1/0 for pass/fail; a task's own metric for harness tasks
    response: str = ""
    reasoning: str = ""
    expected: str | None = None
    latency_ms: float | None = None
    prompt_tokens: int | None = None  # as the server's usage counted them
    expected_prompt_tokens: int | None = None  # as our tokenizer counted what was sent (plus the template)
    output_tokens: int | None = None
    reasoning_tokens: int | None = None
    error: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)

    @property
    def scored(self) -> bool:
        """Whether the item counts in a score: it has one, or it timed out or failed (then it scores 0)."""
        return self.score is not None or (self.status in ("timeout", "error") and self.task != "agreement"
                                          and not self.task.startswith("knob "))

    @property
    def value(self) -> float:
        """The item's score, a timeout or an error scoring 0."""
        return float(self.score) if self.score is not None and self.status not in ("timeout", "error") else 0.0

    def to_row(self) -> dict[str, Any]:
        d = asdict(self)
        d["detail"] = json.dumps(d["detail"])
        return d

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Item:
        d = {f.name: row[f.name] for f in fields(cls) if f.name in row}
        d["detail"] = json.loads(row.get("detail") or "{}")
        return cls(**d)
