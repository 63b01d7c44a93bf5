"""The controller's side of binding: what a bind writes, and what each bind's outcome
means for the core (``k8s/binding.py`` does the writing; this is the host it reports to).

- BOUND: counted; the pod leaves bind backoff.
- ELSEWHERE: someone else bound the pod; the core lets this decision's cards go and takes
  what the other binder recorded.
- REFUSED: the API server refused the bind (a ``409`` other than "bound here already"):
  the pod backs off, then is scheduled again.
- FAILED, GONE: the pod counts as ended for its job; if it still exists it is scheduled
  again.

An outcome for a decision that no longer stands (the pod was deleted and maybe made again
under its name, and is scheduled afresh) changes nothing.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from gpupool.core.errors import ConfigError
from gpupool.core.model import NodeName, Placement
from gpupool.core.placement.framework import Profile
from gpupool.core.placement.registry import (
    DEFAULT_SCORES,
    MEASURED_SCORES,
    default_profile,
    measured_profile,
)
from gpupool.k8s.binding import BindItem, BindOutcome
from gpupool.k8s.jobs import JobInfo
from gpupool.k8s.kube import KubeError
from gpupool.k8s.parts import ControllerParts
from gpupool.k8s.pods import ended
from gpupool.k8s.translate import (
    DEVICES_TO_ALLOCATE,
    PLACEMENT_ANNOTATION,
    hami_annotations,
    placement_annotation,
)
from gpupool.k8s.vendors import BIND_ORDER_STAMP, vendor_annotations

__all__ = ["BIND_QUEUE_WEIGHT", "BindHost", "scheduling_profile"]

BIND_QUEUE_WEIGHT = 1.0
"""The ``bind-queue`` score's weight against ``binpack``'s 1 (see ``core/placement/plugins/
bind_queue.py``): under the node lock a node binds one GPU pod at a time."""


def scheduling_profile(
    node_lock: bool, weight: float = BIND_QUEUE_WEIGHT, *, measured_hot_pct: float | None = None
) -> Profile:
    """The core's profile for the cluster: the default (or, with ``measured_hot_pct``, the
    measured-use profile: ``core.placement.registry.measured_profile``), plus the
    ``bind-queue`` score at ``weight`` when binds take HAMi's node lock (a burst spreads over
    nodes whose lock queues are short instead of waiting in line behind the fullest)."""
    if weight < 0:
        raise ConfigError(
            f"--bind-queue-weight={weight} must be at least 0",
            field="bind_queue_weight",
            value=weight,
            rule="at least 0",
        )
    queue = {"bind-queue": weight} if node_lock and weight > 0 else {}
    if measured_hot_pct is not None:
        return measured_profile(
            hot_pct=measured_hot_pct, scores={**DEFAULT_SCORES, **MEASURED_SCORES, **queue}
        )
    if not queue:
        return default_profile()
    return default_profile(scores={**DEFAULT_SCORES, **queue})


log = logging.getLogger("gpupool.k8s")


class BindHost(ControllerParts):
    """The bind half of :class:`~gpupool.k8s.controller.Controller` (mixed into it)."""

    def _bind_item(
        self,
        key: str,
        p: Placement,
        info: JobInfo,
        flavor: str,
        now: float,
        pod: Mapping[str, Any] | None,
    ) -> BindItem:
        """What binding ``key`` writes: gpupool's record, HAMi's annotations, the hooks'."""
        req = self.requests.get(key)
        node = self.nodes_by_name.get(p.node)
        annotations = {
            PLACEMENT_ANNOTATION: placement_annotation(p, info.queue, flavor, now, info.gang_size)
        }
        annotations["gpupool.io/bound-by"] = self.opt.identity
        if req is not None and node is not None:
            vendor = vendor_annotations(req, p, node, now, pod)  # another vendor's cards
            annotations.update(vendor or hami_annotations(req, p, node, now, self.mig.of(key)))
        if self.elastic is not None:
            annotations.update(self.elastic.bind_annotations(pod or {}, p.node, now))
        if self.provisioning is not None:
            annotations.update(self.provisioning.bind_annotations(info.id))
        uid = self.uids.get(key) or str(((pod or {}).get("metadata") or {}).get("uid") or "")
        # the node lock is for HAMi's device plugin: taken when the pod gets HAMi's device
        # annotations (its cards, or an Elastic consumer's claims' cards), never on nodes
        # whose cards HAMi did not register (no plugin there would release it)
        devices = DEVICES_TO_ALLOCATE in annotations or any(
            k.endswith("-devices-to-allocate") for k in annotations
        )
        stamp = BIND_ORDER_STAMP if BIND_ORDER_STAMP in annotations else ""
        return BindItem(
            key=key,
            uid=uid,
            node=str(p.node),
            annotations=annotations,
            lock=self.opt.node_lock and devices,
            job=str(info.id),
            ordered=bool(stamp),
            stamp=stamp,
        )

    def _report_binds_in_flight(self) -> None:
        """Before a cycle: each node's locked binds still to make, for the ``bind-queue``
        score (nodes whose queue emptied since the last report go back to 0)."""
        if self.sched is None:
            return
        now = self.binder.in_flight()
        counted = self.sched.binds_in_flight()
        for name in counted:
            if name not in now:
                self.sched.set_binds_in_flight(name, 0)
        for node, count in now.items():
            if node in self.nodes_by_name and counted.get(NodeName(node)) != count:
                self.sched.set_binds_in_flight(NodeName(node), count)

    def pod_alive(self, key: str, uid: str) -> bool:
        """The binder asks before it waits for a lock and before it binds: is the pod the
        decision was made for still there (same UID), not ended?"""
        pod = self.pod(key)
        if pod is None or ended(pod):
            return False
        return not uid or (pod.get("metadata") or {}).get("uid") in (None, uid)

    async def _pod_exists(self, namespace: str, name: str) -> bool:
        """Whether a node lock's pod exists (a dangling lock is taken over)."""
        if f"{namespace}/{name}" in self.pod_informer.cache:
            return True
        try:
            await self.kube.request("GET", f"/api/v1/namespaces/{namespace}/pods/{name}")
        except KubeError as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def bind_done(
        self, item: BindItem, outcome: BindOutcome, reason: str, pod: Mapping[str, Any] | None
    ) -> None:
        """The binder's answer for one pod."""
        key = item.key
        if self.pod_job.get(key) != item.job or self.uids.get(key, item.uid) != item.uid:
            # an answer for a decision that no longer stands (the pod was deleted, maybe
            # made again under the same name, and is scheduled afresh): nothing to undo
            log.info("%s: bind for an earlier decision ended %s", key, outcome)
            if outcome is BindOutcome.BOUND:
                self.stats.binds += 1
            return
        if outcome is BindOutcome.BOUND:
            self.stats.binds += 1
            self.stats.bound_at[key] = time.time()
            self.backoff.pop(key, None)
        elif outcome is BindOutcome.ELSEWHERE:
            # someone else bound it: the core lets this decision's cards go and takes
            # whatever the other binder recorded
            self.stats.bound_elsewhere += 1
            log.info("%s was bound elsewhere while binding to %s", key, item.node)
            if self.sched is not None:
                self._pod_ended(key)
                if pod is not None:
                    self._bound_elsewhere(key, pod)
                self._dirty.set()
        elif outcome is BindOutcome.REFUSED:
            self.stats.bind_refusals += 1
            self._back_off(key)
            self._bind_failed(key, reason)
        elif outcome in (BindOutcome.FAILED, BindOutcome.GONE):
            if outcome is BindOutcome.FAILED:
                self.stats.bind_failures += 1
            self._bind_failed(key, reason or None)

    def _bind_failed(self, key: str, reason: str | None) -> None:
        """The pod could not be bound: it counts as ended for its job (whose other pods may
        be bound); if it still exists it is scheduled again (after its backoff)."""
        if self.sched is None:
            return
        self._pod_ended(key)
        pod = self.own_pod(key)
        if pod is not None and not (pod.get("spec") or {}).get("nodeName") and not ended(pod):
            if reason is not None:
                self.status.park(key, reason)
            self._admit(key)
            self._dirty.set()
