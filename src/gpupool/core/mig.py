"""How much of a card a MIG instance counts for: one rule for every mode and view.

An instance counts for the compute share its card declares for its profile
(``MigInstance.gpu_milli``); a card's use is the sum over the instances held. Where a source
declares no share (a DRA ResourceSlice without ``cores``), the profile's name gives it:
``<g>g.<memory>`` is g of the card's 7 compute slices (NVIDIA's A100/H100 MIG geometry).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from gpupool.core.model import WHOLE_GPU_MILLI, Gpu, GpuKind, GpuRequest, GpuShare

MIG_SLICES = 7
"""Compute slices of a MIG-capable card (A100, H100): a ``<g>g`` profile holds g of them."""

_PROFILE = re.compile(r"([0-9]+)g\.")


def profile_milli(profile: str) -> int:
    """A MIG profile's compute share from its name (``3g.40gb``: 3 of 7 slices); 0 for a name
    that does not say."""
    m = _PROFILE.match(profile)
    return round(WHOLE_GPU_MILLI * int(m.group(1)) / MIG_SLICES) if m else 0


def instance_milli(gpu: Gpu, profile: str) -> int:
    """The share one instance of ``profile`` on ``gpu`` counts for (0 if the card has none)."""
    return next((inst.gpu_milli for inst in gpu.mig if inst.profile == profile), 0)


def instance_mib(gpu: Gpu, profile: str) -> int:
    """The memory one instance of ``profile`` on ``gpu`` holds (0 if the card has none)."""
    return next((inst.memory_mib for inst in gpu.mig if inst.profile == profile), 0)


def share_mib(share: GpuShare, gpu: Gpu) -> int:
    """The memory a placement's share of ``gpu`` holds: its MiB, or for a MIG instance the
    memory its card declares for the profile."""
    return share.memory_mib if share.mig_profile is None else instance_mib(gpu, share.mig_profile)


def taken_milli(gpu: Gpu, taken: Mapping[str, int]) -> int:
    """The compute a MIG card's taken instances count for (``taken``: instances held, by
    profile): the sum of their declared shares, at most a whole card."""
    return min(
        WHOLE_GPU_MILLI, sum(n * instance_milli(gpu, profile) for profile, n in taken.items())
    )


def share_milli(share: GpuShare, gpu: Gpu) -> int:
    """The compute a placement's share of ``gpu`` counts for: its milli-GPU, or for a MIG
    instance the share its card declares for the profile."""
    return share.gpu_milli if share.mig_profile is None else instance_milli(gpu, share.mig_profile)


def request_milli(request: GpuRequest, gpus: Iterable[Gpu]) -> int:
    """The compute one replica asks for: whole cards and slices by their milli-GPU, MIG
    instances by the share the first card of ``gpus`` offering their profile declares."""
    if request.kind is not GpuKind.MIG or request.mig_profile is None:
        return request.total_milli
    profile = request.mig_profile
    return request.mig_instances * next((m for g in gpus if (m := instance_milli(g, profile))), 0)
