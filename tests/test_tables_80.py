"""Tables stay tables at 80 columns: compare, show, runs and recommend say the columns that hold one
value in every row once, above the table, and fit the rest; one block per row (a card) only where a row cannot
fit. compare of a 5-level sweep at 80 columns printed 245 lines of 9-line cards, each repeating "Test serve /
Depth 0 / Concurrency 4 / Prompt ~128". The width is set in each test, never taken from the caller's terminal."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from test_compare_cost_report import _run, serve
from test_compare_uncertainty import SPREAD, records, stored
from tokenbench.cli import main
from tokenbench.store import Store

RULE = re.compile(r"^━+$")


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """Two 5-level sweeps of one model (concurrency 1 to 5, 12 requests a level) and a third of one level."""
    path = tmp_path / "t.db"
    store = Store(path)
    stored(store, "box-a", [[records([100 * k * (1 + c / 10) for k in SPREAD])] for c in range(5)])
    stored(store, "box-b", [[records([120 * k * (1 + c / 10) for k in SPREAD], tpot_ms=11)] for c in range(5)])
    stored(store, "box-c", [[records([100 * k for k in SPREAD])]])
    return path


def printed(argv: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
            columns: int | None) -> list[str]:
    """What the command prints at ``columns`` (None: piped into a file, no terminal: 160 columns)."""
    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", str(columns))
    assert main(argv) == 0
    return capsys.readouterr().out.splitlines()


def table_at(lines: list[str], *heads: str) -> int:
    """The index of the table's rule, under the header line that holds ``heads`` (a table: one header line for
    every column, not a block per row)."""
    at = [i for i, ln in enumerate(lines) if RULE.match(ln.strip())]
    assert at, "\n".join(lines)
    i = at[0]
    header = " ".join(lines[max(0, i - 2):i])  # a header on two lines where its column is narrow
    assert all(h in header for h in heads), "\n".join(lines)
    return i


def readable(lines: list[str], width: int) -> None:
    assert max(len(ln) for ln in lines) <= width, "\n".join(ln for ln in lines if len(ln) > width)
    assert not any("\x1b[" in ln for ln in lines)  # no colour codes in a file
    # no line ends in spaces: a padded last cell or a wrapped line's break, which a file or a diff of two runs keeps
    assert not [ln for ln in lines if ln.endswith(" ")], "\n".join(repr(ln) for ln in lines if ln.endswith(" "))


@pytest.mark.parametrize("columns", [80, None])
def test_compare_of_5_levels_is_one_short_table(db: Path, capsys: pytest.CaptureFixture[str],
                                                monkeypatch: pytest.MonkeyPatch, columns: int | None) -> None:
    lines = printed(["compare", "box-a", "box-b", "--db", str(db)], capsys, monkeypatch, columns)
    readable(lines, columns or 160)
    i = table_at(lines, "Metric", "A", "B", "A/B (95% CI)", "Faster")
    assert [ln for ln in lines if "Test: serve" in ln] == ["Test: serve; Depth: 0; Prompt: ~128"]  # once, above
    assert lines.index("Test: serve; Depth: 0; Prompt: ~128") < i
    rows = [ln.rstrip() for ln in lines[i + 1:]]
    # each concurrency heads its rows (a column of it left no room at 80 for an interval and its verdict)
    assert [k for k, ln in enumerate(rows) if ln.startswith(" Concurrency ")] == [0, 8, 14, 20, 26]
    assert rows[14] == " Concurrency 3"
    assert re.match(r"^ Median TTFT ms\s+120\s+144\s+0\.83 \(0\.\d\d–0\.9\d\)\s+A 1\.20×$", rows[17]), rows[17]
    assert not any(ln.lstrip().startswith(("Test serve", "Depth", "Prompt")) for ln in lines)  # no cards
    assert 32 <= len(lines) <= 48  # 27 rows (5 metrics a level, prefill and decode at 1); it was 245 lines


@pytest.mark.parametrize("columns", [80, None])
def test_show_says_what_every_level_shares_once(db: Path, capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch, columns: int | None) -> None:
    lines = printed(["show", "box-a", "--db", str(db)], capsys, monkeypatch, columns)
    readable(lines, columns or 160)
    i = table_at(lines, "Concurrency", "Aggregate", "Per-agent", "Median TTFT", "P99 TTFT")
    assert "Median TPOT: 10.0 ms; OK/failed: 12/0 a level" in lines[:i]  # the same at every level: said once
    assert not any("OK/failed" in ln or "Median TPOT" in ln for ln in lines[i - 1:i + 6])
    assert [ln.split()[0] for ln in lines[i + 1:i + 6]] == ["1", "2", "3", "4", "5"]


#: published serve rows of one box and model: a prefill-only and a decode-only row beside the load levels, at two
#: prompt lengths (the Prompt tokens, Prefill and Decode columns a sweep does not have)
PUBLISHED = """source,host,hardware,engine,model,weights,kv,test,depth,concurrency,input_len,output_len,metric,value,unit,date,version,note
pub,H100 SXM,nvidia-h100-sxm,vllm,qwen3.6-27b,FP8,fp8,serve,0,1,512,0,prefill_tps,11378,tok/s,2026,0.21,
pub,H100 SXM,nvidia-h100-sxm,vllm,qwen3.6-27b,FP8,fp8,serve,0,1,0,0,decode_tps,77,tok/s,2026,0.21,
""" + "".join(f"pub,H100 SXM,nvidia-h100-sxm,vllm,qwen3.6-27b,FP8,fp8,serve,0,{c},4096,512,{m},{v},{u},2026,0.21,\n"
              for c in (1, 4, 8, 16, 32)
              for m, v, u in (("output_tps", 30 * c, "tok/s"), ("ttft_median", 200 + 50 * c, "ms"),
                              ("ttft_p99", 900 + 200 * c, "ms"), ("tpot_median", 12 + c / 2, "ms")))


@pytest.mark.parametrize("columns", [80, None])
def test_show_of_a_published_import_is_one_table(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                 monkeypatch: pytest.MonkeyPatch, columns: int | None) -> None:
    """A published.csv run at 80 columns printed a 9-line block per row: its prompt lengths and prefill- and
    decode-only rows made the table 91 columns wide. The per-agent rate (the aggregate over the concurrency)
    gives way first, said above the table, and the rest stays one table."""
    csv, db = tmp_path / "published.csv", str(tmp_path / "p.db")
    csv.write_text(PUBLISHED)
    assert main(["import", str(csv), "--db", db]) == 0
    capsys.readouterr()
    lines = printed(["show", "last", "--db", db], capsys, monkeypatch, columns)
    readable(lines, columns or 160)
    i = table_at(lines, "Concurrency", "Prompt", "Aggregate", "Median", "P99 TTFT", "Prefill", "Decode")
    assert [ln.split()[0] for ln in lines[i + 1:i + 8]] == ["1", "1", "1", "4", "8", "16", "32"]
    assert not any(ln.startswith("Concurrency 4") for ln in lines)  # no block per row
    assert ("Per-agent" in " ".join(lines[i - 2:i])) == (columns is None)
    if columns == 80:
        assert "Per-agent tok/s (the aggregate over the concurrency) left out at this width:" in lines[:i][-4]


@pytest.mark.parametrize("columns", [80, None])
def test_runs_is_a_table_with_what_they_share_above(db: Path, capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch, columns: int | None) -> None:
    lines = printed(["runs", "--db", str(db)], capsys, monkeypatch, columns)
    readable(lines, columns or 160)
    i = table_at(lines, "Run", "Label", "Levels")
    assert lines[:i - 1] == ["Started: 2026-11-25 10:00Z; Kind: sweep; Model: m; Status: complete"]
    assert [ln.split() for ln in lines[i + 1:]] == [["run-box-c", "box-c", "1"], ["run-box-b", "box-b", "5"],
                                                    ["run-box-a", "box-a", "5"]]


def _realistic_runs(path: Path, interrupted: bool = False) -> None:
    """30 runs as a user's store holds them: five kinds, labels, a served name, a local directory and a hub id for
    the model, four engines; ids that hold their start. ``interrupted``: one run was cut short."""
    import datetime as dt

    from tokenbench.levels import ServingLevel

    store = Store(path)
    kinds = ["sweep", "depth", "capacity", "quality", "coldstart"]
    labels = ["q-transformers", "box-a", None, "vllm-h200-fp8", "llama-b6000"]
    models = ["tokenbench-tiny-llama", "/root/.cache/tokenbench/tiny-llama-v2/hf", "Qwen/Qwen3-Coder-30B-A3B-Instruct"]
    engines = ["vllm 0.32.0", "llama.cpp b6000", "transformers 4.57.1", "emitter"]
    t0 = dt.datetime(2026, 12, 4, 17, 47, 37, tzinfo=dt.timezone.utc)
    for i in range(30):
        t = t0 + dt.timedelta(minutes=7 * i, seconds=13 * i)
        manifest: dict[str, object] = {"model": models[i % 3], "engine": engines[i % 4]}
        if kinds[i % 5] == "capacity":  # stored as the sweep it ran
            manifest["capacity"] = {"slo": "ttft_p90<=2s"}
        store.save_run(f"{t:%Y%m%d-%H%M%S}-{i * 4099 % 65536:04x}", "sweep" if "capacity" in manifest else
                       kinds[i % 5], labels[i % 5], manifest, "measured", [ServingLevel()] * (1 + i % 6), "0",
                       t.isoformat(), t.isoformat())
    if interrupted:
        store.db.execute("UPDATE runs SET status = 'interrupted' WHERE id = (SELECT MIN(id) FROM runs)")


@pytest.mark.parametrize("interrupted", [False, True])
def test_runs_of_many_kinds_labels_and_models_are_rows_at_80(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                            monkeypatch: pytest.MonkeyPatch,
                                                            interrupted: bool) -> None:
    """30 runs that differ in kind, label and model were one block of 8 lines each at 80 columns (240 lines): the
    start (the run id holds it), the engine and, where the status varies, the level count are left out, each
    said above the table, and every run is a row of at most 2 lines."""
    _realistic_runs(tmp_path / "r.db", interrupted)
    lines = printed(["runs", "--db", str(tmp_path / "r.db")], capsys, monkeypatch, 80)
    readable(lines, 80)
    i = table_at(lines, "Run", "Kind", "Label", "Model")
    above = " ".join(lines[:i])
    assert "Engine left out at this width" in above and "Started: the date and time in each run id" in above
    assert ("Levels left out at this width" in above) == interrupted
    starts = [k for k, ln in enumerate(lines) if ln.startswith(" 2026")]
    assert len(starts) == 30 and starts[0] == i + 1
    assert max(b - a for a, b in zip(starts, starts[1:] + [len(lines)])) <= 2
    assert len(lines) <= 70
    assert any("Qwen/Qwen3-Coder-" in ln for ln in lines)  # a hub id broken at its hyphens, never cut


@pytest.mark.parametrize("columns", [80, None])
def test_recommend_is_a_table_with_engine_and_source_said_once(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                              monkeypatch: pytest.MonkeyPatch,
                                                              columns: int | None) -> None:
    lines = printed(["recommend", "--model", "qwen3.6-35b-a3b", "--agents", "16", "--currency", "EUR", "--price",
                     "nvidia-l40s=0.9", "--price", "nvidia-h100-pcie=2", "--db", str(tmp_path / "r.db")],
                    capsys, monkeypatch, columns)
    readable(lines, columns or 160)
    i = table_at(lines, "Rank", "Box", "Aggregate", "TTFT", "TPOT ms", "EUR/M")
    assert [ln for ln in lines if "PREDICTED" in ln] == ["Engine: vllm FP8; Source: PREDICTED"]
    # cheapest per Mtok first (the queue model's L40S, 2048-token steps: EUR 0.67 against the H100 PCIe's 0.61)
    assert [ln.split()[:2] for ln in lines[i + 1:i + 4]] == [["1", "nvidia-h100-sxm"], ["2", "nvidia-h100-pcie"],
                                                             ["3", "nvidia-l40s"]]


def test_recommend_with_a_measured_box_keeps_every_name_whole(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "r.db"
    _run(Store(db), "my-h100", [serve(16, 700, 1000, 20)], model="qwen3.6-35b-a3b", price_per_hour=1.79)
    lines = printed(["recommend", "--model", "qwen3.6-35b-a3b", "--agents", "16", "--ttft-p99", "10s", "--currency",
                     "EUR", "--price", "nvidia-l40s=0.9", "--runs", "my-h100", "--db", str(db)], capsys, monkeypatch,
                    80)
    readable(lines, 80)
    i = table_at(lines, "Rank", "Box", "Engine", "Source")
    assert [ln.split()[1:4] for ln in lines[i + 1:i + 4]] == [
        ["nvidia-h100-sxm", "vllm", "FP8"], ["nvidia-l40s", "vllm", "FP8"], ["my-h100", "?", "measured"]]


def test_a_row_that_cannot_fit_is_a_card_and_says_its_shared_columns_once() -> None:
    """The fallback: one column wider than the terminal (a run label as long as the line) makes one block per
    row; the columns every row shares still go above, once."""
    import io

    from rich.console import Console

    from tokenbench.console import print_table

    buf = io.StringIO()
    label = "x" * 90
    print_table(Console(file=buf, width=80), ["Level", "Test", "Value"],
                [["1", "serve", label], ["2", "serve", label + "y"]], keep=(0, 2))
    lines = buf.getvalue().splitlines()
    assert lines[0] == "Test: serve" and lines[1] == "Level 1" and "Level 2" in lines
    assert sum("serve" in ln for ln in lines) == 1


def test_flags_said_under_the_table_name_their_row_as_a_sentence() -> None:
    """Flags that do not fit go under the table, a line a row: a figure after its column's heading ("Agents 4
    flags"), and a row named in words on its own: an open-loop replay's read "Agents open loop flags: ..."."""
    import io

    from rich.console import Console

    from tokenbench.console import print_table

    buf = io.StringIO()
    header = ["Agents", "Aggregate output tok/s", "Per-agent tok/s", "Median TTFT", "P99 TTFT", "Median TPOT",
              "OK/failed", "Flags"]
    print_table(Console(file=buf, width=80), header,
                [["open loop", "2,368", "—", "1.5 ms", "3.3 ms*", "0.0 ms", "6/0", "client_bound, tpot_estimated"],
                 ["4", "1,234", "308.5", "2.5 ms", "4.3 ms*", "1.0 ms", "8/0", "client_bound, concurrency_low"]],
                numeric=True, keep=(0,), aside=7)
    lines = buf.getvalue().splitlines()
    assert "Open loop flags: client_bound, tpot_estimated" in lines, lines
    assert "Agents 4 flags: client_bound, concurrency_low" in lines, lines


def test_a_name_joined_by_hyphens_underscores_or_slashes_moves_whole() -> None:
    """A cell wraps between its words: ``agent_tps_p90`` and ``tok/s`` move whole to the next line where they fit
    there (capacity's Objectives column had read "agent_" over "tps_p90"), and break inside only where the name
    alone is wider than the column."""
    from tokenbench.layout import wrap_cell

    cell = "ttft_p90 884 ms; agent_tps_p90 14.3 tok/s, 3/40 under"
    lines = wrap_cell(cell, 24)
    assert lines == ["ttft_p90 884 ms;", "agent_tps_p90 14.3", "tok/s, 3/40 under"]
    assert " ".join(lines) == cell and all(len(ln) <= 24 for ln in lines)
    assert wrap_cell("a_very_long_name_that_is_wide", 10) == ["a_very_", "long_name_", "that_is_", "wide"]
    assert wrap_cell("model tokenbench-small-utf8-llama", 12) == ["model", "tokenbench-", "small-utf8-", "llama"]
    # show --guard read "(pip install nvidia-ml-" over "py)": a hyphenated name moves whole where it fits
    assert wrap_cell("no NVIDIA GPU or NVML (pip install nvidia-ml-py)", 24) == [
        "no NVIDIA GPU or NVML", "(pip install", "nvidia-ml-py)"]
    assert wrap_cell("meta-llama/Llama-3.1-70B-Instruct", 12) == ["meta-llama/", "Llama-3.1-", "70B-Instruct"]


def test_a_long_line_wraps_under_its_own_indent() -> None:
    """A line of figures or names wider than the terminal goes on indented under its first line, never back at
    the margin (a soak's ten TTFTs, recommend's closest boxes and its excluded ones), and no line is wider."""
    import io

    from rich.console import Console

    from tokenbench.console import print_hanging

    buf = io.StringIO()
    console = Console(file=buf, width=40)
    print_hanging(console, "  turn TTFT p50: " + " ".join(f"{1000 + i:,} ms" for i in range(10)))
    print_hanging(console, "excluded, does not fit: " + ", ".join(f"box-{i}" for i in range(12)), hang=3)
    print_hanging(console, "short")
    lines = buf.getvalue().splitlines()
    assert lines[0].startswith("  turn TTFT p50: 1,000 ms")
    first = lines.index(next(ln for ln in lines if ln.startswith("excluded")))
    assert first > 1 and all(ln.startswith("    ") and ln[4] != " " for ln in lines[1:first])
    assert all(ln.startswith("   ") and ln[3] != " " for ln in lines[first + 1:-1]) and lines[-1] == "short"
    assert all(len(ln) <= 40 for ln in lines)
    words = " ".join(lines).split()
    assert words.count("ms") == 10 and sum(w.startswith("box-") for w in words) == 12


def test_a_column_of_names_gives_way_after_the_columns_of_words() -> None:
    """recommend at 80 columns cut "amd-ryzen-ai-" / "max-395" and "nvidia-h100-" / "sxm" while its Notes column
    of words kept 18 columns: a name read across two lines cannot be copied. The words wrap first now."""
    from tokenbench.layout import table_layout, wrap_cell

    head = ["Rank", "Box", "Engine", "Agents", "Notes"]
    rows = [["1", "amd-ryzen-ai-max-395", "llama.cpp vulkan Q4_K_M -np 4", "12", ""],
            ["2", "nvidia-h100-sxm", "vllm FP8", ">=128", "at least: every count up to 128 met the SLOs"]]
    layout = table_layout(head, rows, 72)
    assert layout is not None and layout.total() <= 72
    assert layout.widths[1] == len("amd-ryzen-ai-max-395")  # whole
    assert wrap_cell(rows[1][4], layout.widths[4])[0] != rows[1][4]  # the notes wrapped instead
    # narrower still, the names are not cut at their hyphens when the words can give no more: no table (a block
    # per row) rather than "amd-ryzen-ai-max-" over "395"
    assert table_layout(head, rows, 58) is None  # the names cut to 15 columns before


def test_the_line_above_a_table_ends_in_no_hanging_separator() -> None:
    """capacity printed "SLO: pass; OK/failed: 32/0;" above its table at 80 columns, the ";" hanging over the next
    line's sentence (goodput left out at that width): the parts are joined within a line, never after its last."""
    import io

    from rich.console import Console

    from tokenbench.distribution import Distribution
    from tokenbench.levels import ServingLevel
    from tokenbench.sweep_table import print_sweep

    levels = []
    for c in (1, 2, 4, 8):
        s = ServingLevel(concurrency=c, output_throughput_tps=400.0 * c ** 0.5, completed=32, slo="ttft_p90<=100ms",
                         slo_met=True, goodput_rps=24.0 + c, cost_per_mtok=1.23 * c)
        s.ttft_ms, s.tpot_ms = Distribution(n=32, p50=10.0 + c, p99=13.0 + c), Distribution(n=32, p50=2.0 + c)
        levels.append(s)
    buf = io.StringIO()
    print_sweep(Console(file=buf, width=80), levels, "EUR")
    lines = [ln.rstrip() for ln in buf.getvalue().splitlines()]
    assert lines[0] == "SLO: pass; OK/failed: 32/0 a level"  # a level's count, not the run's
    assert lines[1].startswith("Goodput req/s (") and "left out" in " ".join(lines[1:3])
    assert not any(ln.endswith(";") for ln in lines)


def test_every_help_fits_80_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    """--help at 80 columns: argparse wraps option help but not a group's title, a usage line's list of choices
    or the examples, which ran to 168 columns; the examples break before an option with a backslash, as a shell
    takes them."""
    import argparse

    from tokenbench.cli.parser import build_parser

    monkeypatch.setenv("COLUMNS", "80")
    parser = build_parser()
    helps = {"tokenbench": parser.format_help()}
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, sp in sub.choices.items():
        helps[name] = sp.format_help()
        for inner in (a for a in sp._actions if isinstance(a, argparse._SubParsersAction)):
            helps.update({f"{name} {n}": p.format_help() for n, p in inner.choices.items()})
    wide = [f"{name}: {line}" for name, text in helps.items() for line in text.splitlines() if len(line) > 80]
    assert not wide, "\n".join(wide)
    assert " qwen3.6-27b \\\n      --weights FP8 --concurrency 1,16\n" in helps["predict"]  # continued


#: The addresses the packaged catalogs give as their sources (a box's launch figures reported on a web page).
CATALOG_URL = re.compile(r"[\w-]+(?:\.[\w-]+)*\.(?:com|de|org)/\S+")


@pytest.mark.parametrize("command", ["hardware", "models"])
@pytest.mark.parametrize("columns", [80, None])
def test_a_catalog_s_source_addresses_stay_whole_within_the_width(command: str, capsys: pytest.CaptureFixture[str],
                                                                  monkeypatch: pytest.MonkeyPatch,
                                                                  columns: int | None) -> None:
    """hardware at 80 columns printed a source's address beside its label, 88 columns wide; piped into a file, its
    table broke the address at its hyphens over three lines. Each address is whole on one line, and every line fits
    the width."""
    from tokenbench.predict.specs import Catalog

    cat = Catalog.load()
    entries = cat.hardware if command == "hardware" else cat.models
    urls = [u.rstrip(",;:)") for e in entries.values() for u in CATALOG_URL.findall(e.source)]
    assert urls or command == "models"
    lines = printed([command], capsys, monkeypatch, columns)
    readable(lines, columns or 160)
    text = "\n".join(lines)
    for url in urls:
        assert url in text, url


@pytest.mark.parametrize("columns", [80, None])
def test_engines_paths_are_never_cut(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                     monkeypatch: pytest.MonkeyPatch, columns: int | None) -> None:
    """At 80 columns the engines' paths wrapped inside the table ("/root/.cache/tokenbench/llama.cpp-0.3.36-" over
    "e46764b2/bin"), which no one can copy: where one would wrap, each goes under the table whole; piped (160
    columns) they stay in it."""
    tools = tmp_path / "a-tools-directory-with-a-long-name"
    monkeypatch.setenv("TOKENBENCH_TOOLS", str(tools))
    lines = printed(["engines"], capsys, monkeypatch, columns)
    paths = [ln for ln in lines if str(tools) in ln]
    below = {ln.split(":")[0] for ln in paths if not ln.startswith(" ")}
    assert below >= {"vllm", "llama-server"} if columns or below else len(paths) >= 2, lines
    for ln in paths:  # each whole: the tools directory, then the engine's own folder, on one line
        path = ln[ln.index(str(tools)):].split()[0]
        assert path.endswith(("-env", "/bin")), ln
    # the table fits; only a path longer than the line may pass it
    assert all(len(ln) <= (columns or 160) for ln in lines if ln not in paths or ":" not in ln), lines


def test_a_line_of_text_breaks_between_words_not_inside_a_command_or_a_number_and_its_unit() -> None:
    """At 80 columns a finding's remedy broke its command ("'tokenbench show" / "RUN --guard'") and a progress
    line its time ("(0.4" / "s; ..."): a copied command then missed its argument. Both stay whole; a path wider
    than the line is still cut at it, as Rich folds it, so no line runs past the terminal."""
    import io

    from tokenbench.console import ReadableConsole

    out = io.StringIO()
    console = ReadableConsole(file=out, width=80, markup=False, highlight=False)
    remedy = "the server host's checks were not read: see 'tokenbench show RUN --guard' for what this machine found"
    progress = "level 2/3 concurrency 2: 128.9 tok/s, TTFT p50 3 ms, 20 ok, no failures (0.4 s; 12 s elapsed)"
    path = "saved in /tmp/" + "d" * 100 + "/results.db"
    for text in (remedy, progress, path):
        for shift in range(12):  # the span lands on every column near the break
            console.print("x" * shift + " " + text, style="yellow")
    lines = out.getvalue().splitlines()
    assert max(len(ln) for ln in lines) <= 80
    assert sum("'tokenbench show RUN --guard'" in ln for ln in lines) == 12, lines
    assert sum("(0.4 s;" in ln for ln in lines) == 12, lines
    assert not any(ln.endswith(("'tokenbench", "show", "(0.4")) for ln in lines), lines
