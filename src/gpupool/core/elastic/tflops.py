"""Published tensor peaks of common GPU models, and TFLOPS requests turned into cards or slices.

A claim may ask for compute as TFLOPS ("100 TFLOPS") instead of cards. It is converted, per GPU
model, with the model's published peak: the **dense FP16/BF16 tensor-core peak**, in TFLOPS,
without the 2:4 structured-sparsity doubling that datasheets print beside it (and, for cards
without BF16, T4 and V100, the FP16 tensor peak with FP32 accumulate). Sources: NVIDIA's product
datasheets (H100 SXM5/PCIe/NVL, A100, A10, L4, L40, L40S, T4, V100/V100S) and, for the RTX A6000,
the NVIDIA Ampere GA102 architecture whitepaper; where a datasheet gives only the sparse figure
(marked ``*`` there), the figure here is half of it. These are marketing peaks at boost clock:
a claim converted with them asks for a share of a card, not for a measured throughput.

Model names are matched loosely, since clusters spell them differently (``A100``,
``A100-80GB``, ``NVIDIA-A100-SXM4-80GB``, ``Tesla-T4``): see :func:`canonical_model`.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from gpupool.core.model import WHOLE_GPU_MILLI

PEAK_TFLOPS: dict[str, float] = {
    "H100": 989.5,  # H100 SXM5: 1,979 with sparsity
    "H100-PCIe": 756.5,  # 1,513 with sparsity
    "H100-NVL": 835.5,  # 1,671 with sparsity, per GPU
    "A100": 312.0,  # SXM4 and PCIe, 40 and 80 GB
    "A10": 125.0,
    "L4": 121.0,  # 242 with sparsity
    "L40": 181.05,
    "L40S": 362.05,
    "T4": 65.0,  # FP16 mixed precision; no BF16
    "V100": 125.0,  # SXM2; no BF16
    "V100-PCIe": 112.0,
    "V100S": 130.0,
    "RTX-A6000": 154.8,  # GA102 whitepaper, FP16/BF16 with FP32 accumulate
}
"""Dense FP16/BF16 tensor-core peak per model, TFLOPS (see the module docstring)."""

PRECISION = "dense FP16/BF16 tensor-core peak, without sparsity"

# Most specific first: "H100 PCIe" before "H100", "L40S" before "L40" before "L4".
_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (name, re.compile(rx))
    for name, rx in (
        ("H100-PCIe", r"H100.*PCIE"),
        ("H100-NVL", r"H100.*NVL"),
        ("H100", r"H100"),
        ("A100", r"A100"),
        ("RTX-A6000", r"RTXA6000|(?<![0-9])A6000"),
        ("A10", r"(?<![0-9])A10(?![0-9G])"),
        ("L40S", r"L40S"),
        ("L40", r"L40(?![0-9S])"),
        ("L4", r"(?<![0-9])L4(?![0-9])"),
        ("T4", r"(?<![0-9])T4(?![0-9])"),
        ("V100S", r"V100S(?!XM)"),
        ("V100-PCIe", r"V100.*PCIE"),
        ("V100", r"V100"),
    )
)


def canonical_model(model: str) -> str | None:
    """The table's name for a cluster's spelling of a GPU model; None when it has no entry.

    Case, separators and the words NVIDIA and Tesla are ignored, so ``NVIDIA-A100-SXM4-80GB``
    is ``A100`` and ``Tesla-T4`` is ``T4``.
    """
    text = re.sub(r"[^A-Z0-9]", "", model.upper())
    text = text.replace("NVIDIA", "").replace("TESLA", "")
    for name, rx in _PATTERNS:
        if rx.search(text):
            return name
    return None


def peak_tflops(model: str) -> float | None:
    """The published dense FP16/BF16 tensor peak of ``model``, or None when not known."""
    name = canonical_model(model)
    return None if name is None else PEAK_TFLOPS[name]


@dataclass(frozen=True, slots=True)
class TflopsShare:
    """What ``tflops`` takes on one model: ``cards`` whole cards, or ``gpu_milli`` of one."""

    model: str
    peak_tflops: float
    cards: int
    gpu_milli: int

    @property
    def whole(self) -> bool:
        return self.cards > 0


def convert(tflops: float, model: str) -> TflopsShare | None:
    """TFLOPS as a share of ``model``: up to one card's peak, the milli-GPU of one card that
    holds it (rounded up, at least 1); beyond, the whole cards that hold it (rounded up).
    None when the model's peak is not known."""
    peak = peak_tflops(model)
    if peak is None:
        return None
    if tflops <= peak:
        milli = max(1, math.ceil(WHOLE_GPU_MILLI * tflops / peak - 1e-9))
        if milli >= WHOLE_GPU_MILLI:
            return TflopsShare(model, peak, 1, 0)
        return TflopsShare(model, peak, 0, milli)
    return TflopsShare(model, peak, math.ceil(tflops / peak - 1e-9), 0)
