"""Knob check: does a request parameter (``reasoning_effort``, ``chat_template_kwargs.enable_thinking``,
``temperature``) change what the server answers, more than running the same setting twice does?

The same prompts run under each value, and the first value runs twice. Per prompt, "changed" means the output
differs from the first value's first run. The repeat's changes are the noise floor; each other value's
changes are tested against it, pair by pair, with McNemar's exact test. No value beyond the noise: "the knob
has no measurable effect", a finding (one server was seen to ignore ``reasoning_effort`` silently).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from statistics import fmean
from typing import Any

from .. import redact
from ..errors import UsageError
from .items import Item
from .stats import ALPHA, mcnemar_exact


def parse_param(text: str) -> tuple[str, list[Any]]:
    """``name=v1,v2,...`` (``a.b=...`` nests: ``{"a": {"b": v}}``); values are JSON where they parse as JSON
    (true, 0.7, null), else strings."""
    name, sep, values = text.partition("=")
    name = name.strip()
    parts = [v.strip() for v in values.split(",")] if sep else []
    if not sep or not name or any(not p for p in name.split(".")) or len(parts) < 2 or any(not v for v in parts):
        raise UsageError(f"--param '{text}' is not NAME=VALUE1,VALUE2[,...]: e.g. reasoning_effort=low,high or "
                         "chat_template_kwargs.enable_thinking=true,false")
    if redact.is_secret_name(name.split(".")[-1]):
        raise UsageError(f"--param {name}: a secret is no knob to compare (it would be stored)")
    out: list[Any] = []
    for v in parts:
        try:
            out.append(json.loads(v))
        except ValueError:
            out.append(v)
    if len({json.dumps(v) for v in out}) < len(out):
        raise UsageError(f"--param '{text}' repeats a value")
    return name, out


def nest(name: str, value: Any) -> dict[str, Any]:
    d: Any = value
    for part in reversed(name.split(".")):
        d = {part: d}
    return dict(d)


def knob_task(name: str, value: Any, repeat: bool = False) -> str:
    return f"knob {name}={json.dumps(value)}" + (" (repeat)" if repeat else "")


@dataclass(slots=True)
class ValueEffect:
    value: Any
    n: int
    changed: int  # outputs that differ from the first value's first run
    noise_changed: int  # ... and, on the same prompts, the repeat's
    p_value: float | None  # None for the baseline itself
    failed: int
    output_tokens_mean: float | None
    reasoning_tokens_mean: float | None
    effect: bool

    def to_dict(self) -> dict[str, Any]:
        return {"value": self.value, "n": self.n, "changed": self.changed, "noise_changed": self.noise_changed,
                "p_value": self.p_value, "failed": self.failed, "output_tokens_mean": self.output_tokens_mean,
                "reasoning_tokens_mean": self.reasoning_tokens_mean, "effect": self.effect}


def _text(it: Item) -> str:
    return it.reasoning + "\x00" + it.response


def _mean(values: list[int | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return fmean(vals) if vals else None


def _effect(value: Any, run: dict[int, Item], base: dict[int, Item], repeat: dict[int, Item],
            tested: bool) -> ValueEffect:
    """One value's outputs against the first value's: how many changed, against how many the first value's own
    repeat changed (the noise floor), and, where ``tested``, McNemar's exact p on the items only one of them
    changed."""
    ok = [k for k in base if k in run and k in repeat and all(x[k].status == "done" for x in (base, run, repeat))]
    changed = {k for k in ok if _text(run[k]) != _text(base[k])}
    noise = {k for k in ok if _text(repeat[k]) != _text(base[k])}
    p = mcnemar_exact(len(changed - noise), len(noise - changed)) if tested else None
    return ValueEffect(value, len(ok), len(changed), len(noise), p,
                       sum(1 for it in run.values() if it.status != "done"),
                       _mean([it.output_tokens for it in run.values()]),
                       _mean([it.reasoning_tokens for it in run.values()]),
                       p is not None and p < ALPHA)


def effects(name: str, values: list[Any], items: list[Item]) -> list[ValueEffect]:
    """Each value's effect against the repeat of the first value (the noise floor): the first value, its repeat,
    then every other value."""
    by_task: dict[str, dict[int, Item]] = {}
    for it in items:
        by_task.setdefault(it.task, {})[it.idx] = it
    base = by_task.get(knob_task(name, values[0]), {})
    repeat = by_task.get(knob_task(name, values[0], True), {})
    out = [_effect(values[0], base, base, repeat, False), _effect(values[0], repeat, base, repeat, False)]
    out += [_effect(v, by_task.get(knob_task(name, v), {}), base, repeat, True) for v in values[1:]]
    return out


def finding(name: str, fx: list[ValueEffect]) -> str:
    """One sentence: the knob's effect, or that it has none."""
    base, rep, others = fx[0], fx[1], fx[2:]
    failed = [e for e in others if e.failed]
    if base.n == 0 or any(e.n == 0 for e in others):
        bad = [e for e in fx if e.n == 0 and e.failed] or fx
        return (f"the knob could not be measured: the server failed the requests with {name} = "
                f"{json.dumps(bad[0].value)} ({bad[0].failed} failed; the items hold its error)")
    if any(e.effect for e in others):
        shown = ", ".join(f"{json.dumps(e.value)} changed {e.changed}/{e.n} outputs (p = {e.p_value:.2g})"
                          for e in others if e.effect)
        return (f"{name} has an effect: {shown}; repeating {json.dumps(base.value)} changed "
                f"{rep.changed}/{rep.n}")
    said = (f"{name} = " + ", ".join(json.dumps(e.value) for e in others)
            + f" changed {max((e.changed for e in others), default=0)}/{base.n} outputs at most against "
            + json.dumps(base.value) + f", and repeating {json.dumps(base.value)} changed {rep.changed}/{rep.n}")
    if mcnemar_exact(base.n, 0) >= ALPHA:  # every output changed would still not be an effect: no power
        least = next(n for n in range(1, 64) if mcnemar_exact(n, 0) < ALPHA)
        return (f"too few outputs to tell whether the knob has an effect: {said}; {base.n} cannot show one at "
                f"p < {ALPHA:g} even if every one changed: give --items {least} or more")
    text = f"the knob has no measurable effect: {said}"
    if failed:
        text += f" ({sum(e.failed for e in failed)} requests failed: see the items)"
    return text
