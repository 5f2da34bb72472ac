"""What the two sides of a comparison are: their names, their models and weight formats, the shapes a prediction
assumed, and the warnings where they differ (a ratio compares boxes only for the same model shape)."""

from __future__ import annotations

import re

from ..engines.tiny import model_name as embedded_name
from ..predict.formats import WEIGHT_BPW
from ..results import Manifest, RunResult


def run_name(res: RunResult) -> str:
    return str(res.manifest.label or res.run_id)


#: Weight formats a served name or a model file carries after the model's own name, beside the catalog's: Unsloth's
#: dynamic quants (UD-Q4_K_XL), ternary GGUFs, gpt-oss's MXFP4_MOE, MLX's 4bit/8bit, FP8-dynamic checkpoints.
_NAMED_FORMATS = sorted({f.lower() for f in WEIGHT_BPW} | {f"q{b}_k_xl" for b in range(2, 9)} |
                        {"tq1_0", "tq2_0", "mxfp4_moe", "4bit", "8bit", "fp8-dynamic", "int4", "w4a16"},
                        key=len, reverse=True)
#: One suffix that says how a model is stored, not which model it is: a format (after an optional "UD-"), a
#: split file's part ("-00001-of-00003"), an importance-matrix tag, the extension.
FORMAT_SUFFIX = re.compile(r"[-_.:](?:ud-)?(?P<format>" + "|".join(map(re.escape, _NAMED_FORMATS)) +
                           r")$|[-_.](?:\d{5}-of-\d{5}|imat(?:rix)?|gguf)$")


#: A format's other spellings, as the catalog names it.
_FORMAT_ALIASES = {"MXFP4_MOE": "MXFP4", "FP8-DYNAMIC": "FP8", "4BIT": "MLX4", "8BIT": "MLX8"}


def model_identity(name: str) -> tuple[str, str | None]:
    """A model name as the catalog and a server's listing both spell it (no organisation, no case, no format
    suffix: Qwen/Qwen3.6-27B-FP8, gpt-oss-20b-UD-Q4_K_XL.gguf, qwen3-8b:q4_k_m), and the weight format its
    suffix named, if any. A suffix that is no known format (model-q4_instruct, kimi-k2-q3) stays in the name."""
    key, weights = name.strip().lower().rsplit("/", 1)[-1], None
    while (m := FORMAT_SUFFIX.search(key)) is not None:
        said = (m.group("format") or "").upper()
        weights = weights or _FORMAT_ALIASES.get(said, said) or None
        key = key[: m.start()]
    return key, weights


def _model_name(m: Manifest) -> str | None:
    """The model a run's side ran, by the name that identifies it: a llama-bench import's model file (llama.cpp's
    own description of it, "gpt-oss 20B Q4_K - Medium", is no served name or catalog id); the embedded engine's
    model (Transformers serve lists it by its folder's path, llama-server by its alias); else the served name, the
    embedded model's own where a server of ``engines serve`` served it by its folder's path."""
    if isinstance(m.extra.get("model_file"), str):
        return str(m.extra["model_file"])
    if m.embedded is not None and isinstance(m.embedded.get("model"), str):
        return str(m.embedded["model"])
    return embedded_name(m.model) if m.model else m.model


def model_warnings(ma: Manifest, mb: Manifest, why: str = "a ratio compares boxes only for the same model shape"
                   ) -> list[str]:
    """Different models, or different weight formats, on the two sides; ``why`` says what that takes from the
    comparison."""
    out = []
    names = [_model_name(m) for m in (ma, mb)]
    ids = [model_identity(n) if n else ("", None) for n in names]
    if all(names) and ids[0][0] != ids[1][0]:
        out.append(f"the two sides ran different models ({names[0]} vs {names[1]}): {why}")
    # the format a run states, else the one its model's name carries (a llama-bench import states none)
    fa, fb = ((m.weights or i[1] or "").upper().replace("-", "_") or None for m, i in ((ma, ids[0]), (mb, ids[1])))
    if fa and fb and fa != fb:
        out.append(f"the two sides ran different weight formats ({fa} vs {fb}): {why}")
    return out


def one_run(a: RunResult, b: RunResult) -> bool:
    """A and B are the same stored run (compare demo demo): said once, not twice."""
    return bool(a.run_id) and a.run_id == b.run_id


def condition_warnings(a: RunResult, b: RunResult) -> list[str]:
    """A side that did not run to its end, or ran where its guard found other work: a ratio then says as much of
    that as of the boxes (two runs of one command on one box read "B 1.17x", "A 1.37x" without a word of it)."""
    out = []
    same = one_run(a, b)
    if same:
        out.append(f"A and B are one run ({a.run_id}): every ratio reads 1")
    for r in (a,) if same else (a, b):
        if r.status not in ("complete", ""):
            out.append(f"{run_name(r)} was {r.status}: its figures are of the levels it finished")
        levels = [s for o in r.outcomes if (s := o.serving) is not None]
        dirty = sum("dirty_bench" in s.flags for s in levels)
        if dirty:
            out.append(f"{run_name(r)}: {dirty} of {len(levels)} levels ran where the guard found the machine busy "
                       "(dirty_bench): other work's share is in its figures")
        bound = sum("client_bound" in s.flags for s in levels)
        if bound:
            out.append(f"{run_name(r)}: {bound} of {len(levels)} levels had the client as a limit (client_bound): "
                       "their timings read late")
    return out


def shape_warnings(a: RunResult, b: RunResult) -> list[str]:
    ma, mb = a.manifest, b.manifest
    out = model_warnings(ma, mb) + condition_warnings(a, b)
    wa, wb = ma.workload or {}, mb.workload or {}
    la = (wa.get("input_len"), wa.get("output_len"))
    lb = (wb.get("input_len"), wb.get("output_len"))
    if all(la) and all(lb) and la != lb:
        out.append(f"the workloads differ ({la[0]}/{la[1]} vs {lb[0]}/{lb[1]} tokens in/out)")
    # what a prediction assumed (GPUs, slots, micro-batch, flash attention, speculation) is part of what it compares
    sa, sb = (", ".join([m.box or "", *m.shape_parts]) for m in (ma, mb))
    if ma.shape and mb.shape and sa != sb:
        out.append(f"the two predictions assume different shapes ({sa} vs {sb})")
    else:
        out += [f"{run_name(r)} assumes {said}" for r, said in ((a, sa), (b, sb))
                if r.manifest.shape and (r.manifest.box != r.manifest.hardware or r.manifest.shape_parts)]
    for r in (a, b):
        if r.predicted_mark:
            out.append(f"{run_name(r)} is {r.predicted_mark}, not measured")
    return out
