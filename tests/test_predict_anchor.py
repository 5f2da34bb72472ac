"""calibrate --runs: the user's own stored runs anchor the fit of their backend, so "measure the box you own,
predict the box you don't" uses real data from the user's stack."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tokenbench.cli import main
from tokenbench.levels import DepthLevel
from tokenbench.predict.calibration import Calibration
from tokenbench.predict.setup import Setup
from tokenbench.predict.specs import Catalog
from tokenbench.store import Store

SCALE = 1.3
BOX, MODEL, WEIGHTS, KV, ENGINE = "amd-ryzen-ai-max-395", "gpt-oss-20b", "Q4_K_M", "Q8_0", "llama.cpp vulkan"


def _setup(cal: Calibration) -> Setup:
    return Setup.make(Catalog.load(), cal, BOX, MODEL, WEIGHTS, KV, ENGINE)


def _decode(cal: Calibration, depth: int) -> float:
    return _setup(cal).decode(depth + 64).rate()[1]


def _prefill(cal: Calibration, depth: int) -> float:
    return _setup(cal).prefill(512, depth).rate(512)[1]


def _depth_run(store: Store, scale: float, gpu: str = "Radeon 8060S Graphics (RADV GFX1151)") -> None:
    """A depth run on the box whose rates are ``scale`` times what the packaged calibration predicts (as
    llama-bench's import keeps it: the GPU it names)."""
    packaged = Calibration.packaged()
    levels = []
    for d in (0, 8192, 32768):
        levels.append(DepthLevel(concurrency=1, test="pp512", depth=d, pp_tps=scale * _prefill(packaged, d)))
        levels.append(DepthLevel(concurrency=1, test="tg128", depth=d, tg_tps=scale * _decode(packaged, d)))
    store.save_run("my-run", "depth", "my-strix", {"label": "my-strix", "model": "gpt-oss-20b-Q4_K_M.gguf",
                                                   "engine": "llama.cpp", "weights": WEIGHTS, "kv": KV,
                                                   "gpu": gpu},
                   "measured", levels, "0", "2026-01-01T00:00:00", "2026-01-01T00:10:00")


# a full calibration fit with its cross-validation (about a minute alone on 2 cores, several beside
# other tests): make test runs it, make test-fast leaves it out
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_own_runs_pull_the_backend_toward_what_the_box_measured(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    db, out = tmp_path / "r.db", tmp_path / "mine.toml"
    # 1.3x the packaged estimate: the box is faster than the fit says, yet under its physical ceiling (tg128 at
    # depth 0: 127 tok/s against the estimate's 88; 1.6x would be 141, a measurement no box can make)
    _depth_run(Store(db), SCALE)
    assert main(["calibrate", "--runs", "my-strix", "--hardware", BOX, "--model", MODEL, "--out", str(out),
                 "--db", str(db)]) == 0
    assert "6 measurements from 1 run of your own" in capsys.readouterr().out
    packaged = Calibration.packaged()
    mine = Calibration.from_toml(out.read_text(), origin=str(out))
    assert "anchored on 6 measurements of your own" in mine.efficiency("llamacpp-vulkan").source
    for d in (0, 8192, 32768):
        measured = SCALE * _decode(packaged, d)
        assert measured < _setup(packaged).decode(d + 64).rate()[0]  # under the ceiling
        # anchored: at least halfway from the packaged estimate to what the box measured
        assert abs(_decode(mine, d) - measured) < 0.5 * abs(_decode(packaged, d) - measured), d
    # other backends keep their published fit
    assert mine.efficiency("llamacpp-cuda").eta_w == pytest.approx(packaged.efficiency("llamacpp-cuda").eta_w,
                                                                    rel=1e-6)
    assert main(["predict", "--hardware", BOX, "--model", MODEL, "--weights", WEIGHTS, "--kv", KV, "--engine",
                 ENGINE, "--test", "tg128", "--calibration", str(out)]) == 0
    said = " ".join(capsys.readouterr().out.split())  # predict says which calibration it used
    assert "anchored on 6 measurements of your own (run:my-strix)" in said and f"calibration {out}" in said


def test_calibrate_runs_refuses_what_it_cannot_place(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db, out = str(tmp_path / "r.db"), str(tmp_path / "o.toml")
    _depth_run(Store(db), 1.0)
    assert main(["calibrate", "--runs", "my-strix", "--out", out, "--db", db]) == 2
    assert "--runs needs --hardware ID and --model ID" in capsys.readouterr().err
    assert main(["calibrate", "--hardware", BOX, "--out", out, "--db", db]) == 2
    assert "go with --runs" in capsys.readouterr().err
    assert main(["calibrate", "--runs", "nothing", "--hardware", BOX, "--model", MODEL, "--out", out,
                 "--db", db]) == 2
    assert "no run 'nothing'" in capsys.readouterr().err
    # a run that says it ran on another box: an AMD GPU's figures never calibrate an H100's backend
    assert main(["calibrate", "--runs", "my-strix", "--hardware", "nvidia-h100-sxm", "--model", MODEL, "--out", out,
                 "--db", db]) == 2
    assert "ran on 'Radeon 8060S Graphics (RADV GFX1151)', an AMD device, not nvidia-h100-sxm" in \
        capsys.readouterr().err
    Store(db).save_run("pub-run", "depth", "pub", {"label": "pub", "hardware": "nvidia-rtx-4090", "engine": "llama.cpp",
                                                   "weights": WEIGHTS}, "imported", [], "0", "2026-01-01T00:00:00",
                       "2026-01-01T00:10:00")
    assert main(["calibrate", "--runs", "pub", "--hardware", BOX, "--model", MODEL, "--out", out, "--db", db]) == 2
    assert f"run pub-run ran on nvidia-rtx-4090, not {BOX}" in capsys.readouterr().err
    assert not Path(out).exists()


# a full calibration fit with its cross-validation (about a minute alone on 2 cores, several beside
# other tests): make test runs it, make test-fast leaves it out
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_calibrate_runs_checks_the_run_against_what_it_says_of_itself(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    # llama-bench's own record of a Strix Halo run: Vulkan, gpt-oss-20b-Q4_K_M.gguf, pp512 and tg128 at 0 and 32K
    db, out = str(tmp_path / "r.db"), str(tmp_path / "o.toml")
    data = Path(__file__).resolve().parent / "data" / "llama_bench.json"
    assert main(["import", str(data), "--label", "lb", "--db", db]) == 0
    base = ["calibrate", "--runs", "lb", "--out", out, "--db", db]
    for extra, says in [
        (["--hardware", BOX, "--model", "llama-3.1-8b"], "which is gpt-oss-20b, not llama-3.1-8b"),
        (["--hardware", BOX, "--model", MODEL, "--engine", "vllm"], "ran on llama.cpp vulkan, not vllm"),
        (["--hardware", BOX, "--model", MODEL, "--engine", "llama.cpp metal"], "Apple silicon only"),
        (["--hardware", BOX, "--model", MODEL, "--weights", "F16"], "whose weights are Q4_K_M, not F16"),
    ]:
        capsys.readouterr()
        assert main(base + extra) == 2, extra
        assert says in capsys.readouterr().err, extra
        assert not Path(out).exists()
    # the weight format comes from the file's name; another box of the same vendor is warned about
    assert main(base + ["--hardware", "amd-mi300x", "--model", MODEL]) == 0
    said = " ".join(capsys.readouterr().out.split())
    assert "3 of its 3 measurements are under a third of what the packaged calibration predicts on amd-mi300x" in said
    assert main(base + ["--hardware", BOX, "--model", MODEL]) == 0
    out, err = capsys.readouterr()
    assert "under a third" not in out and "one source left out" in err  # said before the half minute's fit
    lines = re.findall(r"(\S+): bandwidth share (.*?)(?= \S+: bandwidth share| wrote )", " ".join(out.split()))
    assert [b for b, text in lines if text.endswith("anchored on your runs")] == ["llamacpp-vulkan"], out


def test_a_measurement_beyond_the_physical_limit_is_not_anchored(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    db, out = tmp_path / "r.db", str(tmp_path / "o.toml")
    _depth_run(Store(db), 3.0)  # 3x the packaged decode: above the box's ceiling (127 tok/s at depth 0)
    assert main(["calibrate", "--runs", "my-strix", "--hardware", BOX, "--model", MODEL, "--out", out,
                 "--db", str(db)]) == 2
    err = capsys.readouterr().err
    assert "beyond the physical limit of gpt-oss-20b (Q4_K_M) on amd-ryzen-ai-max-395" in err
    # the limit in the measurement's unit, where it stood bare ("(36.34)")
    assert re.search(r"measured [\d.]+ (tok/s|ms), beyond .* \([\d.]+ \1\)", err), err
