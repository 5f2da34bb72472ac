"""The user's own runs as calibration rows (`calibrate --runs`), each checked before it moves a constant.

A run anchors the backend of the box it ran on. Calibrating one box's backend with another box's figures, or
another model's, moves its constants to wherever the two disagree (a Strix Halo run given as an H100 pushed
llama.cpp Vulkan's bandwidth share to its bound). So every run is checked against what it says of itself (the
catalog box of a published or predicted run, the GPU llama-bench recorded, the engine, the model and weight
format its file names) and against physics: a measurement above the physical ceiling of the box and model
named cannot be theirs.
"""

from __future__ import annotations

from .. import registry
from ..errors import UsageError
from ..records import RequestRecord
from ..results import Manifest, RunResult
from ..reader import load_result
from ..store import Store
from .calibration import Calibration
from .priors import backend_key
from .rows import predict_row
from .measured import Row, run_rows
from .formats import GGUF_FORMATS, check_engine
from .specs import Catalog, HardwareSpec, ModelSpec


#: GPU vendors (HardwareSpec.vendor) by the words a device name carries (llama-bench's gpu_info, e.g. "Radeon
#: 8060S Graphics (RADV GFX1151)").
_VENDOR_WORDS = {"nvidia": ("nvidia", "geforce", "rtx", "tesla", "quadro"), "amd": ("amd", "radeon", "instinct"),
                 "apple": ("apple",)}


def _same_box(run_id: str, hardware: str | None, gpu: str | None, hw: HardwareSpec, cat: Catalog) -> None:
    """Refuse a run that says it ran on another box than --hardware. Only what the run itself says counts: a
    published or predicted run's catalog id, an imported llama-bench run's GPU (its vendor); a sweep's own
    machine is the client's, not the server's."""
    if hardware and hardware != hw.id and hardware not in hw.aliases and hardware in cat.hardware:
        raise UsageError(f"run {run_id} ran on {hardware}, not {hw.id}: give --hardware {hardware}, or runs of "
                         f"{hw.id}")
    words = set((gpu or "").lower().replace("(", " ").replace(")", " ").split())
    said = [v for v, w in _VENDOR_WORDS.items() if words & set(w)]
    if len(said) == 1 and hw.vendor != said[0]:
        raise UsageError(f"run {run_id} ran on '{gpu}', an {said[0].upper()} device, not {hw.id}: give the "
                         "--hardware it ran on ('tokenbench hardware' lists them)")


def _norm(text: str) -> str:
    return "".join(ch for ch in text.lower() if ch.isalnum())


def _weights_in(name: str) -> str | None:
    """The GGUF weight format a model file's name carries (gpt-oss-20b-Q4_K_M.gguf: Q4_K_M), the longest match."""
    up = name.upper().replace("-", "_").replace(".", "_")
    found = [f for f in GGUF_FORMATS if f"_{f}_" in f"_{up}_"]
    return max(found, key=len) if found else None


def _same_model(run_id: str, names: list[str], model: ModelSpec, cat: Catalog) -> None:
    """Refuse a run whose own model names (served name, file) name another catalog model than --model (a
    gpt-oss-20b file given as llama-3.1-8b would pull the backend's constants to wherever the shapes disagree)."""
    text = _norm(" ".join(names))
    named = [m for m in cat.models if _norm(m) and _norm(m) in text]
    if named and model.id not in named:
        raise UsageError(f"run {run_id} served {names[-1]}, which is {max(named, key=len)}, not {model.id}: give "
                         f"--model {max(named, key=len)}")


def _physical(run_id: str, rows: list[Row], cat: Catalog) -> str | None:
    """A measurement above the physical ceiling of the box, model and formats named cannot be theirs: refuse it.
    One far below what the packaged calibration predicts is said (the warning returned), not refused: a slow box
    is possible."""
    cal = Calibration.packaged()
    low: list[tuple[float, Row]] = []
    for r in rows:
        res = predict_row(cat, cal, r)
        if res.ceiling is None or res.predicted is None:
            continue
        above = r.value < res.ceiling if r.unit == "ms" else r.value > res.ceiling
        if above:
            raise UsageError(f"run {run_id}: {r.test} at depth {r.depth} measured {r.value:g} {r.unit}, beyond the "
                             f"physical limit of {r.model} ({r.weights}) on {r.hardware} ({res.ceiling:.4g} {r.unit}): it ran "
                             "another box, model or format than --hardware, --model and --weights say")
        share = res.predicted / r.value if r.unit == "ms" else r.value / res.predicted
        if share < 1 / 3:
            low.append((share, r))
    if not low:
        return None
    share, r = min(low, key=lambda x: x[0])
    return (f"run {run_id}: {len(low)} of its {len(rows)} measurements are under a third of what the packaged "
            f"calibration predicts on {r.hardware} ({r.test} at depth {r.depth}: {share:.0%}): check that it ran there")


def _run_engine(given: str | None, run_id: str, ran: str, hw: HardwareSpec) -> str:
    """The engine a run calibrates: --engine, else the run's own; never one the box cannot run or the run did not.
    The registry decides what a name means: a llama-cpp-python run calibrates llama-cpp-python's backend, never
    llama.cpp's server's (they share a family, the prior a backend starts from, not a backend)."""
    engine = given or ran
    if not engine:
        raise UsageError(f"run {run_id} does not say which engine served it: give --engine")
    eng = registry.engine(engine)
    if eng.key_rule == "named" and registry.named_backend(engine) is None:
        engine = f"{eng.name} {hw.default_backend}"  # the box's backend: say --engine otherwise
    check_engine(hw, engine)
    said = registry.find(ran)
    if given and said is not None and (said is not eng or registry.named_backend(ran) is not None and
                                       backend_key(ran, hw.default_backend) != backend_key(engine, hw.default_backend)):
        raise UsageError(f"run {run_id} ran on {ran}, not {given}: give --engine '{ran}'")
    return engine


def _run_weights(given: str | None, run_id: str, m: Manifest) -> str:
    """The weight format: --weights, else the run's own, else its model file's name; never against that name."""
    said = str(m.extra.get("model_file") or m.model or "")
    in_name = _weights_in(said)
    weights = (given or m.weights or m.quant or in_name or "").upper()
    if not weights:
        raise UsageError(f"run {run_id} does not say its weight format: give --weights")
    if in_name and weights.replace("-", "_") != in_name:
        raise UsageError(f"run {run_id} served {said}, whose weights are {in_name}, not {weights}: give "
                         f"--weights {in_name}")
    return weights


def run_requests(store: Store, run: RunResult) -> dict[int, list[RequestRecord]]:
    """Each serving level's successful measured requests, where the run kept them (a measured sweep, a tool's
    per-request export): what its calibration rows are read from (measured.steady_state)."""
    return {o.idx: recs for o in run.outcomes if o.serving is not None
            and (recs := store.request_times(run.run_id, o.idx))}


def own_rows(store: Store, refs: list[str], latest: bool, cat: Catalog, hardware: str | None, model_id: str | None,
             engine: str | None = None, weights: str | None = None, kv: str | None = None) -> tuple[list[Row], list[str]]:
    """The user's stored runs as calibration rows, for the box, model and formats given (each defaulting to what
    the run says of itself), each run checked against what it says (its box, engine, model, weights) and against
    physics; and the warnings to show."""
    if not hardware or not model_id:
        raise UsageError("--runs needs --hardware ID and --model ID: the box they ran on and the catalog model "
                         "they served ('tokenbench hardware', 'tokenbench models')")
    hw = cat.find_hardware(hardware)
    model = cat.find_model(model_id)
    rows: list[Row] = []
    warnings = []
    for ref in refs:
        run = load_result(store, ref, latest=latest, kinds=("sweep", "depth", "bench"), command="calibrate --runs")
        m = run.manifest
        _same_box(run.run_id, m.hardware, m.gpu, hw, cat)
        eng = _run_engine(engine, run.run_id, m.engine or "", hw)
        _same_model(run.run_id, [str(x) for x in (m.model, m.extra.get("model_file")) if x], model, cat)
        gpus = m.extra.get("gpus")
        if isinstance(gpus, int) and gpus > 1:
            raise UsageError(f"run {run.run_id} ran on {gpus} GPUs together (tensor or pipeline parallel): "
                             "calibrate anchors one GPU's constants; give runs of one GPU")
        got = run_rows(run, hw.id, eng, model.id, _run_weights(weights, run.run_id, m), (kv or m.kv or "F16").upper(),
                       requests=run_requests(store, run))
        if not got:
            raise UsageError(f"run {run.run_id} has no level calibration can use (complete, unflagged pp/tg or "
                             "serving levels)")
        if (w := _physical(run.run_id, got, cat)) is not None:
            warnings.append(w)
        rows += got
    return rows, warnings
