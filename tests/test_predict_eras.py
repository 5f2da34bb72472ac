"""The engine's version in the fit: rows carry the date and version of the build they measured, each
era of builds gets its own constants (old and new builds are never averaged into one), a prediction says which
builds it assumes and takes --engine-version, and its band widens for what no row measured."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tokenbench import registry
from tokenbench.cli import main
from tokenbench.errors import UsageError
from tokenbench.layout import plural
from tokenbench.predict.bands import ERA_MIN_BOXES, FEW_ROWS, Extrapolation
from tokenbench.predict.calibration import Calibration
from tokenbench.predict.fitting import fit_calibration
from tokenbench.predict.rows import predict_row
from tokenbench.predict.setup import Setup
from tokenbench.predict.measured import Row, read_rows
from tokenbench.predict.specs import Catalog

DATA = Path(__file__).resolve().parents[1] / "src" / "tokenbench" / "data"


@pytest.fixture(scope="module")
def cat() -> Catalog:
    return Catalog.load()


def test_a_version_dates_its_build() -> None:
    assert registry.era("llama.cpp cuda", "2025-06") == "2025" and registry.era("vllm", "2024") == "2024"
    assert registry.era("llama.cpp", "b4000") == "2024" and registry.era("llama.cpp", "b4409") == "2025"
    assert registry.era("llama.cpp", "b1700") == "2023"  # the December 2023 builds the data holds have an era
    assert registry.era("llama.cpp vulkan", "6918") == "2025" and registry.era("llama.cpp", "b9999") == "2026"
    assert registry.era("vllm", "0.10.1") == "2025" and registry.era("vllm", "v0.21.0") == "2026"
    # past the last known release, dated at the known releases' pace (llama.cpp b4409 2025-01 to b9986 2026-07,
    # about 300 builds a month), not taken for the last one: a build number far beyond it is years ahead
    assert registry.version_date(registry.engine("llama.cpp"), "b10500") == "2026-09"
    assert registry.era("llama.cpp", "b12000") == "2027"
    # a build dated decades ahead (a typo) is refused: its band read as billions of times the estimate, and
    # b99999999 overflowed the band's arithmetic into a traceback
    for engine, version in [("llama.cpp", "b99999"), ("llama.cpp", "b99999999"), ("vllm", "2099")]:
        with pytest.raises(UsageError, match=r"more than 5 years ahead: give a build up to 20\d\d$"):
            registry.era(engine, version)
    assert registry.era("vllm", "0.40.0") == "2027"
    for engine, version in [("vllm", "0.5.4"), ("sglang", "0.4.9"), ("llama.cpp", "main"), ("llama.cpp", "b1000"),
                            ("vllm", "1.0"),  # a new major version: the minors' pace cannot date it
                            ("vllm", "1999"), ("vllm", "b12000")]:  # a lone number is no vLLM version
        with pytest.raises(UsageError, match="cannot date") as e:
            registry.era(engine, version)
        assert "\n" not in str(e.value) and "--engine-version 2025" in str(e.value)


def test_rows_read_their_date_and_version_and_older_files_still_read(tmp_path: Path) -> None:
    head = "source,host,hardware,engine,model,weights,kv,test,depth,concurrency,input_len,output_len,metric,value,unit"
    row = "s,h,nvidia-rtx-4090,llama.cpp cuda,llama-2-7b,Q4_0,f16,tg128,0,1,0,128,decode_tps,189,tok/s"
    old = tmp_path / "old.csv"
    old.write_text(f"{head},note\n{row},\n")
    r = read_rows(old)[0]
    assert (r.date, r.version, r.era) == ("", "", "")
    new = tmp_path / "new.csv"
    new.write_text(f"{head},date,version,note\n{row},,b6918,\n{row},2026-05,,\n")
    a, b = read_rows(new)
    assert (a.date, a.era, a.version) == ("", "2025", "b6918")  # dated by its build number
    assert (b.date, b.era) == ("2026-05", "2026")
    new.write_text(f"{head},date,version,note\n{row},May 2026,,\n")
    with pytest.raises(UsageError, match="row 1 is malformed.*YYYY-MM"):
        read_rows(new)


def _faster(rows: list[Row], year: str, factor: float) -> list[Row]:
    """The same measurements as if a newer build had made them ``factor`` times faster."""
    return [dataclasses.replace(r, value=r.value * factor, date=f"{year}-01",
                                raw={**r.raw, "source": r.raw["source"] + "-new", "date": f"{year}-01"}) for r in rows]


def test_old_and_new_builds_are_never_one_constant(cat: Catalog) -> None:
    """The same boxes measured by a 2024 build and by a 2026 build at 0.8x its decode rate (a regression: a
    faster one would need more than the 2024 fit's bandwidth share, near 1 already): each era's prediction
    follows its own rows; one pooled constant (the rows undated) misses both by about half the gap."""
    old = [r for r in read_rows(DATA / "published-more.csv")
           if r.raw["source"] == "xdai-llama3" and r.metric == "decode_tps" and r.engine == "llama.cpp cuda"]
    new = _faster(old, "2026", 0.8)
    cal = fit_calibration(cat, old + new, "test", bands=False)
    assert sorted(cal.eras["llamacpp-cuda"]) == ["2024", "2026"] and cal.newest_era("llamacpp-cuda") == "2026"
    pooled = fit_calibration(cat, [dataclasses.replace(r, date="") for r in old + new], "test", bands=False)

    def median_error(c: Calibration, rows: list[Row]) -> float:
        errs = sorted(abs(predict_row(cat, c, r).error_pct or 0) for r in rows)
        return errs[len(errs) // 2]

    assert median_error(cal, new) < 7 and median_error(cal, old) < 7  # measured 5.6% and 5.2%
    # pooled: 9.4% and 15.2%
    assert median_error(pooled, new) > 1.5 * median_error(cal, new) and median_error(pooled, old) > 2 * median_error(cal, old)
    # a prediction defaults to the newest builds, and --engine-version picks the older era's constants
    args = (cat, cal, "nvidia-rtx-4090", "llama-3.1-8b", "Q4_K_M", "f16", "llama.cpp")
    now, then = Setup.make(*args), Setup.make(*args, era="2024")
    assert (now.era, then.era) == ("2026", "2024")
    assert 0.7 < then.decode(0).estimate / now.decode(0).estimate < 0.9
    assert Setup.make(*args, era="2023").era == "2024"  # older than every era: the oldest


def test_a_band_widens_for_what_no_row_measured(cat: Catalog) -> None:
    cal = Calibration.packaged()
    args = (cat, cal, "nvidia-rtx-4090", "llama-3.1-8b", "Q4_K_M", "f16", "llama.cpp")
    s = Setup.make(*args)
    base = cal.kind_band(s.kind_of(1), "decode")
    assert base is not None and not base.widened and not base.borrowed
    assert s.reach.years == 0 and s.band(cal, "decode") == base  # the data's own builds, depth and concurrency
    later = Setup.make(*args, era="2029")
    assert later.reach.years == 2029 - int(cal.newest_era("llamacpp-cuda")[-4:])
    wider = later.band(cal, "decode")
    assert wider is not None and wider.pct > base.pct and "newer than any row" in " ".join(wider.widened)
    deep = s.band(cal, "decode", depth=1_000_000)
    assert deep is not None and deep.pct > base.pct and "beyond the deepest row" in deep.widened[0]
    assert cal.band("llamacpp-cuda", "decode", Extrapolation(years=4)).pct > wider.pct  # further, wider


def test_a_kind_band_widens_for_a_thin_generation_not_a_thin_year(cat: Catalog) -> None:
    """The fit widened a band for a hardware generation or a year of builds with few rows (llama.cpp CUDA's sm_120
    boxes: the scoreboard's three; its 2026 builds: two boxes). A band kept per kind of row (here consumer GPUs, one
    stream, dense) still widens for the thin generation, which its held-out rows hardly hold (the RTX 5090
    measured 20% above its prediction), but not for the thin year or the backend's few rows: on the shipped rows
    held out, those terms over a kind's band covered 90-92% of rows stated to 80%. A calibration written before
    bands per kind widens for all three as it did."""
    cal = Calibration.packaged()
    reach = cal.reach["llamacpp-cuda"]
    assert reach["arch_sm_120"] < FEW_ROWS <= reach["arch_sm_89"]
    assert reach["boxes_2026"] < ERA_MIN_BOXES <= reach["boxes_2025"]
    args = ("llama-2-7b", "Q4_0", "f16", "llama.cpp")
    ada = Setup.make(cat, cal, "nvidia-rtx-4090", *args).band(cal, "decode")
    blackwell = Setup.make(cat, cal, "nvidia-rtx-5090", *args).band(cal, "decode")
    assert ada is not None and not ada.borrowed and not ada.widened
    assert blackwell is not None and blackwell.widened == (f"{plural(reach['arch_sm_120'], 'row')} of sm_120 boxes",)
    assert Setup.make(cat, cal, "nvidia-rtx-4090", *args, era="2026").band(cal, "decode") == ada
    old = Calibration.from_toml("\n\n".join(part for part in cal.to_toml().split("\n\n")
                                          if not part.startswith("[kinds.")))
    base = old.band("llamacpp-cuda", "decode")
    assert base is not None and not old.kind_bands
    blackwell = Setup.make(cat, old, "nvidia-rtx-5090", *args).band(old, "decode")
    assert blackwell is not None and blackwell.widened == (f"{plural(reach['arch_sm_120'], 'row')} of sm_120 boxes",)
    new = Setup.make(cat, old, "nvidia-rtx-4090", *args, era="2026").band(old, "decode")
    assert new is not None and new.widened == (f"2026 builds measured on {plural(reach['boxes_2026'], 'box', 'boxes')}",)


def test_reach_is_the_context_a_row_attended_to(cat: Catalog) -> None:
    """A pp4096 at depth 0 reached 4096 tokens of context, as a tg128 at depth 3968 does: the fit's reach and a
    row's band count the prompt and the output on top of the depth, not the depth alone."""
    rows = [r for r in read_rows(DATA / "published-more.csv") if r.raw.get("source") == "xdai-llama3"]
    assert max(r.depth for r in rows) == 0
    cal = fit_calibration(cat, rows, "test", bands=False)
    assert cal.reach["llamacpp-cuda"]["max_depth"] == 4096  # its pp4096 and tg4096 rows

    packaged = Calibration.packaged()
    deepest = packaged.reach["llamacpp-cuda"]["max_depth"]

    def band(depth: int, prompt: int) -> list[str]:
        r = Row({"note": ""}, "nvidia-rtx-4090", "llama.cpp cuda", "llama-3.1-8b", "Q4_K_M", "f16",
                f"pp{prompt}", depth, 1, prompt, 0, "prefill_tps", 1000.0, "tok/s", "2026-01")
        res = predict_row(cat, packaged, r)
        assert res.band is not None
        return [w for w in res.band.widened if "deepest" in w]

    assert band(0, 512) == [] and band(deepest - 512, 512) == []
    far = band(0, 4 * deepest)  # a long prompt at depth 0 reaches as far as a short one at that depth
    assert far and far == band(4 * deepest - 512, 512)
    assert f"context {4 * deepest:,} tokens" in far[0]


def test_eras_reach_and_drift_survive_the_calibration_file(cat: Catalog) -> None:
    packaged = Calibration.packaged()
    again = Calibration.from_toml(packaged.to_toml())
    assert {b: sorted(e) for b, e in again.eras.items()} == {b: sorted(e) for b, e in packaged.eras.items()}
    assert again.reach == packaged.reach and again.drift == pytest.approx(packaged.drift, rel=1e-3)
    assert any(k.startswith("arch_") for k in again.reach["llamacpp-cuda"])
    assert len(packaged.eras["llamacpp-cuda"]) >= 2  # the 2024 builds and the current ones apart
    old = packaged.efficiency("llamacpp-cuda", "2024")
    assert old.era == "2024" and old != packaged.efficiency("llamacpp-cuda")
    assert again.efficiency("llamacpp-cuda", "2024").t_layer == pytest.approx(old.t_layer, rel=1e-4)


def test_predict_says_which_builds_it_assumes(capsys: pytest.CaptureFixture[str],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    args = ["predict", "--hardware", "nvidia-rtx-4090", "--model", "llama-3.1-8b", "--engine", "llama.cpp",
            "--test", "tg128"]
    assert main(args) == 0
    now = " ".join(capsys.readouterr().out.split())
    newest = Calibration.packaged().newest_era("llamacpp-cuda")
    assert f"({newest} builds)" in now and "widened" not in now
    assert main([*args, "--engine-version", "b4000"]) == 0
    then = " ".join(capsys.readouterr().out.split())
    assert "(2024 builds)" in then and "2024 builds from xdai-llama3" in then
    assert main([*args, "--engine-version", "2030"]) == 0
    later = " ".join(capsys.readouterr().out.split())
    assert f"(2030 builds, from {newest}'s constants" in later and "up to decode" in later and "newer than any row" in later
    assert main([*args, "--engine-version", "2019"]) == 0  # older than any row: said, and the band widens
    before = " ".join(capsys.readouterr().out.split())
    oldest = Calibration.packaged().oldest_era("llamacpp-cuda")
    assert f"(2019 builds, from {oldest}'s constants (the oldest fitted)" in before
    assert "older than any row" in before
    assert main([*args, "--engine-version", "b12000"]) == 0  # newer than any build of known date
    beyond = " ".join(capsys.readouterr().out.split())
    assert f"(2027 builds, from {newest}'s constants" in beyond and "newer than any row" in beyond
    assert main([*args, "--engine-version", "nightly"]) == 2
    err = capsys.readouterr().err
    assert "cannot date llama.cpp version 'nightly'" in err and len(err.strip().splitlines()) == 1


def test_a_cells_band_is_its_own_whatever_else_the_table_asks(capsys: pytest.CaptureFixture[str],
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Concurrency 16 lies inside the measured vLLM rows: its band is the same asked alone or beside 64 and 256,
    which lie beyond them and widen only their own cells (the note says up to how far)."""
    monkeypatch.setenv("COLUMNS", "200")
    base = ["predict", "--hardware", "nvidia-h100-sxm", "--model", "qwen3.6-27b", "--weights", "FP8",
            "--engine", "vllm", "--concurrency"]

    def cells(levels: str) -> dict[str, list[str]]:
        assert main([*base, levels]) == 0
        out = capsys.readouterr().out
        return {ln.split()[0]: [w for w in ln.split() if w.startswith("±")] for ln in out.splitlines()
                if ln.split() and ln.split()[0].isdigit()}

    alone, beside = cells("16"), cells("16,64,96")  # 96: the most that fit
    assert alone["16"] == beside["16"]
    assert [float(b.strip("±%")) for b in beside["96"]] > [float(b.strip("±%")) for b in beside["16"]]
    # a session's bands widen for the context its turns reach, as a serving request of that length does
    session = ["predict", "--hardware", "nvidia-h100-sxm", "--model", "gpt-oss-20b", "--weights", "MXFP4",
               "--sessions", "--turns", "10", "--shared-prefix", "2000", "--input-len", "1000", "--tool-len", "800",
               "--output-len", "400", "--concurrency", "4"]
    assert main(session) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "beyond the deepest row" in out
