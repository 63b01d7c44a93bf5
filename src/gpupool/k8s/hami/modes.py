"""The cards a pod may take by HAMi's card modes, for work that is not MIG instances.

HAMi 2.10's NVIDIA device plugin registers each card with the node's operating ``mode``
(``hami-core`` by default; ``mig`` or ``mps`` when the node's entry in its config map sets
``operatingMode``). Its scheduler matches a pod's ``nvidia.com/vgpu-mode`` against it in
``checkType``: a card whose mode the annotation does not contain (``strings.Contains``) is
skipped; without the annotation every card may be taken. Beyond that check an ``mps`` card is
counted as a ``hami-core`` one (split count, memory, cores; ``Fit`` has no MPS branch), and
the device plugin serves it through the same non-MIG ``Allocate`` path, with HAMi-core's
limits in the container's environment (its MPS options are a stub in 2.10:
``getMPSOptions`` returns none). So gpupool places slices and whole cards on ``mps`` cards
as HAMi does, and keeps pods off cards of a mode their annotation does not name
(:func:`mode_request`). MIG-mode cards are ``k8s/hami/mig.py``'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from gpupool.core.errors import InvalidJobError
from gpupool.core.model import GpuKind
from gpupool.k8s.hami.mig import VGPU_MODE, allows
from gpupool.k8s.hami.register import HAMI_CORE_MODE, MIG_MODE
from gpupool.k8s.hami.requests import PodRequest

__all__ = ["mode_request"]


def mode_request(
    req: PodRequest, annotations: Mapping[str, str], modes: Mapping[str, str]
) -> PodRequest:
    """``req`` kept to the cards not in MIG mode whose mode ``nvidia.com/vgpu-mode`` names
    (unchanged without the annotation, or for MIG instances and no GPU).

    ``modes``: card UUID -> mode of every card not in ``hami-core`` mode. A pod that may take
    ``hami-core`` cards gets the cards of other modes it may not take as excluded; one that
    may not is given the cards it may take as its only ones. InvalidJobError naming the
    annotation when the cluster has no such card (as for MIG, the pod could never run)."""
    mode = annotations.get(VGPU_MODE)
    if mode is None or req.gpu.kind in (GpuKind.NONE, GpuKind.MIG):
        return req
    if allows(mode, HAMI_CORE_MODE):
        shut = frozenset(u for u, m in modes.items() if m != MIG_MODE and not allows(mode, m))
        if not shut:
            return req
        return replace(req, gpu=replace(req.gpu, excluded_uuids=req.gpu.excluded_uuids | shut))
    allowed = frozenset(
        u
        for u, m in modes.items()
        if m != MIG_MODE
        and allows(mode, m)
        and (not req.gpu.uuids or u in req.gpu.uuids)
        and u not in req.gpu.excluded_uuids
    )
    if not allowed:
        named = sorted({m for m in modes.values() if m != MIG_MODE and allows(mode, m)})
        raise InvalidJobError(
            f"metadata.annotations[{VGPU_MODE}]",
            mode,
            "HAMi gives the pod only cards in a mode it names, and no card of the cluster "
            + (
                f"it may use is in mode {', '.join(named)}"
                if named
                else "outside MIG mode is in a mode it names (hami-core, mps)"
            ),
        )
    return replace(req, gpu=replace(req.gpu, uuids=allowed))
