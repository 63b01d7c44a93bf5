"""How quantities are said to people, in one place: the units a user writes in a job, never the
core's own (``gpu_milli``, ``memory_mib``, ``cpu_milli``).

Every sentence the core gives a user (pending reasons, quota clauses) says its amounts through
these: GPUs as a count of cards, a slice as a percentage of one card, CPUs as a count, memory
in Gi when it is a whole number of GiB and in Mi otherwise (``20Gi``, ``5000Mi``), as a
Kubernetes quantity is written.
"""

from __future__ import annotations

from gpupool.core.model import WHOLE_GPU_MILLI
from gpupool.core.quota import Resource


def count(n: float) -> str:
    """``1.5``, ``2``, ``0.125``: no trailing zeros."""
    return f"{n:g}"


def mib(amount: int) -> str:
    """MiB as a quantity: ``80Gi`` for whole GiB, ``5000Mi`` otherwise, ``0`` for none."""
    if amount == 0:
        return "0"
    if amount % 1024 == 0:
        return f"{amount // 1024}Gi"
    return f"{amount}Mi"


def cpus(milli: int) -> str:
    """``4 CPUs``, ``0.5 CPUs``, ``1 CPU``."""
    return f"{count(milli / 1000)} CPU{'' if milli == 1000 else 's'}"


def card_share(milli: int) -> str:
    """A slice of one card: ``50% of a card`` (``12.5%`` for finer slices)."""
    return f"{count(100 * milli / WHOLE_GPU_MILLI)}% of a card"


def gpus(n: float) -> str:
    return f"{count(n)} GPU{'' if n == 1 else 's'}"


_NAMES = {
    Resource.GPU: "GPUs",
    Resource.GPU_MILLI: "GPUs",
    Resource.GPU_MEMORY_MIB: "GPU memory",
    Resource.CPU_MILLI: "CPU",
    Resource.MEMORY_MIB: "memory",
    Resource.NORMALIZED_MILLI: "normalised GPUs",
}


def resource_name(res: Resource) -> str:
    """How a quota resource is named in a sentence: ``GPUs``, ``GPU memory``, ``CPU``."""
    return _NAMES.get(res, str(res))


def amount(res: Resource, value: int) -> str:
    """An amount of a quota resource as a user writes it: ``6 GPUs`` (from 6000 milli-GPU or
    from 6 cards), ``4 CPUs``, ``16Gi``."""
    value = max(value, 0)
    if res is Resource.GPU_MILLI:
        return gpus(value / WHOLE_GPU_MILLI)
    if res is Resource.NORMALIZED_MILLI:
        return f"{count(value / WHOLE_GPU_MILLI)} normalised GPUs"
    if res is Resource.GPU:
        return gpus(value)
    if res is Resource.CPU_MILLI:
        return cpus(value)
    return mib(value)
