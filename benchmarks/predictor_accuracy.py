"""How well does the predictor do on rows it was not fitted on, and do its bands hold? (A benchmark, not a test.)

Two settings, each printing per metric the median absolute error with its 95% interval, the share of rows within
25%, the share inside the row's band (the band states 80% coverage: BAND_QUANTILE), and n. The interval is a
bootstrap that resamples whole groups of rows (one source's rows of one box), since a source's rows share its
build and its way of measuring: it says whether a median a point from its target misses it or is within the
noise of which boxes and sources were measured.

- leave one source out: every source's rows predicted by a fit on all the other sources;
- a split by time: fit (constants and bands) on the rows dated before 2025, predict the rows dated 2025 on. Rows
  without a date take part in neither side. Every 2025+ build is newer than any row of the fit, so the bands
  widen for it (bands.DRIFT_PRIOR): this is the test of "a newer engine than any row".

Then, for leave-one-source-out, how often the faster of two boxes is predicted faster (pairs whose measured ratio
is at least 1.2). Never in-sample: a row is always predicted by a fit that did not see it. Last, the ten
current-build decode rows (``QUOTED_BOARDS`` and h100-lcpp), each held out and, beside it, as the packaged
calibration predicts it (in-sample).

    python benchmarks/predictor_accuracy.py [FILE.csv ...]     (default: the shipped src/tokenbench/data/published*.csv)

Each setting also prints coverage per kind of row (predict/kind.py: backend, box class, one stream or under load,
dense or MoE), the error measured as the band speaks of it (in percent of the prediction).

Targets: leave-one-source-out decode <= 15%, prefill <= 20%, serving throughput <= 15%,
TTFT <= 30%, the faster box right in >= 97% of pairs with a measured ratio >= 1.2; the split by time decode
<= 15%, prefill <= 20%, TTFT <= 30%; band coverage within 10 points of 80% in both, and in every kind of 10 rows or more.
"""

from __future__ import annotations

import random
import statistics
import sys
from pathlib import Path

from tokenbench.predict.bands import BAND_QUANTILE
from tokenbench.predict.calibration import Calibration
from tokenbench.predict.accuracy import accuracy, faster_box_check
from tokenbench.predict.fitting import cross_validate, fit_calibration
from tokenbench.predict.rows import RowResult, band_metric, predict_row
from tokenbench.predict.measured import Row, read_rows
from tokenbench.predict.specs import Catalog

REF = Path(__file__).resolve().parents[1] / "src" / "tokenbench" / "data"  # the shipped published measurements
DEFAULT = [REF / "published.csv", REF / "published-more.csv", REF / "published-current.csv",
           REF / "published-2024.csv"]
TARGETS = {"loso": {"decode": 15.0, "prefill": 20.0, "throughput": 15.0, "ttft": 30.0},
           "time": {"decode": 15.0, "prefill": 20.0, "ttft": 30.0}}
ORDER = ["decode", "prefill", "throughput", "ttft", "tpot"]
SPLIT_YEAR = "2025"


def inside(r: RowResult) -> bool | None:
    """Is the measured value inside the row's band, as printed around the prediction (None: not predicted)?"""
    if r.deviation_pct is None or r.band is None:
        return None
    return abs(r.deviation_pct) <= r.band.pct


#: Bootstrap draws for a median's interval; the seed keeps the printed interval the same from run to run.
DRAWS = 2000
#: Fewer (source, box) groups than this and a bootstrap over them says nothing: one group gives an interval of
#: zero width, two give a coin toss between them.
MIN_GROUPS = 5


def median_interval(results: list[RowResult], level: float = 0.95) -> str:
    """The ``level`` interval of the median absolute error and the number of groups it rests on, by a bootstrap
    that draws (source, box) groups of rows with replacement: rows of one source on one box are not independent
    draws. "—" with fewer than MIN_GROUPS groups."""
    groups: dict[tuple[str, str], list[float]] = {}
    for r in results:
        if r.error_pct is not None:
            groups.setdefault((r.row.raw.get("source", ""), r.row.hardware), []).append(abs(r.error_pct))
    keys = sorted(groups)
    if len(keys) < MIN_GROUPS:
        return f"— ({len(keys)})"
    rng = random.Random(0)
    meds = sorted(statistics.median([e for _ in keys for e in groups[rng.choice(keys)]]) for _ in range(DRAWS))
    tail = int(DRAWS * (1 - level) / 2)
    return f"{meds[tail]:.1f}-{meds[DRAWS - 1 - tail]:.1f}% ({len(keys)})"


def coverage_table(title: str, results: list[RowResult], targets: dict[str, float]) -> None:
    print(f"\n{title}")
    print("| metric | median abs error | 95% interval (groups) | within 25% | inside its band | n | target |")
    print("|---|---|---|---|---|---|---|")
    acc = accuracy(results)
    per: dict[str, list[bool]] = {}
    for r in results:
        ok = inside(r)
        if ok is not None:
            per.setdefault(band_metric(r.row), []).append(ok)
            per.setdefault("all", []).append(ok)
    for m in ORDER + sorted(set(acc) - set(ORDER)):
        st = acc.get(m, {}).get("all")
        if not st:
            continue
        cov = per.get(m, [])
        target = f"<= {targets[m]:g}%" if m in targets else ""
        ci = median_interval([r for r in results if band_metric(r.row) == m])
        print(f"| {m} | {st['median_abs_error_pct']:.1f}% | {ci} | {st['within_25_pct']:.0%} | "
              f"{sum(cov) / len(cov):.0%} ({sum(cov)}/{len(cov)}) | {st['n']} | {target} |")
    allc = per.get("all", [])
    errs = [abs(r.error_pct) for r in results if r.error_pct is not None]
    print(f"| all | {statistics.median(errs):.1f}% | {median_interval(results)} | "
          f"{sum(e <= 25 for e in errs) / len(errs):.0%} | "
          f"{sum(allc) / len(allc):.0%} ({sum(allc)}/{len(allc)}) | {len(errs)} | "
          f"coverage {BAND_QUANTILE:.0%} ± 10 points |")
    by_backend: dict[str, list[float]] = {}
    for r in results:
        if r.error_pct is not None:
            by_backend.setdefault(f"{band_metric(r.row)} {r.backend}", []).append(abs(r.error_pct))
    print("per metric and backend (median abs error, n): "
          + "; ".join(f"{k} {statistics.median(v):.0f}% ({len(v)})" for k, v in sorted(by_backend.items())))
    kind_table(results)


#: A kind with at least this many held-out rows has its coverage held to BAND_QUANTILE ± KIND_SLACK; fewer say little.
KIND_ROWS = 10
KIND_SLACK = 0.10


def kind_table(results: list[RowResult]) -> bool:
    """Coverage per kind (backend, box class, operating point, model class: predict/kind.py), the share of its
    held-out rows inside the band their prediction printed, against the level that band states: BAND_QUANTILE for a
    kind's own band, at least BAND_QUANTILE for one it borrowed (bands.Band.borrowed: too few rows of its own). True
    when every kind of KIND_ROWS rows or more covers within KIND_SLACK of it (a borrowed band: no more than
    KIND_SLACK under it)."""
    per: dict[str, list[RowResult]] = {}
    for r in results:
        if r.kind is not None and inside(r) is not None:
            per.setdefault(r.kind.key, []).append(r)
    print(f"\ncoverage per kind (kinds of {KIND_ROWS}+ rows are held to {BAND_QUANTILE - KIND_SLACK:.0%}-"
          f"{BAND_QUANTILE + KIND_SLACK:.0%} where the band is the kind's own, to {BAND_QUANTILE - KIND_SLACK:.0%} "
          "or more where it is borrowed):")
    print("| kind | n | stated | inside its band | median abs error | median band | verdict |")
    print("|---|---|---|---|---|---|---|")
    ok = True
    for key, rs in sorted(per.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        hit = sum(bool(inside(r)) for r in rs)
        cov = hit / len(rs)
        errs = [abs(r.deviation_pct or 0.0) for r in rs]
        bands = [r.band.pct for r in rs if r.band is not None]
        borrowed = sum(bool(r.band and r.band.borrowed) for r in rs) > len(rs) / 2
        if len(rs) < KIND_ROWS:
            verdict = "few rows"
        elif cov >= BAND_QUANTILE - KIND_SLACK - 1e-9 and (borrowed or cov <= BAND_QUANTILE + KIND_SLACK + 1e-9):
            verdict = "ok"
        else:
            verdict, ok = "MISS", False
        stated = f">= {BAND_QUANTILE:.0%}" if borrowed else f"{BAND_QUANTILE:.0%}"
        print(f"| {key} | {len(rs)} | {stated} | {cov:.0%} ({hit}/{len(rs)}) | {statistics.median(errs):.0f}% | "
              f"±{statistics.median(bands):.0f}% | {verdict} |")
    print(f"every kind of {KIND_ROWS}+ rows within its stated level: {'yes' if ok else 'NO'}")
    return ok


#: The current-build decode rows checked against their bands: llama.cpp's CUDA scoreboard tg128 of llama-2-7b Q4_0
#: on these four boxes, and every tg128 of h100-lcpp (llama-bench on one H100 SXM, an October 2026 build).
QUOTED_BOARDS = {"nvidia-rtx-pro-6000-blackwell", "nvidia-rtx-5090", "nvidia-h100-sxm", "nvidia-a100-sxm-80gb"}


def quoted(r: Row) -> bool:
    if r.metric != "decode_tps" or r.weights != "Q4_0" or not r.test.startswith("tg"):
        return False
    src = r.raw.get("source")
    return (src == "lcpp-boards" and r.hardware in QUOTED_BOARDS and r.model == "llama-2-7b") or src == "h100-lcpp"


def quoted_rows(cat: Catalog, results: list[RowResult]) -> None:
    """The current-build decode rows, each inside its band or not: held out (from ``results``) and by the packaged fit."""
    packaged = Calibration.packaged()
    held = [r for r in results if quoted(r.row)]
    if not held:
        return
    mine = [predict_row(cat, packaged, r.row) for r in held]
    n_held, n_mine = sum(bool(inside(r)) for r in held), sum(bool(inside(r)) for r in mine)
    print(f"\ncurrent-build decode rows inside their band: held out {n_held}/{len(held)}, "
          f"packaged fit {n_mine}/{len(mine)}")
    for h, m in zip(held, mine):
        print(f"  {h.row.raw.get('source')} {h.row.hardware} d={h.row.depth} measured {h.row.value:g}: "
              + "; ".join(f"{how} {r.predicted:.0f} (measured {r.deviation_pct:+.0f}%, band ±{r.band.pct:.0f}%)"
                          for how, r in (("held out", h), ("packaged", m))
                          if r.predicted is not None and r.deviation_pct is not None and r.band is not None))


def time_split(cat: Catalog, rows: list[Row]) -> list[RowResult]:
    before = [r for r in rows if r.era and r.era < SPLIT_YEAR]
    after = [r for r in rows if r.era >= SPLIT_YEAR]
    cal = fit_calibration(cat, before, "time split")
    return [predict_row(cat, cal, r) for r in after]


def main() -> None:
    paths = [Path(p) for p in sys.argv[1:]] or DEFAULT
    rows = [r for p in paths for r in read_rows(p)]
    cat = Catalog.load()
    sources = sorted({r.raw.get("source", "") for r in rows})
    print(f"predictor accuracy on {', '.join(p.name for p in paths)} ({len(rows)} rows, sources: {', '.join(sources)})")
    results = cross_validate(cat, rows, bands=True)
    coverage_table("leave one source out:", results, TARGETS["loso"])
    before = sum(1 for r in rows if r.era and r.era < SPLIT_YEAR)
    after = sum(1 for r in rows if r.era >= SPLIT_YEAR)
    coverage_table(f"split by time: fit on the {before} rows dated before {SPLIT_YEAR}, predict the {after} rows "
                   f"dated {SPLIT_YEAR} on ({len(rows) - before - after} undated rows in neither):",
                   time_split(cat, rows), TARGETS["time"])
    fb = faster_box_check(results, 1.2)
    share = fb["right"] / fb["pairs"] if fb["pairs"] else float("nan")
    # two decimals: 1122/1157 is 96.97%, which one decimal would print as the 97.0% it misses
    print(f"\nleave one source out, faster box right: {fb['right']}/{fb['pairs']} pairs ({share:.2%}) with a measured "
          "ratio >= 1.2 (target >= 97%)")
    # the same, leaving out rows the held-out prediction flags as a likely software bottleneck (measured under
    # half of what the fold's calibration predicts): shown beside the target figure, never instead of it
    flagged = [r for r in results if r.bottleneck]
    clean = faster_box_check([r for r in results if r not in flagged], 1.2)
    print(f"without the {len(flagged)} rows flagged as likely software bottlenecks: {clean['right']}/{clean['pairs']} "
          f"pairs ({clean['right'] / clean['pairs']:.2%})"
          + "".join(f"\n  flagged: {r.row.raw.get('source')} {r.row.hardware} {r.row.model} {r.row.weights} "
                    f"{r.row.test} d={r.row.depth} {r.row.metric} {r.row.value:g}" for r in flagged))
    quoted_rows(cat, results)
    unpred = sum(1 for r in results if r.predicted is None)
    uncal = sum(1 for r in results if r.predicted is not None and not r.calibrated)
    print(f"rows not predicted: {unpred}; rows predicted from priors only (their backend's only source held "
          f"out): {uncal}")


if __name__ == "__main__":
    main()
