"""Reports of runs: Markdown in the shape of a BENCHMARKS.md, one self-contained HTML file with plots, PNGs.

Every exporter reads the same ``Series`` (``series.py``), so the plots show exactly the stored numbers;
predicted runs are drawn dashed and named PREDICTED. Names from results are untrusted: the HTML escapes them
and the plots render text as paths.
"""
