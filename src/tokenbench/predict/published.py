"""Rows in the published.csv layout (shared/reference/published.csv): one measured figure per row."""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from ..errors import UsageError

COLUMNS = ["source", "host", "hardware", "engine", "model", "weights", "kv", "test", "depth", "concurrency",
           "input_len", "output_len", "metric", "value", "unit", "note"]
METRICS = {"prefill_tps", "decode_tps", "output_tps", "ttft_median", "ttft_p99", "tpot_median"}


@dataclass(slots=True)
class Row:
    raw: dict[str, str]
    hardware: str
    engine: str
    model: str
    weights: str
    kv: str
    test: str
    depth: int
    concurrency: int
    input_len: int
    output_len: int
    metric: str
    value: float
    unit: str

    @property
    def group(self) -> str:
        """decode / prefill / serve: which calibrated quantity the row tests."""
        if self.metric == "prefill_tps":
            return "prefill"
        if self.metric == "decode_tps" or (self.metric == "tpot_median" and self.concurrency == 1):
            return "decode"
        return "serve"


def read_rows(path: Path) -> list[Row]:
    try:
        lines = [ln for ln in path.read_text().splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    except OSError as e:
        raise UsageError(f"cannot read {path}: {e}") from None
    reader = csv.DictReader(lines)
    missing = [c for c in COLUMNS[:-1] if c not in (reader.fieldnames or [])]
    if missing:
        raise UsageError(f"{path}: missing column(s) {', '.join(missing)}; expected the published.csv layout: {','.join(COLUMNS)}")
    rows = []
    for n, d in enumerate(reader, start=2):
        try:
            rows.append(Row(
                raw=dict(d), hardware=d["hardware"], engine=d["engine"], model=d["model"], weights=d["weights"],
                kv=d["kv"], test=d["test"], depth=int(d["depth"] or 0), concurrency=int(d["concurrency"] or 1),
                input_len=int(d["input_len"] or 0), output_len=int(d["output_len"] or 0), metric=d["metric"],
                value=float(d["value"]), unit=d["unit"],
            ))
        except (TypeError, ValueError) as e:
            raise UsageError(f"{path}: data row {n - 1} is malformed ({e}): fix that row") from None
    return rows
