"""Run quality tasks against an endpoint and store every item: the built-in ones (niah, agreement, knob) through
the streaming client, the standard ones through lm-evaluation-harness (``harness``).

One run of kind ``quality`` per command; its items in ``quality_items``, each stored as it finishes, so a run
that is killed keeps what it did and reads as interrupted.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from .. import redact
from ..client import Api, PreparedRequest
from ..endpoint import Endpoint, RunLog
from ..errors import EndpointError, RunInterrupted, TokenbenchError, UsageError
from ..records import RequestRecord
from ..results import Manifest, RunResult, new_run_id
from ..store import Store
from . import agreement, haystack
from .knob import knob_task, nest
from .items import Item, Status, prompt_key

BUILTIN = ("niah", "agreement")
#: Tokens a prompt's server count may differ from ours before it is flagged (BPE merges across the template).
USAGE_TOLERANCE = 2
Note = Callable[[str], None]


@dataclass(slots=True)
class QualityConfig:
    url: str
    tasks: list[str]
    model: str | None = None
    api: Api = "chat"
    api_key: str | None = None
    tokenizer: str | None = None
    label: str | None = None
    contexts: list[int] = field(default_factory=lambda: [4096, 16384, 32768])
    depths: list[int] = field(default_factory=lambda: list(haystack.DEFAULT_DEPTHS))
    items: int = agreement.DEFAULT_ITEMS
    max_tokens: int = 64
    timeout_s: float = 300.0
    seed: int = 0  # fixed by default: two hosts must get the same items to be compared
    temperature: float = 0.0
    extra_body: dict[str, Any] = field(default_factory=dict)
    limit: int | None = None  # harness tasks: items per task
    command: str = ""
    embedded: dict[str, Any] | None = None


def outcome(rec: RequestRecord) -> Status | None:
    """timeout or error for a failed request; None when it succeeded (the task scores it)."""
    if rec.ok:
        return None
    return "timeout" if rec.error_kind in ("timeout", "stall") else "error"


class Session:
    """One endpoint, discovered and checked, with the tokenizer and the client every task sends through."""

    def __init__(self, cfg: QualityConfig, ep: Endpoint) -> None:
        self.cfg, self.ep, self.info, self.model, self.tokenizer = cfg, ep, ep.info, ep.model, ep.tokenizer
        self.client = ep.client(cfg.api, temperature=cfg.temperature, timeout_s=cfg.timeout_s,
                                # a long prompt sends nothing until its prefill ends: the cell's limit is its time
                                stall_timeout_s=cfg.timeout_s,
                                # one request at a time: nothing to gain from the lean path, whose connections
                                # would outlive the aiohttp session this client's owner closes
                                lean=False)
        self.template_tokens = 0  # tokens the server adds around a prompt (a chat template, a BOS)

    @classmethod
    async def open(cls, cfg: QualityConfig, http: aiohttp.ClientSession, note: Note) -> Session:
        s = cls(cfg, await Endpoint.open(http, cfg.url, cfg.api_key, cfg.model, cfg.tokenizer, note))
        await s.check()
        return s

    async def check(self) -> None:
        """One short request: the server takes this kind of request (a refusal is one line, before any task),
        and how many tokens it adds around a prompt, so that every prompt's count can be checked against usage."""
        text = "Say OK."
        rec = RequestRecord(index=-1, phase="warmup")
        await self.client.send(PreparedRequest(text, 2, None, dict(self.cfg.extra_body)), rec)
        if not rec.ok:
            if rec.http_status is not None and 400 <= rec.http_status < 500:
                raise EndpointError(f"the server refused a {self.cfg.api} request (HTTP {rec.http_status}: "
                                    f"{rec.error}); check --model and --api")
            if rec.error_kind in ("timeout", "stall"):  # the user's limit may be what failed it: say which
                raise EndpointError(f"the first request, 2 tokens, did not finish within --timeout "
                                    f"{self.cfg.timeout_s:g} s ({rec.error_kind}); give a longer --timeout, or "
                                    "check the server")
            raise EndpointError(f"the first request failed ({rec.error_kind}: {rec.error}); check the server")
        if rec.input_tokens is not None and rec.input_tokens_source == "usage":
            self.template_tokens = rec.input_tokens - len(await self.tokenizer.encode(text))

    async def send(self, prompt: str, idx: int, expected_tokens: int | None = None,
                   extra: dict[str, Any] | None = None, max_tokens: int | None = None) -> RequestRecord:
        rec = RequestRecord(index=idx)
        expected = None if expected_tokens is None else expected_tokens + self.template_tokens
        body = dict(self.cfg.extra_body)
        body.update(extra or {})
        await self.client.send(PreparedRequest(prompt, max_tokens or self.cfg.max_tokens, expected, body), rec)
        return rec

    def item(self, task: str, idx: int, key: str, prompt: str, rec: RequestRecord) -> Item:
        """An item from a finished request: its response, tokens, latency; timeout/error when it failed."""
        it = Item(task=task, idx=idx, key=key, prompt=prompt, status=outcome(rec) or "done",
                  response=rec.answer_text, reasoning=rec.reasoning_text,
                  latency_ms=None if rec.e2e_ns is None else round(rec.e2e_ns / 1e6, 3),
                  prompt_tokens=rec.input_tokens if rec.input_tokens_source == "usage" else None,
                  expected_prompt_tokens=rec.expected_input_tokens, output_tokens=rec.output_tokens,
                  reasoning_tokens=rec.reasoning_tokens, error=None if rec.ok else f"{rec.error_kind}: {rec.error}")
        if rec.first_token_ns is not None:
            it.detail["ttft_ms"] = round((rec.first_token_ns - rec.sent_ns) / 1e6, 3)
        if rec.first_answer_ns is not None:
            it.detail["first_answer_ms"] = round((rec.first_answer_ns - rec.sent_ns) / 1e6, 3)
        it.detail["finish_reason"] = rec.finish_reason
        it.detail["usage_check"] = usage_check(it.prompt_tokens, it.expected_prompt_tokens)
        return it


def usage_check(server: int | None, ours: int | None) -> str:
    """ok, truncated (the server saw fewer tokens than were sent), mismatch, or absent (no usage)."""
    if server is None or ours is None:
        return "absent"
    if server < ours - USAGE_TOLERANCE:
        return "truncated"
    return "ok" if abs(server - ours) <= USAGE_TOLERANCE else "mismatch"


# --- the built-in tasks -------------------------------------------------------------------------------------

def cell_note(it: Item) -> str:
    """A needle cell's progress line, both counts written alike: "1,028 prompt tokens sent, the server counted
    1,028" (the server's count read "1028")."""
    counted = "?" if it.prompt_tokens is None else f"{it.prompt_tokens:,}"
    check = it.detail.get("usage_check")
    return (f"niah {it.key}: {it.status} in {(it.latency_ms or 0) / 1000:.2f} s, {it.expected_prompt_tokens or 0:,} "
            f"prompt tokens sent, the server counted {counted}" + ("" if check in ("ok", "absent") else f" ({check})"))


async def run_niah(s: Session, save: Callable[[Item], None], note: Note) -> list[Item]:
    cfg, chat = s.cfg, s.cfg.api == "chat"
    around = max(s.template_tokens, 0)
    least = await haystack.least_context(s.tokenizer, chat, around, cfg.max_tokens)
    if min(cfg.contexts) < least:  # no filler would fit: every such cell was the same prompt, labelled apart
        raise UsageError(f"--contexts {min(cfg.contexts):,}: a needle cell needs {least:,} tokens before any "
                         f"filler (its question and needle, the server's template, a {cfg.max_tokens}-token "
                         f"answer): give contexts of {least:,} or more")
    counts: dict[str, int] = {}
    out = []
    idx = 0
    for ctx in cfg.contexts:
        for depth in cfg.depths:
            cell = await haystack.build_cell(s.tokenizer, ctx, depth, cfg.seed, chat, counts, around, cfg.max_tokens)
            rec = await s.send(cell.prompt, idx, cell.prompt_tokens)
            it = s.item("niah", idx, cell.key, cell.prompt, rec)
            it.expected = cell.needle
            if it.status == "done":
                passed = haystack.score(rec.answer_text, cell.needle)
                it.status, it.score = ("pass" if passed else "fail"), float(passed)
                it.detail["tokens"] = await s.tokenizer.encode(rec.answer_text) if rec.answer_text else []
            it.detail.update(context=ctx, depth=depth, actual_depth=round(cell.actual_depth, 2))
            save(it)
            out.append(it)
            note(cell_note(it))
            idx += 1
    return out


async def run_prompts(s: Session, task: str, texts: list[str], save: Callable[[Item], None],
                      extra: dict[str, Any] | None = None) -> list[Item]:
    """Greedy (or as configured) outputs of ``texts``, with their token ids, for agreement and knob checks."""
    out = []
    for i, text in enumerate(texts):
        rec = await s.send(text, i, len(await s.tokenizer.encode(text)), extra)
        it = s.item(task, i, prompt_key(text), text, rec)
        if it.status == "done":
            it.detail["tokens"] = await s.tokenizer.encode(rec.answer_text) if rec.answer_text else []
        if extra:
            it.detail["request_fields"] = redact.body(extra)
        save(it)
        out.append(it)
    return out


# --- a run --------------------------------------------------------------------------------------------------

def _manifest(cfg: QualityConfig, s: Session, kind_extra: dict[str, Any]) -> Manifest:
    return s.ep.manifest(
        cfg.embedded, cfg.label, cfg.command, template_tokens=s.template_tokens, seed=cfg.seed,
        workload={"tasks": cfg.tasks, "api": cfg.api, "contexts": cfg.contexts, "depths": cfg.depths,
                  "items": cfg.items, "max_tokens": cfg.max_tokens, "temperature": cfg.temperature,
                  "timeout_s": cfg.timeout_s, "limit": cfg.limit, "request_fields": redact.body(cfg.extra_body),
                  **kind_extra})


def task_summary(items: list[Item]) -> dict[str, dict[str, Any]]:
    """Per task: items, passes, timeouts, errors, score (timeouts and errors count as not passed)."""
    out: dict[str, dict[str, Any]] = {}
    for it in items:
        t = out.setdefault(it.task, {"items": 0, "pass": 0, "fail": 0, "timeout": 0, "error": 0, "done": 0,
                                     "score_sum": 0.0, "scored": 0, "latency_ms": []})
        t["items"] += 1
        t[it.status] += 1
        if it.scored:
            t["scored"] += 1
            t["score_sum"] += it.value
        if it.latency_ms is not None:
            t["latency_ms"].append(it.latency_ms)
    for t in out.values():
        t["score"] = t.pop("score_sum") / t["scored"] if t["scored"] else None
        lat = sorted(t.pop("latency_ms"))
        t["latency_ms_median"] = lat[len(lat) // 2] if lat else None
    return out


class Recorder:
    """Creates the run, stores each item as it finishes, closes the run in every case."""

    def __init__(self, store: Store, label: str | None) -> None:
        self.store = store
        self.log = RunLog(store, new_run_id(), "quality", label)
        self.items: list[Item] = []

    @property
    def run_id(self) -> str:
        return self.log.run_id

    @property
    def manifest(self) -> Manifest:
        return self.log.manifest

    def open(self, manifest: Manifest) -> None:
        self.log.create(manifest)

    def save(self, it: Item) -> None:
        self.items.append(it)
        self.store.save_quality_items(self.run_id, [it.to_row()])

    def fail(self, e: BaseException) -> RunInterrupted | None:
        """Close the run an exception ends, if it was opened, and tie the run to the exception for the CLI: an
        interrupt reads 'interrupted' (and is answered with the RunInterrupted to raise in its place), anything
        else 'partial' (some items stored) or 'failed' (``endpoint.RunLog.abort``)."""
        self.manifest.summary = task_summary(self.items)
        return self.log.abort(e, bool(self.items))

    def close(self, status: str, error: str | None = None) -> RunResult:
        """The run's final state; the result every command returns, of kind quality: its items, no levels. Items
        the server failed (an error, not a wrong answer) make a run that finished its tasks partial, and failed
        where it failed them all: every item of a 64K needle refused by an 8K server read "complete"."""
        self.manifest.summary = task_summary(self.items)
        failed = [it for it in self.items if it.status == "error"]
        if status == "complete" and failed:
            status = "failed" if len(failed) == len(self.items) else "partial"
            error = f"the server failed {len(failed)} of {len(self.items)} items ({failed[0].error})"
        return self.log.close(status, error, [], list(self.items))


def check_tasks(tasks: list[str]) -> list[str]:
    """The tasks lm-eval runs (not built in), refused where lm-eval is missing or knows none of that name: before
    anything runs, an embedded engine's start too."""
    from . import harness

    harness_tasks = [t for t in tasks if t not in BUILTIN]
    if harness_tasks:
        harness.check_tasks(harness_tasks)
    return harness_tasks


def run_quality(cfg: QualityConfig, store: Store, note: Note = lambda t: None) -> RunResult:
    """Run ``cfg.tasks`` (built-in and harness tasks) against ``cfg.url`` and store them as one run."""
    from . import harness

    harness_tasks = check_tasks(cfg.tasks)
    rec = Recorder(store, cfg.label)

    async def builtin() -> str:
        """The built-in tasks; the model the endpoint serves (the harness tasks then name it)."""
        async with aiohttp.ClientSession() as http:
            s = await Session.open(cfg, http, note)
            rec.open(_manifest(cfg, s, {}))
            for task in cfg.tasks:
                if task == "niah":
                    await run_niah(s, rec.save, note)
                elif task == "agreement":
                    done = await run_prompts(s, "agreement", agreement.prompts(cfg.items, cfg.seed, cfg.api == "chat"),
                                             rec.save)
                    note(f"agreement: {len(done)} greedy outputs stored; compare two runs with "
                         "'tokenbench quality compare A B'")
            rec.manifest.model = s.model
            return s.model

    try:
        model = asyncio.run(builtin())
        errors = []
        for task in harness_tasks:
            try:
                for it in harness.evaluate(task, cfg, model, note):
                    rec.save(it)
            except TokenbenchError as e:  # this quality task could not run (its data is not here): the others still do
                errors.append(str(e))
                note(f"{task}: {e}")
    except BaseException as e:
        if (stop := rec.fail(e)) is not None:
            raise stop from None
        raise
    if errors:
        return rec.close("partial" if rec.items else "failed", "; ".join(errors))
    return rec.close("complete")


# --- the knob check -----------------------------------------------------------------------------------------

def run_knob(cfg: QualityConfig, name: str, values: list[Any], store: Store,
             note: Note = lambda t: None) -> RunResult:
    """The same prompts under each value of one request parameter, and the first value twice: the repeat is
    the noise floor (what differs between two runs of the same setting)."""
    rec = Recorder(store, cfg.label)
    texts = agreement.prompts(cfg.items, cfg.seed, cfg.api == "chat")

    async def go() -> None:
        async with aiohttp.ClientSession() as http:
            s = await Session.open(cfg, http, note)
            rec.open(_manifest(cfg, s, {"knob": {"param": name, "values": values}}))
            plan = [(values[0], False), (values[0], True), *[(v, False) for v in values[1:]]]
            for value, repeat in plan:
                task = knob_task(name, value, repeat)
                done = await run_prompts(s, task, texts, rec.save, nest(name, value))
                bad = [it for it in done if it.status != "done"]
                note(f"{task}: {len(done) - len(bad)}/{len(done)} outputs"
                     + (f"; {len(bad)} failed ({bad[0].error})" if bad else ""))

    try:
        asyncio.run(go())
    except BaseException as e:
        if (stop := rec.fail(e)) is not None:
            raise stop from None
        raise
    return rec.close("complete")
