"""The typed manifest: readers read attributes, the stored JSON and the JSON contract stay as they were."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tokenbench.cli import main
from tokenbench.emitter import BackgroundEmitter
from tokenbench.results import Manifest
from tokenbench.reader import load_result
from tokenbench.store import Store

#: What each writer stores, as it stores it (key order included): a sweep's endpoint manifest, a llama-bench
#: import, a prediction, a cold start, a quality run, and a run stored before most of these keys existed.
WRITTEN: list[dict[str, object]] = [
    {"endpoint": "http://h:8000/v1", "model": "m", "engine": "vllm", "engine_version": "0.11.0",
     "server": {"engine": "vllm", "slots": None}, "embedded": None, "label": "box", "command": "tokenbench sweep",
     "started": "2026-01-01T00:00:00+00:00", "finished": None, "tokenizer": "server /tokenize",
     "check_request": {"ttft_ms": 1.0}, "server_flags": None, "workload": {"input_len": 24, "output_len": 6},
     "request_fields": {"ignore_eos": True}, "load": {"levels": ["concurrency 1"], "workers": {"workers": 1}},
     "price_per_hour": 2, "currency": "EUR", "slo": None, "seed": 7, "machine": {"cpu_count_logical": 2},
     "guard": "warn", "guard_before_run": {"clean": True, "checks": []}, "process": {"pid": 1}},
    {"model": "gpt-oss", "model_file": "x.gguf", "engine": "llama.cpp vulkan", "engine_version": "abc",
     "gpu": "RTX", "cpu": "EPYC", "weights": None, "kv": "f16", "n_gpu_layers": 99, "tool": "llama-bench",
     "provenance": "imported", "imported_from": "/tmp/x.json", "format": "llama-bench", "label": "lb"},
    {"model": "gpt-oss-20b", "weights": "MXFP4", "kv": "FP8", "engine": "vllm", "hardware": "h100",
     "predicted": True, "backend": "cuda", "calibration": "fitted", "calibrated": True, "workload": {},
     "label": None},
    {"command": "tokenbench coldstart", "server_command": "srv --port 1", "endpoint": "http://h/v1",
     "model": "emitter", "boots": [{"n": 1, "healthy_s": 0.5}], "label": None},
    {"endpoint": "http://h/v1", "template_tokens": 9, "seed": 1, "summary": {"niah": {"items": 2}}},
    {"endpoint": "http://old/v1", "model": "m", "started": "2025"},
]


def test_every_written_manifest_reads_back_and_writes_the_same_json() -> None:
    for d in WRITTEN:
        m = Manifest.from_dict(d)
        assert json.dumps(m.to_dict()) == json.dumps(d)  # the same keys, values and order: byte for byte
    sweep = Manifest.from_dict(WRITTEN[0])
    assert (sweep.engine, sweep.seed, sweep.price_per_hour, sweep.currency) == ("vllm", 7, 2, "EUR")
    assert sweep.load == {"levels": ["concurrency 1"], "workers": {"workers": 1}} and sweep.guard == "warn"
    assert sweep.extra == {"process": {"pid": 1}}  # a key Manifest does not name (the store's) is kept whole
    assert sweep.check_request == {"ttft_ms": 1.0}
    imported = Manifest.from_dict(WRITTEN[1])
    assert (imported.gpu, imported.tool, imported.weights, imported.extra["n_gpu_layers"]) == \
        ("RTX", "llama-bench", None, 99)
    assert Manifest.from_dict(WRITTEN[3]).boots == [{"n": 1, "healthy_s": 0.5}]


def test_tokenbench_writes_only_keys_its_manifest_names() -> None:
    """The writing side: keywords, in their order; a misspelt key or a value of another type is an error where it
    is written (the reading side keeps both in ``extra``)."""
    m = Manifest.written(label="box", seed=3, check_request={"ttft_ms": 1.0}, machine={"hostname": "h"})
    assert list(m.to_dict()) == ["label", "seed", "check_request", "machine"] and m.extra == {}
    with pytest.raises(TypeError, match="no key 'price_per_hr'"):
        Manifest.written(label="box", price_per_hr=2.0)
    with pytest.raises(TypeError, match="'seed' takes int, not str"):
        Manifest.written(seed="7")
    with pytest.raises(TypeError, match="'predicted' takes bool, not int"):
        Manifest.written(predicted=1)
    assert Manifest.written(price_per_hour=2).price_per_hour == 2  # an int is a float too


def test_an_older_or_foreign_manifest_is_read_never_a_crash() -> None:
    old = Manifest.from_dict({"model": "m"})
    assert old.engine is None and old.workload is None and old.to_dict() == {"model": "m"}  # nothing added
    # another version's store: a value of another type is never read as the typed attribute, and kept whole
    odd = {"seed": "seven", "price_per_hour": "cheap", "predicted": 1, "machine": "big", "workload": None,
           "calibrated": "yes", "started": 2026}
    m = Manifest.from_dict(odd)
    assert (m.seed, m.price_per_hour, m.predicted, m.machine, m.workload, m.calibrated, m.started) == \
        (None,) * 7
    assert json.dumps(m.to_dict()) == json.dumps(odd)
    assert Manifest.from_dict({"seed": True}).seed is None  # a bool is not a number here
    assert Manifest.from_dict({"price_per_hour": 1.5}).price_per_hour == 1.5
    # an attribute set after reading is written after the keys read
    m = Manifest.from_dict({"model": "m"})
    m.label = "box"
    assert m.to_dict() == {"model": "m", "label": "box"}


def test_a_sweeps_manifest_is_stored_and_written_unchanged(emitter: BackgroundEmitter, tmp_path: Path) -> None:
    """The stored manifest, sweep --json's and show --json's are the same object: the typed manifest changes
    neither the database nor the JSON contract."""
    db, out, shown = tmp_path / "r.db", tmp_path / "s.json", tmp_path / "show.json"
    assert main(["sweep", "--url", emitter.url, "--concurrency", "1", "--requests", "2", "--input-len", "16",
                 "--output-len", "4", "--guard", "off", "--price-per-hour", "3", "--label", "box",
                 "--json", str(out), "--db", str(db), "--quiet"]) == 0
    doc = json.loads(out.read_text())
    row = Store(db, readonly=True).resolve(doc["run_id"])
    stored = dict(row.manifest, provenance=row.provenance)
    assert doc["manifest"] == stored and list(doc["manifest"]) == list(row.manifest) + ["provenance"]
    assert main(["show", doc["run_id"], "--json", str(shown), "--db", str(db)]) == 0
    assert json.loads(shown.read_text())["manifest"] == doc["manifest"]
    res = load_result(Store(db, readonly=True), doc["run_id"])
    assert (res.manifest.label, res.manifest.price_per_hour, res.manifest.endpoint) == ("box", 3, emitter.url)
    assert res.manifest.provenance == "measured" and (res.manifest.check_request or {})["output_tokens"] >= 1
    assert set(res.manifest.extra) <= {"process"}, res.manifest.extra  # every key the sweep wrote is a typed one


@pytest.mark.parametrize("command", [
    ["sweep", "--concurrency", "1,2", "--requests", "4", "--repetitions", "2", "--input-len", "16", "--output-len", "4",
     "--price-per-hour", "3"],
    ["depth", "--depths", "0,1k", "--pp", "32", "--tg", "4"],
    ["capacity", "--slo", "ttft_p90=1s", "--concurrency", "1:2", "--requests", "6", "--input-len", "16",
     "--output-len", "4"]])
def test_a_runs_json_is_the_result_in_hand_and_reads_back_the_same(emitter: BackgroundEmitter, tmp_path: Path,
                                                                   command: list[str]) -> None:
    """sweep, depth and capacity write --json from the result they hold (RunLog.close), not by reading the run
    back; show --json, which reads it back, writes the same document (a capacity search's levels in the order it
    shows them, by value)."""
    db, out, shown = tmp_path / "r.db", tmp_path / "run.json", tmp_path / "show.json"
    quiet = [] if command[0] == "depth" else ["--quiet"]
    assert main([command[0], "--url", emitter.url, *command[1:], "--guard", "off", "--label", "box", "--json", str(out),
                 "--db", str(db), *quiet]) == 0
    doc = json.loads(out.read_text())
    assert main(["show", doc["run_id"], "--all", "--json", str(shown), "--db", str(db)]) == 0
    again = json.loads(shown.read_text())
    if command[0] == "capacity":  # the search's answer too, show --json as capacity --json
        assert again.pop("capacity") == doc.pop("capacity")
        again["levels"].sort(key=lambda lv: lv["concurrency"])
    assert doc == again and list(doc["manifest"])[-1] == "provenance"


def test_an_imported_files_values_are_typed_at_the_boundary(tmp_path: Path) -> None:
    """Importers build their manifest through Manifest.from_dict: a field of the wrong type in a
    foreign file is kept whole, never read as the typed attribute; the typed attributes set on import (its
    provenance, file, format, digest) are stored and read back."""
    from tokenbench.importers import import_file

    doc = json.loads((Path(__file__).parent / "data" / "vllm_serve_result.json").read_text())
    doc["model_id"], doc["base_url"] = 7, "http://h:8000/v1"  # a number where a name belongs
    src = tmp_path / "odd.json"
    src.write_text(json.dumps(doc))
    store = Store(tmp_path / "r.db")
    _, (rid,) = import_file(store, src, "odd")
    m = load_result(store, rid).manifest
    assert m.model is None and m.extra["model"] == 7 and m.endpoint == "http://h:8000/v1"
    assert (m.provenance, m.imported_from, m.format, m.label) == ("imported", str(src), "vllm bench serve", "odd")
    assert m.source_sha256 is not None and len(m.source_sha256) == 64
    assert store.runs_from_source(m.source_sha256) == [rid]  # the store finds it by the digest it wrote


def test_a_stored_prediction_shape_of_any_type_is_read_without_a_crash() -> None:
    from tokenbench.results import Manifest

    odd = Manifest.from_dict({"predicted": True, "hardware": "nvidia-h100-sxm",
                              "shape": {"gpus": "x", "parallel": "8", "speculation": 3}})
    assert odd.box == "nvidia-h100-sxm" and odd.shape_parts == []
    two = Manifest.from_dict({"predicted": True, "hardware": "nvidia-h100-sxm", "shape": {"gpus": 2}})
    assert two.box == "2x nvidia-h100-sxm (tensor parallel)"
