"""llama.cpp's hybrid offload: the layers that do not fit run on the host at its bandwidth, in sequence with the
GPU's layers (their times add), and a prompt's weights cross PCIe once per micro-batch."""

from __future__ import annotations

from .formats import Quant
from .memory import Fit, UBATCH, total_weight_bytes, weight_bytes
from .roofline import Efficiency, Estimate, decode_cost, decode_time, prefill_cost, prefill_time
from .specs import HardwareSpec, ModelSpec


#: Host memory reached from a GPU-offloading llama.cpp: the CPU runs its layers at this share of the host's
#: bandwidth (published llama.cpp tg128 on EPYC CPUs: 0.30).
CPU_ETA_BW = 0.30
#: PCIe transfers reach this share of the link's nominal rate (80–85% as measured by bandwidth tests).
PCIE_ETA = 0.8


def offload_decode(m: ModelSpec, hw: HardwareSpec, q: Quant, context: int, backend: str, f: Fit,
                   eff: Efficiency, flash_attn: bool = True, mmq: bool = True) -> Estimate:
    """Hybrid llama.cpp split: GPU layers then host layers, in sequence, so the times add."""
    gpu_share = 1 - f.offload_fraction
    c_gpu = decode_cost(m, hw, q, 1, context, backend, on_gpu_fraction=gpu_share, flash_attn=flash_attn, mmq=mmq)
    w = weight_bytes(m, q)
    routed = w["experts"] * (m.top_k / m.experts if m.is_moe else 0.0)
    host_bytes = (w["dense"] + routed) * f.offload_fraction
    t_host = host_bytes / (hw.host_bw_gbs * 1e9)
    ceiling = c_gpu.ceiling + t_host
    return Estimate(ceiling, decode_time(c_gpu, eff) + t_host / CPU_ETA_BW)


def offload_prefill(m: ModelSpec, hw: HardwareSpec, q: Quant, tokens: int, cached: int, backend: str, f: Fit,
                    eff: Efficiency, ubatch: int = UBATCH, flash_attn: bool = True, mmq: bool = True) -> Estimate:
    """With weights on the host, llama.cpp uploads them over PCIe for every micro-batch of the prompt."""
    c = prefill_cost(m, hw, q, tokens, cached, backend, ubatch, flash_attn, mmq)
    host_bytes = total_weight_bytes(m, q) * f.offload_fraction
    t_pcie = c.passes * host_bytes / (hw.pcie_gbs * 1e9)
    return Estimate(c.ceiling + t_pcie, prefill_time(c, eff) + t_pcie / PCIE_ETA)
