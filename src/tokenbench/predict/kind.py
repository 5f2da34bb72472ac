"""The kind of a prediction, which its band is kept under: rows of one kind miss by about as much as each other, rows
of another kind may not. A kind is the engine's backend, the class of box, the operating point and the class of
model:

- box class: a datacenter GPU (H100, A100, L40S, MI300X), a consumer or workstation GPU (GeForce, Radeon RX, RTX
  Ada/Ampere workstation cards: GDDR and a desktop's power), a unified-memory APU (Strix Halo, DGX Spark), an
  embedded board (Jetson: tens of watts) or Apple silicon;
- operating point: one stream, or under load (more than one sequence at once);
- model: dense, or mixture of experts.

The held-out predictions of rows of a kind give its band (``fitting.fit_calibration``); a kind with too few rows
borrows the widest band of the kinds one step from it (``neighbours``), and says so.
"""

from __future__ import annotations

from dataclasses import dataclass

from .specs import HardwareSpec, ModelSpec

BOX_CLASSES = ("datacenter", "consumer", "apu", "embedded", "apple")
#: How a box class is said in a note under a table.
BOX_WORDS = {"datacenter": "datacenter GPU", "consumer": "consumer GPU", "apu": "unified-memory APU",
             "embedded": "embedded board", "apple": "Apple silicon"}
#: A unified-memory board at or under this TDP (watts) is an embedded one (Jetson AGX Orin: 60 W), not a desktop APU.
EMBEDDED_TDP_W = 75.0
#: Ids of GPUs sold for desktops and workstations (GDDR, a desktop's power): every other GPU is a datacenter one.
CONSUMER_PREFIXES = ("nvidia-rtx-", "nvidia-geforce-", "amd-radeon-", "intel-arc-")


def box_class(hw: HardwareSpec) -> str:
    """The class of box ``hw`` is (BOX_CLASSES)."""
    if hw.vendor == "apple":
        return "apple"
    if hw.kind != "gpu" or hw.unified:
        return "embedded" if "jetson" in hw.id or (hw.tdp_w is not None and hw.tdp_w <= EMBEDDED_TDP_W) else "apu"
    return "consumer" if hw.id.startswith(CONSUMER_PREFIXES) else "datacenter"


def model_class(m: ModelSpec) -> str:
    return "moe" if m.experts else "dense"


def operating_point(concurrency: int) -> str:
    return "load" if concurrency > 1 else "single"


@dataclass(frozen=True, slots=True)
class Kind:
    backend: str
    box: str
    point: str  # single | load
    model: str  # dense | moe

    @property
    def key(self) -> str:
        """The kind as a calibration file keeps it: ``llamacpp-cuda/consumer/single/dense``."""
        return f"{self.backend}/{self.box}/{self.point}/{self.model}"

    @classmethod
    def parse(cls, key: str) -> Kind:
        backend, box, point, model = key.split("/")
        return cls(backend, box, point, model)

    def words(self) -> str:
        """``llamacpp-cuda on a consumer GPU, one stream, dense``."""
        point = "one stream" if self.point == "single" else "under load"
        return f"{self.backend} on {_article(BOX_WORDS[self.box])}, {point}, {self.model.replace('moe', 'MoE')}"

    def step(self, other: Kind) -> int:
        """How many of the four coordinates differ."""
        return sum(a != b for a, b in zip((self.backend, self.box, self.point, self.model),
                                          (other.backend, other.box, other.point, other.model)))


def _article(words: str) -> str:
    return words if words.startswith("Apple") else ("an " if words.startswith(("a", "e", "i", "o")) else "a ") + words


def kind_of(backend: str, hw: HardwareSpec, m: ModelSpec, concurrency: int) -> Kind:
    return Kind(backend, box_class(hw), operating_point(concurrency), model_class(m))
