"""Results of the tools people already use, into the store as runs with provenance "imported".

One module per format, each with ``detect(path, text) -> bool`` and ``parse(path, text, label) -> list[Imported]``;
what they share (the run a format yields, its fields read checked) is ``fields.py``, and a level made from a tool's
per-request records by tokenbench's definitions is ``perrequest.py``. A malformed file raises an error naming the
file, the line where it has lines, and the field; nothing of it is stored (one transaction).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .. import __version__
from ..errors import UsageError
from ..findings import guard_finding
from ..guard_results import GuardSnapshot
from ..depth_findings import decode_past_prefill, unstable_depth_rate
from ..levels import DepthLevel, ServingLevel
from ..results import new_run_id, now_iso
from ..store import Store
from .fields import FieldError, Imported, number


FORMATS: list[tuple[str, Callable[[Path, str], bool], Callable[[Path, str, str | None], list[Imported]]]] = []


def _register() -> None:
    from . import (aiperf, guidellm, inference_perf, inferencex, llamabench, llamabenchy, markdown, published_csv,
                   vllm)

    FORMATS.extend([
        ("published.csv", published_csv.detect, published_csv.parse),
        ("llama-bench", llamabench.detect, llamabench.parse),
        ("llama-benchy", llamabenchy.detect, llamabenchy.parse),
        ("aiperf", aiperf.detect, aiperf.parse),
        ("inferencex", inferencex.detect, inferencex.parse),
        ("vllm bench serve", vllm.detect, vllm.parse),
        ("inference-perf", inference_perf.detect, inference_perf.parse),
        ("guidellm", guidellm.detect, guidellm.parse),
        ("markdown table", markdown.detect, markdown.parse),
    ])


def read_text(path: Path) -> tuple[str, str]:
    """The file as text, and its SHA-256 (to recognise a file imported before)."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise UsageError(f"cannot read {path}: {e.strerror or e}") from None
    try:
        return data.decode("utf-8-sig"), hashlib.sha256(data).hexdigest()
    except UnicodeDecodeError:
        raise UsageError(f"{path}: not UTF-8 text (a binary or UTF-16 file?); nothing was imported") from None


def _parse(name: str, parse: Callable[[Path, str, str | None], list[Imported]], path: Path, text: str,
           label: str | None) -> list[Imported]:
    try:
        runs = parse(path, text, label)
    except UsageError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError, IndexError, RecursionError, OverflowError) as e:
        # a shape no field check foresaw: still one line, still nothing stored
        raise UsageError(f"{path}: a malformed {name} file ({type(e).__name__}: {str(e)[:120]}); "
                         "nothing was imported") from None
    if not runs:
        raise UsageError(f"{path}: a {name} file with no results in it; nothing was imported")
    for r in runs:
        for lv in r.levels:
            for field_name in ("output_throughput_tps", "pp_tps", "tg_tps", "duration_s", "input_tokens_mean",
                               "output_tokens_mean", "request_throughput_rps"):
                v = getattr(lv, field_name, None)
                if v is not None:
                    number(v, path, f"{lv.test or 'level'} {field_name}")
            if isinstance(lv, ServingLevel):
                _possible(lv, path)
            if isinstance(lv, DepthLevel):  # a spread over half the mean is no measurement, whoever measured it
                for kind, mean, sd in (("pp", lv.pp_tps, lv.pp_tps_sd), ("tg", lv.tg_tps, lv.tg_tps_sd)):
                    if (found := unstable_depth_rate(kind, mean, sd, [])) is not None:
                        lv.add(found, replace=True)
        for lv, found in decode_past_prefill([lv for lv in r.levels if isinstance(lv, DepthLevel)]):
            lv.add(found, replace=True)
    return runs


#: how far a higher percentile may read below a lower one in another tool's file (its interpolation's rounding)
PERCENTILE_SLACK = 0.05


def _possible(lv: ServingLevel, path: Path) -> None:
    """A serving level no measurement can give is refused, whoever wrote it: a distribution whose percentiles fall
    as they rise (a p99 below the median). Tools interpolate their percentiles in their own ways (GuideLLM's TPOT
    p99 read 1.2% under its p95), so a fall within PERCENTILE_SLACK is the tool's, not the file's."""
    where = lv.test or "level"
    for name in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
        d = getattr(lv, name)
        given = [(k, v) for k in ("p50", "p90", "p95", "p99") if (v := getattr(d, k)) is not None]
        for (k1, v1), (k2, v2) in zip(given, given[1:]):
            if v2 < v1 * (1 - PERCENTILE_SLACK):
                raise FieldError(path, f"{where} {name[:-3]}", f"its {k2} ({v2:,.4g} ms) is below its {k1} "
                                 f"({v1:,.4g} ms)")


def _broken_json(text: str) -> str | None:
    """Why a file that opens as JSON (or JSON lines) does not parse as either, or None: a truncated file was
    called "not a format tokenbench imports"."""
    if text.lstrip()[:1] not in ("{", "["):
        return None
    try:
        json.loads(text)
        return None
    except ValueError as whole:
        first = text.lstrip().splitlines()[0]
        try:
            json.loads(first)
            return None  # JSON lines
        except ValueError:
            return str(whole)[:120]


def parse_file(path: Path, label: str | None = None) -> tuple[str, list[Imported]]:
    if not FORMATS:
        _register()
    text, digest = read_text(path)
    if not text.strip():
        raise UsageError(f"{path}: the file is empty; nothing was imported")
    for name, detect, parse in FORMATS:
        if detect(path, text):
            runs = _parse(name, parse, path, text, label)
            for r in runs:
                r.manifest.source_sha256 = digest
            return name, runs
    if (why := _broken_json(text)) is not None:
        raise UsageError(f"{path}: not valid JSON ({why}); nothing was imported")
    raise UsageError(
        f"{path}: not a format tokenbench imports (vllm bench serve JSON, llama-bench JSON/CSV/JSONL or Markdown, "
        "llama-benchy JSON/CSV/Markdown, AIPerf's profile_export_aiperf.json or profile_export.jsonl, "
        "inference-perf's per_request_lifecycle_metrics.json, InferenceX rows, GuideLLM JSON, published.csv)"
    )


def import_file(store: Store, path: Path, label: str | None = None) -> tuple[str, list[str]]:
    """Parse, then store every run of the file in one transaction. Returns (format, run ids)."""
    ((fmt, ids, _),) = import_files(store, [path], label)
    return fmt, ids


def import_files(store: Store, paths: list[Path], label: str | None = None) -> list[tuple[str, list[str], bool]]:
    """All files or none: each is parsed first, then every new one is stored in one transaction. A file imported
    before (same bytes) is recognised and not stored twice. Returns (format, run ids, new) per file."""
    parsed = [(path, *parse_file(path, label)) for path in paths]
    out: list[tuple[str, list[str], bool]] = []
    with store.tx():
        for path, fmt, runs in parsed:
            digest = runs[0].manifest.source_sha256
            assert digest is not None  # parse_file sets it on every run it returns
            before = store.runs_from_source(digest)
            if before:
                out.append((fmt, before, False))
                continue
            out.append((fmt, _store_in_tx(store, fmt, runs, str(path), {}), True))
    return out


def import_records(store: Store, fmt: str, text: str, source: Path, label: str | None,
                   extra: dict[str, Any], guard: GuardSnapshot | None = None) -> list[str]:
    """Import a tool's output held in memory (``fmt`` names the format), with ``extra`` added to each manifest;
    ``guard``: the guard's snapshot before the tool ran, kept with each level (a dirty one flagged, as a sweep's)."""
    if not FORMATS:
        _register()
    parse = next(p for name, _, p in FORMATS if name == fmt)
    runs = _parse(fmt, parse, source, text, label)
    with store.tx():
        ids: list[str] = []
        for r in runs:
            rid = _new_id(store, ids)  # none of the batch's own: ids drawn in one second can collide
            ids.append(rid)
            dirty = guard_finding(guard, rid)  # naming the command that prints the snapshot, as a sweep's does
            for lv in r.levels:
                lv.guard = guard
                if dirty is not None:
                    lv.add(dirty)
        return _store_in_tx(store, fmt, runs, str(source), extra, ids)


def _new_id(store: Store, taken: list[str]) -> str:
    rid = new_run_id()
    while rid in taken or store.db.execute("SELECT 1 FROM runs WHERE id = ?", (rid,)).fetchone():
        rid = new_run_id()  # ids are a second and 2 random bytes: many runs in one second can collide
    return rid


def _store_in_tx(store: Store, fmt: str, runs: list[Imported], source: str, extra: dict[str, Any],
                 given: list[str] | None = None) -> list[str]:
    """Each run stored, under ``given`` ids where the caller chose them, else new ones."""
    now = now_iso()
    ids: list[str] = []
    for i, r in enumerate(runs):
        rid = given[i] if given is not None else _new_id(store, ids)
        m = r.manifest
        m.provenance, m.imported_from, m.format, m.label = "imported", source, fmt, r.label
        m.update(extra)
        store.save_run_in_tx(rid, r.kind, r.label, m.to_dict(), "imported", r.levels, __version__, now, now)
        for idx, records in enumerate(r.requests):
            store.save_requests_in_tx(rid, idx, records)
        ids.append(rid)
    return ids
