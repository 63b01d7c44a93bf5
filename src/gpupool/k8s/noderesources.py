"""What a node has besides CPU, memory and whole cards, as the controller keeps it: the
extended resources gpupool's own pods ask for (``k8s/extended.py``) and the MIG instances on
MIG-mode cards (``k8s/migledger.py``, ``k8s/hami/mig.py``), and the profiles of pending
MIG pods chosen again when those instances change. Mixed into
:class:`~gpupool.k8s.controller.Controller`."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from gpupool.core.errors import InvalidJobError, NotFoundError
from gpupool.core.model import JobId, Placement
from gpupool.k8s.hami.mig import (
    MIG_ALLOCATIONS,
    MigAllocation,
    choose_placement,
    decode_mig_allocations,
)
from gpupool.k8s.parts import ControllerParts
from gpupool.k8s.podview import pod_usage
from gpupool.k8s.translate import TranslateError

__all__ = ["ExtendedAndMigResources"]

log = logging.getLogger("gpupool.k8s")


class ExtendedAndMigResources(ControllerParts):
    """Extended resources and MIG instances (mixed into the controller)."""

    def _asks(self, key: str, pod: Mapping[str, Any]) -> dict[str, int]:
        """The extended resources (not GPUs) gpupool's pod ``key`` asks for."""
        asks = self.extended_asks.get(key)
        if asks is None:  # read once (none asked too: every event of a bound pod asks)
            asks = self.extended.asked(pod_usage(pod).extended)
            self.extended_asks[key] = asks
        return asks

    def _count_mig(self, key: str, obj: Mapping[str, Any], node: str, gone: bool) -> None:
        """The MIG instances a pod bound to a node holds, from its
        ``hami.io/vgpu-mig-allocations`` (gpupool's pods and HAMi's alike)."""
        if gone:
            was = self.mig.drop(key)
            if was is not None:
                self._mig_changed(was)
            return
        text = ((obj.get("metadata") or {}).get("annotations") or {}).get(MIG_ALLOCATIONS)
        if not node or not text or not self.mig.has_mig(node):
            return
        try:
            allocations = decode_mig_allocations(text, f"pod {key}: {MIG_ALLOCATIONS}")
        except TranslateError as exc:
            log.warning("%s", exc)
            return
        if self.mig.take(key, node, allocations, key in self.pod_job):
            self._mig_changed(node)

    def _mig_changed(self, name: str) -> None:
        """The instances on a node's MIG-mode cards changed: the core's counts follow."""
        node = self.nodes_by_name.get(name)
        if node is None or self.sched is None:
            return
        counted = self.mig.counted(node)
        if counted != node:
            self.nodes_by_name[name] = counted
            self.sched.update_node(counted)
            self._dirty.set()

    def _choose_mig_again(self) -> None:
        """Pending pods given MIG profiles are read again once MIG-mode nodes changed: a pod
        whose profiles or card models are now others (a card model came or went) is
        withdrawn and submitted again with them, keeping its place in its queue (it is
        submitted with the time it was first submitted at). What is free on the cards does
        not change the profiles: each card chooses among them as the pod is placed."""
        assert self.sched is not None
        again = []
        since = {p.job.id: p.job.submit_time_s for p in self.sched.pending()}
        for key, req in list(self.requests.items()):
            info = self.jobs.get(self.pod_job.get(key, JobId("")))
            if not req.gpu.mig_profile or info is None or info.running:
                continue
            pod = self.own_pod(key)
            if pod is None:
                continue
            try:
                new = self.read_request(pod)
            except (InvalidJobError, NotFoundError, TranslateError):
                continue  # read again, and refused with the reason, at its admission
            if (new.gpu.mig_choices, new.gpu.models) != (req.gpu.mig_choices, req.gpu.models):
                again.append(key)
                if info.id in since:  # its gang's other pods are admitted again too
                    self.resubmit_at.update(dict.fromkeys(info.pods, since[info.id]))
        for key in again:
            self._pod_ended(key)
        for key in again:
            if key not in self.pod_job and not self._in_gang(key):
                self._admit(key)
        if again:
            self._dirty.set()

    def _mig_placements(self, key: str, p: Placement) -> list[MigAllocation] | str:
        """Where on their cards the placement's MIG instances go, as HAMi chooses (beside
        every instance already there); why not, when one has no free placement (two pods
        of one cycle may have been given overlapping room: the core counts per profile)."""
        node = self.nodes_by_name.get(p.node)
        req = self.requests.get(key)
        if node is None or req is None or not req.containers:
            return f"node {p.node} or the pod's request is no longer known"
        cards = {g.index: g for g in node.gpus}
        out: list[MigAllocation] = []
        for device, s in enumerate(p.shares):
            card = cards.get(s.index)
            profile = (
                None
                if card is None
                else self.mig.profile(str(p.node), card.uuid, s.mig_profile or "")
            )
            if card is None or profile is None:
                return f"card {s.index} of {p.node} offers no MIG profile {s.mig_profile}"
            taken = self.mig.occupied(str(p.node), card.uuid) + [
                a.span for a in out if a.uuid == card.uuid
            ]
            span = choose_placement(profile, taken)
            if span is None:
                return (
                    f"card {card.uuid} has no free placement for a {profile.name} "
                    f"instance beside {sorted(taken)}"
                )
            out.append(
                MigAllocation(
                    req.containers[0].slot, device, card.uuid, profile.name, span[0], span[1]
                )
            )
        return out
