"""The run JSON (``--json``, ``show --json``) against its published schema, ``src/tokenbench/data/run.schema.json``.

Every stored run shape is made here, cheaply, and validated: sweeps (closed and open loop, repeated, over two
worker processes, with an SLO, one that failed), an agent-session sweep, a trace replay, a capacity search, depth
runs (over HTTP, one cut short by the context, and a llama-bench run), every importer's format, predictions
(serving, depth and sessions; written with ``predict --json`` and read back with ``show --json``), a cold start
and quality runs (tasks and a knob check). The server is the deterministic emitter and llama-bench a stand-in
that prints a sample of its JSON: no real engine. Then the schema is shown to bite: a renamed, missing or
mistyped key is rejected, and its lists of keys are the code's own (``metrics.LEVEL_KEYS``, ``findings.Code``,
``results.Manifest``, ...), so neither can change without the other."""

from __future__ import annotations

import copy
import dataclasses
import json
import stat
import sys
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from tokenbench.guard_results import CheckResult, GuardSnapshot
from tokenbench.cli import main
from tokenbench.engines.launch import free_port
from tokenbench.emitter import BackgroundEmitter, EmitterConfig
from tokenbench.finding import Code, Finding
from tokenbench.keyed import key_types
from tokenbench.distribution import Distribution
from tokenbench.client_report import ClientReport
from tokenbench.levels import LEVEL_KEYS, SessionStats, Telemetry, TurnPoint
from tokenbench.quality.items import Item
from tokenbench.replay_stats import ContextBin, ReplayStats
from tokenbench.steady import Plateau, Waves, WaveSize
from tokenbench.results import Manifest
from tokenbench.slo import SloCheck

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).resolve().parent / "data"
SCHEMA_FILE = ROOT / "src" / "tokenbench" / "data" / "run.schema.json"
QUIET = ["--quiet", "--input-len", "16", "--output-len", "8"]


def schema() -> dict[str, Any]:
    return json.loads(SCHEMA_FILE.read_text())


def validator() -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(schema())


class Runs:
    """Runs the commands, each writing its JSON into ``out``, all stored in one database."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.db = str(out / "runs.db")
        self.docs: dict[str, dict[str, Any]] = {}

    def run(self, name: str, argv: list[str], code: int = 0) -> None:
        path = self.out / f"{name}.json"
        got = main([*argv, "--db", self.db, "--json", str(path)])
        assert got == code, (name, got)
        self.docs[name] = json.loads(path.read_text())

    def show(self, name: str, run: str) -> None:
        self.run(name, ["show", run, "--all"])

    def load(self, argv: list[str]) -> None:
        assert main([*argv, "--db", self.db]) == 0, argv


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    r = Runs(tmp_path_factory.mktemp("shapes"))
    with BackgroundEmitter(EmitterConfig()) as em:
        # the guard at its default (warn): every level keeps its snapshot
        r.run("sweep", ["sweep", "--url", em.url, "--concurrency", "1,2", "--requests", "4", "--label", "box",
                        "--slo", "ttft_p99=2s,tpot=50ms", "--price-per-hour", "2", *QUIET])
        r.show("sweep, show --json", "box")
        off = ["--guard", "off", *QUIET]
        r.run("open loop, repeated", ["sweep", "--url", em.url, "--rate", "20", "--requests", "4",
                                      "--repetitions", "2", *off])
        r.run("two workers", ["sweep", "--url", em.url, "--concurrency", "4", "--requests", "8", "--workers", "2",
                              *off])
        r.run("sessions", ["sweep", "--url", em.url, "--sessions", "2", "--turns", "2", "--tool-len", "8",
                           "--shared-prefix", "8", "--label", "agents", "--guard", "off", "--quiet",
                           "--input-len", "16", "--output-len", "4"])
        r.show("sessions, show --json", "agents")
        r.run("trace replay", ["sweep", "--url", em.url, "--trace", str(ROOT / "examples" / "mooncake-trace.jsonl"),
                               "--trace-block", "64", "--trace-speed", "8", "--requests", "4", "--warmup", "0",
                               "--guard", "off", "--quiet"])
        r.run("agent replay", ["sweep", "--url", em.url, "--trace",
                               str(ROOT / "examples" / "trajectories" / "weka-claude-code.json"), "--max-think", "0s",
                               "--concurrency", "1", "--label", "replay", "--guard", "off", "--quiet"])
        r.show("agent replay, show --json", "replay")
        r.run("dataset", ["sweep", "--url", em.url, "--dataset", str(DATA / "prompts.jsonl"), "--requests", "4",
                          "--output-len", "8", "--guard", "off", "--quiet"])
        r.run("capacity", ["capacity", "--url", em.url, "--slo", "ttft_p90=1s", "--concurrency", "1:2",
                           "--requests", "4", "--label", "cap", *off])
        r.show("capacity, show --json", "cap")
        em.configure(slot_ctx=2048)  # looks like llama-server with -c 2048: depth 4k does not fit
        r.run("depth", ["depth", "--url", em.url, "--depths", "0,1k,4k", "--pp", "16", "--tg", "4",
                        "--repetitions", "2", "--guard", "off", "--no-metrics"], code=5)  # partial: 4k is skipped
        r.run("quality", ["quality", "--url", em.url, "--tasks", "agreement,niah", "--items", "2", "--contexts",
                          "200", "--depths", "50", "--timeout", "5s", "--label", "q"])
        r.show("quality, show --json", "q")
        r.run("quality knob", ["quality", "knob", "--url", em.url, "--param", "temperature=0,1", "--items", "2"])
    with BackgroundEmitter(EmitterConfig(fault="http500", fault_from=1)) as em:  # the check request passes
        r.run("sweep that failed", ["sweep", "--url", em.url, "--concurrency", "1", "--requests", "4", *off], code=5)
    fake = r.out / "llama-bench"  # llama-bench's JSON, printed by a stand-in
    fake.write_text(f"#!{sys.executable}\nprint(open({str(DATA / 'llama_bench.json')!r}).read())\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    r.run("depth --llama-bench", ["depth", "--llama-bench", str(fake), "--model-file", "gpt-oss-20b-Q4_K_M.gguf",
                                  "--depths", "0,32k"])
    port = free_port()
    r.run("coldstart", ["coldstart", "--cmd", f"{sys.executable} -m tokenbench.emitter --port {{port}}", "--url",
                        f"http://127.0.0.1:{port}/v1", "--repeat", "1", "--label", "boot"])
    r.show("coldstart, show --json", "boot")
    r.run("predict", ["predict", "--hardware", "nvidia-h100-sxm", "--model", "qwen3.6-27b", "--weights", "FP8",
                      "--kv", "fp8", "--engine", "vllm", "--input-len", "4096", "--output-len", "512",
                      "--concurrency", "1,16", "--save", "pred"])
    r.show("predict, show --json", "pred")
    r.run("predict --test depth", ["predict", "--hardware", "amd-ryzen-ai-max-395", "--model", "gpt-oss-20b",
                                   "--engine", "llama.cpp", "--kv", "q8_0", "--test", "depth", "--depth", "0,32k"])
    r.run("predict --sessions", ["predict", "--hardware", "nvidia-h100-sxm", "--model", "gpt-oss-20b", "--weights",
                                 "MXFP4", "--sessions", "--turns", "3", "--concurrency", "1,2", "--save", "pred-s"])
    r.show("predict --sessions, show --json", "pred-s")
    for name in ("vllm_serve_result.json", "llama_bench.json", "llama_bench.jsonl", "llama_bench.csv",
                 "guidellm_benchmarks.json"):
        r.load(["import", str(DATA / name), "--label", f"import-{name}"])
        r.show(f"import {name}", f"import-{name}")
    for name in IMPORTED:
        r.load(["import", str(DATA / name), "--label", f"import-{_shape(name)}"])
        r.show(f"import {_shape(name)}", f"import-{_shape(name)}")
    r.load(["import", str(ROOT / "src" / "tokenbench" / "data" / "published.csv"), "--label", "pub"])
    r.show("import published.csv", "pub/a30/gpt-oss-20b/Q4_K_M")
    return r.docs


#: Other tools' outputs (tests/data/README.md): each import's shape, per-request ones with their requests.
IMPORTED = ("aiperf/profile_export_aiperf.json", "aiperf/profile_export.jsonl", "vllm_serve_detailed.json",
            "inference_perf/per_request_lifecycle_metrics.json", "llama_benchy.json", "llama_benchy.csv",
            "llama_benchy.md", "inferencex_agg.json")


def _shape(name: str) -> str:
    """An imported file's shape name (its path in tests/data, without the folder's slash)."""
    return name.replace("/", " ")


SHAPES = ["sweep", "sweep, show --json", "open loop, repeated", "two workers", "sessions", "sessions, show --json",
          "trace replay", "agent replay", "agent replay, show --json", "dataset", "capacity", "capacity, show --json", "depth", "quality", "quality, show --json",
          "quality knob", "sweep that failed", "depth --llama-bench", "coldstart", "coldstart, show --json",
          "predict", "predict, show --json", "predict --test depth", "predict --sessions",
          "predict --sessions, show --json", "import vllm_serve_result.json", "import llama_bench.json",
          "import llama_bench.jsonl", "import llama_bench.csv", "import guidellm_benchmarks.json",
          "import published.csv", *(f"import {_shape(n)}" for n in IMPORTED)]


def test_the_schema_is_valid_json_schema_and_ships_with_the_package() -> None:
    jsonschema.Draft202012Validator.check_schema(schema())
    shipped = resources.files("tokenbench") / "data" / "run.schema.json"
    assert json.loads(shipped.read_text()) == schema()


def test_every_shape_was_made(runs: dict[str, dict[str, Any]]) -> None:
    assert sorted(runs) == sorted(SHAPES)
    kinds = {d["kind"] for d in runs.values()}
    assert kinds == {"sweep", "depth", "bench", "coldstart", "predict", "quality"}
    assert {d["status"] for d in runs.values()} >= {"complete", "partial", "failed"}


@pytest.mark.parametrize("shape", SHAPES)
def test_every_run_shape_meets_the_schema(runs: dict[str, dict[str, Any]], shape: str) -> None:
    errors = sorted(validator().iter_errors(runs[shape]), key=lambda e: list(e.absolute_path))
    assert not errors, "\n".join(f"{list(e.absolute_path)}: {e.message}" for e in errors[:10])


def test_the_shapes_carry_what_the_schema_describes(runs: dict[str, dict[str, Any]]) -> None:
    """So the validations above are not vacuous: the optional parts appear somewhere."""
    levels = [lv for d in runs.values() for lv in d["levels"]]
    assert any(lv["guard"] for lv in levels) and any(lv["telemetry"] for lv in levels)
    assert any(lv["session"] for lv in levels) and any(lv["slo_checks"] for lv in levels)
    assert any(lv.get("repetitions") for lv in levels) and any(lv["client"].get("workers") for lv in levels)
    assert any(lv["e2e_failed_ms"] and lv["e2e_failed_ms"]["n"] for lv in levels)
    assert any(lv["pp_tps"] for lv in levels) and any(lv["status"] == "skipped" for lv in levels)
    assert any(lv["findings"] for lv in levels) and any(lv["send_delay_ms"] for lv in levels)
    assert runs["capacity"]["capacity"]["levels"] and runs["quality knob"]["knob"]["effects"]
    assert runs["quality"]["items"] and runs["coldstart"]["manifest"]["boots"] and runs["predict"]["band_pct"]
    assert runs["predict --sessions"]["tables"]
    assert runs["import aiperf profile_export.jsonl"]["manifest"]["definitions"]["tpot_ms"]
    assert runs["import llama_benchy.json"]["manifest"]["tool_version"] == "0.4.0"


# --- the schema bites ------------------------------------------------------------------------------------------

def _mutated(doc: dict[str, Any], change: Any) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    change(out)
    return out


def _rename(d: dict[str, Any], old: str, new: str) -> None:
    d[new] = d.pop(old)


MUTATIONS = {
    "a level key renamed": lambda d: _rename(d["levels"][0], "ttft_ms", "ttft"),
    "a level key missing": lambda d: d["levels"][0].pop("per_agent_tps"),
    "a top-level key renamed": lambda d: _rename(d, "run_id", "id"),
    "a key of another kind of run": lambda d: d.__setitem__("items", []),
    "a distribution's key renamed": lambda d: _rename(d["levels"][0]["ttft_ms"], "p50", "median"),
    "a distribution's key missing": lambda d: d["levels"][0]["e2e_ms"].pop("p99"),
    "a count as a string": lambda d: d["levels"][0].__setitem__("completed", "4"),
    "a rate as a string": lambda d: d["levels"][0].__setitem__("output_throughput_tps", "fast"),
    "a flag misspelt": lambda d: d["levels"][0]["flags"].append("client_bnd"),
    "a finding's key renamed": lambda d: _rename(d["levels"][0]["findings"][0], "remedy", "advice"),
    "an SLO check's key missing": lambda d: d["levels"][0]["slo_checks"][0].pop("p_value"),
    "a guard check of another shape": lambda d: d["levels"][0]["guard"]["checks"][0].pop("advice"),
    "a telemetry key misspelt": lambda d: _rename(d["levels"][0]["telemetry"], "samples", "sample"),
    "a level's status unknown": lambda d: d["levels"][0].__setitem__("status", "done"),
    "the run's kind unknown": lambda d: d.__setitem__("kind", "benchmark"),
    "a measured run's command missing": lambda d: d["manifest"].pop("command"),
    "a manifest key of another type": lambda d: d["manifest"].__setitem__("seed", "7"),
    "the tool renamed": lambda d: d.__setitem__("tool", "tokenbench2"),
}


@pytest.mark.parametrize("what", list(MUTATIONS))
def test_a_mutated_sweep_is_rejected(runs: dict[str, dict[str, Any]], what: str) -> None:
    doc = runs["sweep"]
    assert not list(validator().iter_errors(doc))
    assert list(validator().iter_errors(_mutated(doc, MUTATIONS[what]))), what


def test_mutated_runs_of_the_other_kinds_are_rejected(runs: dict[str, dict[str, Any]]) -> None:
    v = validator()
    bad = [
        _mutated(runs["sessions"], lambda d: _rename(d["levels"][0]["session"], "cached_share", "cache_share")),
        _mutated(runs["sessions"], lambda d: d["levels"][0]["session"]["turns"][0].pop("ttft_ms")),
        _mutated(runs["agent replay"], lambda d: _rename(d["levels"][0]["replay"], "trees", "sessions")),
        _mutated(runs["agent replay"], lambda d: d["levels"][0]["replay"]["by_context"][0].pop("ttft_ms")),
        _mutated(runs["quality"], lambda d: d.pop("items")),
        _mutated(runs["quality"], lambda d: _rename(d["items"][0], "key", "pair")),
        _mutated(runs["capacity"], lambda d: _rename(d["capacity"], "first_fail", "first_failure")),
        _mutated(runs["coldstart"], lambda d: d["manifest"].pop("boots")),
        _mutated(runs["coldstart"], lambda d: _rename(d["manifest"]["boots"][0], "healthy_s", "healthy")),
        _mutated(runs["coldstart"], lambda d: d.__setitem__("boots", d["manifest"]["boots"])),  # one shape: show's
        _mutated(runs["predict"], lambda d: d["manifest"].pop("hardware")),
        _mutated(runs["predict"], lambda d: d.__setitem__("predicted", False)),
        _mutated(runs["depth"], lambda d: _rename(d["levels"][0], "pp_tps", "pp")),
        _mutated(runs["depth"], lambda d: d["levels"][0]["client"].__setitem__("fill", [1.0])),
        _mutated(runs["import vllm_serve_result.json"], lambda d: d["manifest"].pop("imported_from")),
        _mutated(runs["open loop, repeated"], lambda d: d["levels"][0]["repetitions"].pop("ttft_ms_p50")),
    ]
    for doc in bad:
        assert list(v.iter_errors(doc))


# --- the schema's lists are the code's -------------------------------------------------------------------------

def _defs() -> dict[str, Any]:
    return schema()["$defs"]


def _field_names(cls: type) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


def test_a_levels_keys_are_metrics_level_keys() -> None:
    level = _defs()["level"]
    assert level["required"] == [*LEVEL_KEYS, "status"]
    assert set(level["properties"]) == {*LEVEL_KEYS, "status", "repetitions"}


def test_the_flags_are_the_findings_codes() -> None:
    assert _defs()["flag"]["enum"] == [c.value for c in Code]
    assert set(_defs()["finding"]["properties"]) == _field_names(Finding)


def test_each_typed_object_has_its_classes_keys() -> None:
    d = _defs()
    assert set(d["distribution"]["properties"]) == _field_names(Distribution)
    assert set(d["slo_check"]["properties"]) == _field_names(SloCheck)
    assert set(d["check"]["properties"]) == _field_names(CheckResult)
    assert set(d["guard"]["properties"]) == set(key_types(GuardSnapshot))
    assert set(d["client"]["properties"]) == set(key_types(ClientReport))
    assert set(d["telemetry"]["properties"]) == set(key_types(Telemetry))
    assert set(d["manifest"]["properties"]) == set(key_types(Manifest))
    assert set(d["session"]["properties"]) == _field_names(SessionStats)
    assert set(d["turn"]["properties"]) == _field_names(TurnPoint) | {"decode_tps"}
    assert set(d["replay"]["properties"]) == _field_names(ReplayStats)
    assert set(d["context_bin"]["properties"]) == _field_names(ContextBin)
    assert set(d["plateau"]["properties"]) == _field_names(Plateau) | {"duration_s"}
    assert set(d["waves"]["properties"]) == _field_names(Waves)
    assert set(d["waves"]["properties"]["by_size"]["items"]["properties"]) == _field_names(WaveSize)
    assert set(d["item"]["properties"]) == _field_names(Item) - {"prompt"}


def test_docs_results_md_names_every_key_and_links_the_schema() -> None:
    """The contract's page says what every level key, flag and top-level key means."""
    text = (ROOT / "docs" / "results.md").read_text()
    assert "../src/tokenbench/data/run.schema.json" in text
    s = schema()
    names = [*LEVEL_KEYS, *(c.value for c in Code), *s["properties"], *key_types(Manifest)]
    missing = [k for k in names if f"`{k}`" not in text]
    assert not missing, missing
