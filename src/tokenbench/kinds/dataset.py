"""Prompts from a user's file (``sweep --dataset``): independent requests as the lengths kind sends them, each the
next item of the file in the run's shuffled order (``dataset.py`` reads the file), its output length the item's own
where it gives one, else ``--output-len``."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from ..dataset import Dataset
from ..draws import Draw
from ..engines.embedded import slot_context
from ..offered_load import Level
from ..workload import WorkloadRecord
from .base import Binding, SweepOptions, request_levels
from .lengths import BoundRequests, RequestPrompts


class BoundDataset(BoundRequests):
    def __init__(self, b: Binding, workload: WorkloadRecord, dataset: Dataset) -> None:
        super().__init__(b, workload, dataset.shuffled(workload.seed))
        self.dataset = dataset

    def prompts(self) -> RequestPrompts:
        """The items in the order of the run's seed, what was read and skipped said first."""
        self.b.note(f"{self.dataset.path}: {self.dataset.summary()}")
        for line in self.dataset.notes:
            self.b.warn(f"{self.dataset.path}: {line}")
        return super().prompts()


@dataclass(frozen=True, slots=True)
class DatasetKind:
    dataset: Dataset
    output: Draw  # for items that give no output length

    name = "dataset"
    splits = True
    outgrows_slots = False

    def refuse(self, opts: SweepOptions) -> None:
        pass

    def levels(self, opts: SweepOptions) -> list[Level]:
        return request_levels(opts)

    def longest_request(self) -> int:
        """A bound from the file's bytes (a byte-level tokenizer's count is never more)."""
        return self.dataset.longest(int(self.output.maximum()))

    def typical_input(self) -> int:
        """The median item's bytes over 4 (about its tokens for a real tokenizer)."""
        return max(1, int(statistics.median(i.size_bytes() for i in self.dataset.items)) // 4)

    def for_search(self) -> DatasetKind:
        return self

    def for_slot(self, limit: int) -> tuple[int, DatasetKind]:
        """The bound from the bytes, capped at what the model holds: a longer item fails on its own, as it would
        on any server."""
        return slot_context(min(self.longest_request(), limit - 64)), self

    def record(self, api: str, seed: int) -> WorkloadRecord:
        return WorkloadRecord(None, round(self.output.expected()), None, api, 0, seed, None,
                        None if self.output.is_fixed else self.output, self.dataset.describe())

    def bind(self, b: Binding) -> BoundDataset:
        return BoundDataset(b, self.record(b.opts.api, b.seed), self.dataset)
