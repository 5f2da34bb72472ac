"""A closed loop of agents from the step costs: llama.cpp as one stream, and the batches of vLLM, SGLang and
llama.cpp's server slots through their scheduler (queue.py), with those engines' default token budget per step."""

from __future__ import annotations

from dataclasses import dataclass, field

from .. import registry
from . import queue
from .roofline import Efficiency, Estimate, StepCost, prefill_time
from .specs import HardwareSpec


#: vLLM V1's default token budget per step (max_num_batched_tokens) as its OpenAI server runs: 8192 on GPUs of
#: 70 GiB or more other than the A100 ("Setting large max_num_batched_tokens for A100 reduces throughput, see
#: PR #17885"), 2048 on the rest (vllm/engine/arg_utils.py, EngineArgs.get_batch_defaults, OPENAI_API_SERVER).
VLLM_BATCH_TOKENS = ((70, 8192), (0, 2048))
#: SGLang's chunked_prefill_size by GPU memory: 2048 under 35 GiB (T4, 4080, A10, 4090, 5090), 4096 under 60
#: (A100 40GB, L40), 8192 under 160 (H100, A100 80GB, H200), else 16384 (B200, MI300)
#: (python/sglang/srt/server_args.py, ServerArgs._handle_gpu_memory_settings).
SGLANG_BATCH_TOKENS = ((160, 16384), (60, 8192), (35, 4096), (0, 2048))
#: llama.cpp's server: the logical batch its slots share each step (-b, n_batch; common/common.h's default).
LLAMA_BATCH_TOKENS = 2048
#: mlx_lm.server's prompt tokens per prefill step (--prefill-step-size; mlx_lm's generate default, 2048).
MLX_BATCH_TOKENS = 2048
#: Steps a re-sent prompt misses (queue.RESEND_LAG) on llama.cpp's server: its loop is synchronous
#: (tools/server/server-context.cpp, ``update_slots``: build the batch, decode it, send the tokens, then read the
#: new tasks), so a prompt sent while step k+1 runs joins step k+2.
LLAMA_RESEND_LAG = 1
#: How fast llama.cpp's server copies a slot's KV cache into its host-memory prompt cache (--cache-ram, on by
#: default at 8192 MiB), in GB/s. As it launches a new task its loop first saves every idle slot not yet saved
#: (tools/server/server-context.cpp: "saving idle slot to prompt cache", llama_state_seq_get_data into a new host
#: buffer), and no slot runs meanwhile: under a closed loop, each request pays for saving the state the request
#: before it left in its slot. On one NVIDIA H200 (16 cores; h200-lcpp) a 512-token prompt's TTFT was 121 ms where llama-bench's pp512
#: took 48, and four together 491 ms, four times one: about 70 ms each, serial, for 84 MB of state (640 tokens of an
#: 8B model's f16 KV): 1.2 GB/s. On this project's 2-core CI machine one save of 120.5 MiB a request (its log's)
#: added 283-350 ms to TTFT over three runs, 0.36-0.45 GB/s, and --cache-ram 0 took it out
#: (benchmarks/llama_server_cache_ram.py). The host CPU sets the rate; this is the GPU server's figure.
LLAMA_SAVE_GBS = 1.2


@dataclass(slots=True)
class ServePoint:
    concurrency: int
    ttft_s: Estimate  # median TTFT of the loop's steady state
    tpot_s: Estimate
    throughput: tuple[float, float]  # aggregate output tok/s: (ceiling, estimate)
    per_agent: tuple[float, float]
    notes: list[str] = field(default_factory=list)
    ttft_start_s: Estimate | None = None  # the first cycle (the start's burst): median ...
    ttft_worst_s: Estimate | None = None  # the slowest request, of the start or after (what a p99 sees)


def default_batch_tokens(engine: str, hw: HardwareSpec) -> int:
    """An engine's token budget per step when none is given: vLLM's max_num_batched_tokens, SGLang's
    chunked_prefill_size, by the box's memory per GPU (VLLM_BATCH_TOKENS, SGLANG_BATCH_TOKENS say where from);
    llama.cpp's n_batch (LLAMA_BATCH_TOKENS) for its server's slots; other batching engines (Transformers'
    continuous batching) take vLLM's rule."""
    eng = registry.engine(engine)
    if eng.kind == "sequential":
        return LLAMA_BATCH_TOKENS
    if eng.name == "sglang":
        return next(b for gb, b in SGLANG_BATCH_TOKENS if hw.mem_gb >= gb)
    if eng.name == "mlx":
        return MLX_BATCH_TOKENS
    if "a100" in hw.id:
        return VLLM_BATCH_TOKENS[-1][1]
    return next(b for gb, b in VLLM_BATCH_TOKENS if hw.mem_gb >= gb)


def mixes_prefill(engine: str) -> bool:
    """Whether a step carries prompt chunks beside the running decodes (vLLM V1, Transformers, llama.cpp's server
    slots), or a step with prompts holds nothing else and the decodes wait for it (SGLang without
    --enable-mixed-chunk)."""
    return registry.engine(engine).name != "sglang"


def slot_save(engine: str, state_bytes: float) -> float:
    """Seconds llama.cpp's server spends saving one finished request's slot state (``state_bytes``: its KV cache
    and recurrent state) to its host prompt cache before the next task starts (LLAMA_SAVE_GBS); 0 for other
    engines, which keep no such cache."""
    return state_bytes / (LLAMA_SAVE_GBS * 1e9) if registry.engine(engine).host_prompt_cache else 0.0


def resend_lag(engine: str) -> int:
    """Steps an agent's next prompt misses after its last token (queue.RESEND_LAG for the engines that schedule a
    step ahead, LLAMA_RESEND_LAG for llama.cpp's synchronous server)."""
    return LLAMA_RESEND_LAG if registry.engine(engine).kind == "sequential" else queue.RESEND_LAG


def batch_step(parts: list[StepCost], passes: int = 0) -> StepCost:
    """One engine step running several pieces of work as one forward pass (the decodes of the running
    sequences, prompt chunks), or as ``passes`` micro-batches (llama.cpp splits its batch into -ub tokens each,
    and reads the weights once per micro-batch): the weights are read once per pass (the largest read of any
    part: with MoE, the experts touched by the most tokens), every part's KV traffic, arithmetic and all-reduce
    bytes add, and the per-layer, per-all-reduce and per-expert-matmul fixed costs are paid once per pass."""
    if len(parts) == 1 and passes <= parts[0].passes:
        return parts[0]
    first = parts[0]
    big = max(parts, key=lambda p: p.t_weights / p.passes)
    n = max(passes, 1)
    reads = n / big.passes  # the largest part's weight reads, once per pass of the step

    def add(name: str) -> float:
        return float(sum(getattr(p, name) for p in parts))

    def weight_bytes_of(p: StepCost) -> float:  # bytes ∝ time: every stream of a part is over the same bandwidth
        streams = p.t_weights + p.t_kv + p.t_kvq
        return p.bytes * p.t_weights / streams if streams else 0.0
    return StepCost(big.t_weights * reads, add("t_kv"), add("t_compute"),
                    add("bytes") - sum(weight_bytes_of(p) for p in parts) + weight_bytes_of(big) * reads,
                    add("flops"), add("t_attention"), add("t_kvq"), first.layers, n, first.quantized,
                    max(p.expert_gemms for p in parts), add("t_routed"), add("t_comm"), max(p.comm_ops for p in parts),
                    add("t_power"), max(p.t_deq / p.passes for p in parts) * n, first.cycles,
                    big.t_unpack * reads, add("t_mmq"), first.superblock)


def one_stream(pf: StepCost, t_dec: Estimate, eff: Efficiency, n: int, prompt: int, output: int,
               save: float = 0.0) -> ServePoint:
    """Closed loop of N agents, prompt P, output O, on llama.cpp as one stream (one slot): one request at a time,
    so aggregate throughput stays at the single-stream rate and each agent waits for the others' requests. From
    the prefill cost of one prompt (``pf``) and the time per output token of one sequence at the loop's mean
    context (``t_dec``, speculative decoding already in it); ``save``: seconds the server spends saving the
    previous request's slot before this one starts (slot_save), in its time to first token (a software cost: not
    in the ceiling). Its server's slots (-np) batch: ``serve_queue``. At the start all N arrive at once and the
    k-th waits for the k before it: its median waits for half of the others, its slowest for all of them."""
    t_pf = Estimate(pf.ceiling, prefill_time(pf, eff) + save) if prompt else Estimate(0.0, save)
    t_req = Estimate(t_pf.ceiling + output * t_dec.ceiling, t_pf.estimate + output * t_dec.estimate)

    def after(k: float) -> Estimate:  # a prompt behind k whole requests
        return Estimate(k * t_req.ceiling + t_pf.ceiling, k * t_req.estimate + t_pf.estimate)

    ttft = after(n - 1)
    thr = (output / t_req.ceiling, output / t_req.estimate)
    return ServePoint(n, ttft, t_dec, thr, (thr[0] / n, thr[1] / n), ["one stream at a time: requests queue"],
                      ttft_start_s=after((n - 1) // 2), ttft_worst_s=ttft)


def serve_queue(c: queue.LoopTimes, e: queue.LoopTimes, t_out: Estimate, n: int, output: int) -> ServePoint:
    """A batching engine's closed loop (vLLM, SGLang, llama.cpp's server slots) from its simulated schedule
    (queue.closed_loop) timed with the time of each kind of step it ran (queue.evaluate: ``c`` at the ceiling,
    ``e`` estimated). TTFT:
    the steps from a prompt's arrival to the step that finishes it (queueing behind other prompts' chunks, sharing
    steps with the running decodes), plus ``t_out``, one decode step of one sequence: the first token's way out to
    the client (sampling, detokenising, the stream), which alone makes one agent's TTFT one prefill plus one step.
    TPOT: a request's steps after its first token over its O−1 tokens, so a step that carries a prompt chunk is a
    slower decode step for everyone in it. Throughput: N agents each get O tokens per cycle, the mean time from a
    request's arrival to its last token (Little's law), so it agrees with the TTFT and TPOT it is made of."""
    steps = max(output - 1, 1)
    ttft = Estimate(c.ttft + t_out.ceiling, e.ttft + t_out.estimate)
    tpot = Estimate(c.tpot_steps / steps, e.tpot_steps / steps)
    thr = (n * output / c.cycle, n * output / e.cycle) if output and c.cycle and e.cycle else (0.0, 0.0)
    return ServePoint(n, ttft, tpot, thr, (thr[0] / n, thr[1] / n),
                      ttft_start_s=Estimate(c.ttft_start + t_out.ceiling, e.ttft_start + t_out.estimate),
                      ttft_worst_s=Estimate(c.ttft_worst + t_out.ceiling, e.ttft_worst + t_out.estimate))


def behind_slots(p: ServePoint, n: int, output: int) -> ServePoint:
    """``n`` agents in a closed loop on a server with ``p.concurrency`` slots (llama.cpp -np), ``p`` being
    the saturated loop of that many: the slots stay full, so aggregate throughput is p's, and by Little's law
    each request waits (n/slots − 1) service times for a slot, a service time being slots·O / throughput. At the
    start all n arrive at once: the k-th (from 0) waits for k // slots whole rounds of the slots before its own."""
    b = p.concurrency
    if n <= b:
        return p

    def wait(thr: float, rounds: float | None = None) -> float:
        if thr <= 0 or not output:
            return 0.0
        return (n / b - 1 if rounds is None else rounds) * b * output / thr

    def plus(e: Estimate | None, rounds: float | None = None) -> Estimate:
        e = e or p.ttft_s
        return Estimate(e.ceiling + wait(p.throughput[0], rounds), e.estimate + wait(p.throughput[1], rounds))

    return ServePoint(n, plus(p.ttft_s), p.tpot_s, p.throughput, (p.throughput[0] / n, p.throughput[1] / n),
                      p.notes + [f"{b} slots: {n - b} of {n} requests wait for a free one"],
                      ttft_start_s=plus(p.ttft_start_s, ((n - 1) // 2) // b),
                      ttft_worst_s=plus(p.ttft_worst_s, (n - 1) // b))
