"""Tensor parallelism: one step split Megatron-style over the GPUs of one box, with its all-reduces."""

from __future__ import annotations

from dataclasses import replace

from .roofline import StepCost
from .specs import HardwareSpec, ModelSpec


def tensor_parallel(c: StepCost, m: ModelSpec, hw: HardwareSpec, tp: int, tokens: int) -> StepCost:
    """One step split Megatron-style over ``tp`` GPUs of one box (Shoeybi et al. 2019): each GPU holds 1/tp of
    every layer's weights and of the KV heads (a KV head is never split: with fewer KV heads than GPUs they
    are replicated) and does 1/tp of the arithmetic; each layer then all-reduces its activations twice (after
    attention and after the MLP), ``tokens`` x hidden x 2 bytes each. A ring all-reduce moves 2(tp−1)/tp of
    the buffer over each GPU's link (nccl-tests PERFORMANCE.md, bus bandwidth), NVLink where the box has it,
    else PCIe; it sits on the critical path, so its time adds."""
    if tp <= 1:
        return c
    kv_share = 1 / min(tp, max(1, m.kv_heads))
    link = (hw.nvlink_gbs or hw.pcie_gbs) * 1e9
    ops = 2 * m.layers * c.passes
    comm_bytes = 2 * m.layers * tokens * m.hidden * 2
    return replace(c, t_weights=c.t_weights / tp, t_kv=c.t_kv * kv_share, t_kvq=c.t_kvq * kv_share,
                   t_compute=c.t_compute / tp, t_attention=c.t_attention / tp, t_routed=c.t_routed / tp,
                   t_power=c.t_power / tp, t_deq=c.t_deq / tp, bytes=c.bytes / tp, flops=c.flops / tp,
                   t_unpack=c.t_unpack / tp, t_mmq=c.t_mmq / tp,
                   t_comm=2 * (tp - 1) / tp * comm_bytes / link, comm_ops=ops)
