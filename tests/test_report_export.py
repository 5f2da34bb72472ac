"""The report's exporters (report/export.py) behind one interface, each against a snapshot of what it wrote for
the same three stored runs (a sequential mini PC, a batching GPU, a prediction of the GPU): Markdown, HTML and
JSON byte for byte, PNGs by name and size. A change to what a report shows fails here until the snapshot is
rewritten on purpose: ``TOKENBENCH_UPDATE_SNAPSHOTS=1 pytest tests/test_report_export.py``, then read the diff.

What may differ between machines is written in one place: the tool's version and the embedded plotly.js bundle
are replaced by placeholders, and the report's time is given."""

from __future__ import annotations

import datetime
import json
import os
import re
from pathlib import Path

import pytest

from tokenbench import __version__
from tokenbench.cli import main
from tokenbench.report.document import Report, ReportConfig, report
from tokenbench.report.export import EXPORTERS, plot_dict
from tokenbench.reader import load_result
from tokenbench.store import Store

from test_report import _png_size, _store

SNAPSHOTS = Path(__file__).resolve().parent / "snapshots"
WHEN = datetime.datetime(2026, 11, 27, 9, 0, tzinfo=datetime.timezone.utc)
RUNS = ["mini-pc", "gpu", "gpu-pred"]


@pytest.fixture
def rep(tmp_path: Path) -> Report:
    return report(ReportConfig(tuple(RUNS), title="three runs"), Store(_store(tmp_path), readonly=True), now=WHEN)


def _stable(text: str) -> str:
    from tokenbench.report import figures

    text = text.replace(figures.plotly_js(), "PLOTLY_JS")
    return re.sub(rf"(?<![\w.]){re.escape(__version__)}(?![\w]|\.\d)", "VERSION", text)


def _against_snapshot(name: str, text: str) -> None:
    snap = SNAPSHOTS / name
    if os.environ.get("TOKENBENCH_UPDATE_SNAPSHOTS") == "1":
        snap.write_text(text, encoding="utf-8")
    assert snap.exists(), f"no snapshot {snap}: write it with TOKENBENCH_UPDATE_SNAPSHOTS=1 and read it"
    want = snap.read_text(encoding="utf-8")
    if text != want:  # the first differing line, not two pages of text
        got_lines, want_lines = text.splitlines(), want.splitlines()
        at = next((i for i, (g, w) in enumerate(zip(got_lines, want_lines)) if g != w),
                  min(len(got_lines), len(want_lines)))
        pytest.fail(f"{name} differs from its snapshot at line {at + 1}:\n  got:  "
                    f"{got_lines[at] if at < len(got_lines) else '<end>'}\n  want: "
                    f"{want_lines[at] if at < len(want_lines) else '<end>'}")


@pytest.mark.parametrize("option, name", [("--md", "report.md"), ("--html", "report.html"),
                                          ("--json", "report.json")])
def test_each_file_exporter_writes_its_snapshot(rep: Report, tmp_path: Path, option: str, name: str) -> None:
    if option == "--html":
        pytest.importorskip("plotly")
    exporter = next(e for e in EXPORTERS if e.option == option)
    out = tmp_path / name
    said = exporter.write(rep, out)
    assert str(out) in said
    _against_snapshot(name, _stable(out.read_text(encoding="utf-8")))


def test_the_png_exporter_writes_every_plot_slide_sized(rep: Report, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    exporter = next(e for e in EXPORTERS if e.option == "--png")
    said = exporter.write(rep, tmp_path / "png")
    sizes = {p.stem: _png_size(p) for p in (tmp_path / "png").glob("*.png")}
    assert sorted(sizes) == sorted(p.id for p in rep.plots) and said == f"wrote {len(sizes)} PNGs to {tmp_path / 'png'}"
    assert all(w >= 1600 and w * 9 == h * 16 for w, h in sizes.values()), sizes


def test_the_json_holds_what_the_page_draws(rep: Report, tmp_path: Path) -> None:
    """One report value behind every exporter: the JSON's runs are the result contract of each stored run, its
    plots the very series the page and the PNGs draw, and its comparisons the page's pairs."""
    out = tmp_path / "r.json"
    next(e for e in EXPORTERS if e.option == "--json").write(rep, out)
    doc = json.loads(out.read_text())
    store = Store(tmp_path / "r.db", readonly=True)
    assert doc["runs"] == [json.loads(json.dumps(load_result(store, r).to_json())) for r in RUNS]
    assert doc["plots"] == [json.loads(json.dumps(plot_dict(p))) for p in rep.plots]
    assert [(c["run_a"], c["run_b"]) for c in doc["comparisons"]] == \
        [(rep.runs[p.a].run_id, rep.runs[p.b].run_id) for p in rep.pairs] and len(rep.pairs) == 3
    assert doc["written"] == "2026-11-27 09:00 UTC" and doc["title"] == "three runs"


def test_report_writes_every_format_asked_and_refuses_before_reading(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    db = _store(tmp_path)
    args = ["report", *RUNS, "--db", str(db), "--md", str(tmp_path / "B.md"), "--json", str(tmp_path / "r.json"),
            "--png", str(tmp_path / "png")]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert [line.split(" ")[0] for line in out.splitlines()] == ["wrote"] * 3, out
    assert (tmp_path / "B.md").exists() and (tmp_path / "r.json").exists() and any((tmp_path / "png").iterdir())
    (tmp_path / "afile").write_text("x")
    assert main(["report", *RUNS, "--db", str(db), "--png", str(tmp_path / "afile")]) == 2
    assert "--png" in capsys.readouterr().err
    assert main(["report", *RUNS, "--db", str(db)]) == 2
    err = capsys.readouterr().err
    assert "--md FILE" in err and "--json FILE" in err and "--png DIR" in err, err


def test_counts_of_one_are_said_in_the_singular(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Two runs of one level each read "(2 runs, 5 plots, 1 comparisons)" and "p99_estimate (1 of 1 levels)"."""
    pytest.importorskip("plotly")
    from test_report import _rows, serve

    db = tmp_path / "one.db"
    store = Store(db)
    for label in ("a", "b"):
        store.save_run(f"run-{label}", "sweep", label, {"label": label, "model": "m"}, "measured",
                       [serve(4, 100, 50, 5, flags=["p99_estimate"])], "0", "2026", "2026")
    store.close()
    page = tmp_path / "one.html"
    assert main(["report", "a", "b", "--db", str(db), "--json", str(tmp_path / "one.json"), "--html", str(page)]) == 0
    said = capsys.readouterr().out
    assert "(2 runs, " in said and ", 1 comparison)" in said, said
    # "-" is stdout, as for every --json (it wrote a file named "-"): the document alone there
    assert main(["report", "a", "b", "--db", str(db), "--json", "-"]) == 0
    out = capsys.readouterr().out
    assert json.loads(out)["runs"][0]["run_id"] == "run-a" and not Path("-").exists()
    assert main(["report", "a", "--db", str(db), "--md", "-"]) == 2
    assert "only --json writes to stdout" in capsys.readouterr().err
    assert "Flags | p99_estimate (1 of 1 level) | p99_estimate (1 of 1 level)" in _rows(page.read_text(encoding="utf-8"))
