"""How well does the predictor match published measurements? (A benchmark, not a test.)

Predicts every row of shared/reference/published.csv with the committed calibration and prints the median
absolute percentage error per metric, on the rows calibration fitted ("train") and on the rows it never saw
("holdout": the held-out models, hybrid-offload rows, and every serving-under-load row), and the share of host
pairs whose faster side is predicted right.

    python benchmarks/predictor_accuracy.py [PATH/TO/published.csv]

Targets on held-out data (issue 3): decode <= 15%, prefill <= 25%, serving throughput <= 20%, and the faster
box right for every pair whose measured ratio is >= 1.5 and not flagged.
"""

from __future__ import annotations

import sys
from pathlib import Path

from tokenbench.predict.calibration import Calibration
from tokenbench.predict.predictor import against
from tokenbench.predict.published import read_rows
from tokenbench.predict.specs import Catalog

DEFAULT = Path(__file__).resolve().parents[2] / "shared" / "reference" / "published.csv"
TARGETS = {"decode": 15.0, "prefill": 25.0, "serve_throughput": 20.0}


def main() -> None:
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT
    cal = Calibration.packaged()
    rep = against(Catalog.load(), cal, read_rows(path))
    print(f"predictor accuracy on {path.name}; held-out models: {', '.join(sorted(cal.holdout_models))}")
    print("| metric | train median abs error | n | holdout median abs error | n | target |")
    print("|---|---|---|---|---|---|")
    for g in ("decode", "prefill", "serve_throughput", "serve"):
        tr, ho = rep.summary["train"][g], rep.summary["holdout"][g]

        def fmt(d: dict) -> str:  # type: ignore[type-arg]
            return f"{d['median_abs_error_pct']:.1f}%" if d["n"] else "—"

        target = f"<= {TARGETS[g]:g}%" if g in TARGETS else "—"
        print(f"| {g} | {fmt(tr)} | {tr['n']} | {fmt(ho)} | {ho['n']} | {target} |")
    fb = rep.summary["faster_box"]
    print(f"\nfaster box right: {fb['right']}/{fb['pairs']} pairs (measured ratio >= 1.5, not flagged)"
          + (f"; wrong: {', '.join(fb['wrong'])}" if fb["wrong"] else ""))
    print(f"rows flagged as a likely software bottleneck: {rep.summary['flagged']}; "
          f"rows not predicted: {rep.summary['unpredicted']}")
    print("\n'serve' covers TTFT, TPOT and throughput under load; of the vLLM rows only concurrency 1's decode, "
          "prefill and TTFT are fitted.")


if __name__ == "__main__":
    main()
