"""Pending pods into core jobs: how gpupool reads a pod and submits it.

- a pod's request (``read_request``): HAMi's resource names, MIG (``k8s/hami/mig.py``),
  other vendors' names, Elastic GPU claims; its queue (``resolve_queue``);
- admission (``_admit``): a pod with ``spec.schedulingGates`` waits, told why, until
  ungated; a pod in bind backoff (its last bind was refused) waits out its backoff first;
  a pod of a gang (``gpupool.io/gang`` and its size, or a Job's parallelism) waits for
  the whole gang, which is submitted as one job;
- a pod that can never run as written is rejected with the reason.

Mixed into :class:`~gpupool.k8s.controller.Controller`; pod events (``k8s/pods.py``) call
it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from gpupool.core.errors import ConflictError, InvalidJobError, NotFoundError
from gpupool.core.model import JobId
from gpupool.k8s.constraints import (
    Constraints,
    ignored_constraints,
    pod_constraints,
    scheduling_gates,
)
from gpupool.k8s.hami.mig import VGPU_MODE, allows, mig_request
from gpupool.k8s.hami.modes import mode_request
from gpupool.k8s.hami.register import MIG_MODE
from gpupool.k8s.inventory import inventory
from gpupool.k8s.jobs import JobInfo, job_for_pods
from gpupool.k8s.kube import KubeError
from gpupool.k8s.parts import ControllerParts
from gpupool.k8s.translate import (
    GangRef,
    PodRequest,
    TranslateError,
    pod_gang,
    pod_job_id,
    pod_queue,
    pod_request,
)
from gpupool.k8s.vendors import vendor_pod_request

__all__ = ["PodAdmission"]

log = logging.getLogger("gpupool.k8s")


class PodAdmission(ControllerParts):
    """Reading and submitting pending pods (mixed into the controller)."""

    def read_request(self, pod: Mapping[str, Any]) -> PodRequest:
        if self._inventory is None:
            self._inventory = inventory(self.nodes_by_name.values(), self.node_memo.modes())
        inv = self._inventory
        req = pod_request(pod, self.opt.names, card_memory_mib=inv.floor_mib, models=inv.models)
        annotations = (pod.get("metadata") or {}).get("annotations") or {}
        mode = annotations.get(VGPU_MODE)
        if allows(mode, MIG_MODE) and (mode is not None or self.mig.profiles):
            req = mig_request(req, annotations, self.mig.cards(self.nodes_by_name), inv.core_models)
        if mode is not None:
            req = mode_request(req, annotations, inv.modes)  # HAMi's checkType
        if req.gpu.kind.value == "none":  # another vendor's cards, by its resource names
            req = vendor_pod_request(pod, req, dict(inv.vendors), dict(inv.card_mib)) or req
        elif not req.gpu.models:  # NVIDIA's resource names: NVIDIA's cards only
            vendors = inv.vendors
            if set(vendors) - {"nvidia"}:
                req = replace(req, gpu=replace(req.gpu, models=vendors.get("nvidia", frozenset())))
        if self.elastic is not None:
            req = self.elastic.consumer_request(pod, req)  # its claims hold the cards
        return req

    def resolve_queue(self, pod: Mapping[str, Any]) -> str:
        assert self.sched is not None
        ns = str((pod.get("metadata") or {}).get("namespace", "default"))
        name = pod_queue(pod, self.opt.default_queue) or self.opt.default_queue
        for candidate in (f"{ns}/{name}", name):
            try:
                self.sched.resolve_queue(candidate)
                return candidate
            except NotFoundError:
                continue
        self.sched.resolve_queue(name)  # raises, naming the known queues
        return name

    def _admit(self, key: str) -> None:
        """A pending pod: submit it (alone, or with its gang once the gang is complete);
        a gated pod or one in bind backoff waits."""
        assert self.sched is not None
        pod = self.own_pod(key)
        if pod is None:
            return
        gates = scheduling_gates(pod)
        if gates:
            self.gated[key] = gates
            self.status.park(
                key,
                "waiting for its scheduling gates to be removed: " + ", ".join(gates),
                reason="SchedulingGated",
            )
            return
        self.gated.pop(key, None)
        if self._in_backoff(key):
            return
        try:
            req = self.read_request(pod)
            cons = pod_constraints(pod, self.namespaces.known())
            queue = self.resolve_queue(pod)
            gang = pod_gang(pod)
        except (InvalidJobError, TranslateError, NotFoundError) as exc:
            self._reject([key], str(exc))
            return
        self.extended_asks.pop(key, None)
        asks = self._asks(key, pod)
        if asks:
            cons = replace(cons, extended=tuple(sorted(asks.items())))
        self.requests[key] = req
        self.constraints[key] = cons
        ignored = ignored_constraints(pod, self.namespaces.watched)
        if ignored and self.is_leader():
            self._spawn(
                self.status.event(
                    pod,
                    "Warning",
                    "ConstraintIgnored",
                    "gpupool does not honour "
                    + ", ".join(ignored)
                    + "; the pod is placed as if they were absent",
                )
            )
        self.uids[key] = str((pod.get("metadata") or {}).get("uid") or "")
        if gang is None:
            self._submit(pod_job_id(pod), queue, {key: req}, gang_size=1)
            return
        _, members = self.gangs.setdefault(gang.job_id, (gang, {}))
        members[key] = req
        self.gang_of[key] = gang.job_id
        self._try_gang(gang.job_id, queue)

    def _in_backoff(self, key: str) -> bool:
        """Whether the pod's last bind was refused within its backoff; it is admitted
        again when the backoff ends."""
        entry = self.backoff.get(key)
        if entry is None:
            return False
        until, _delay = entry
        wait = until - time.monotonic()
        if wait <= 0:
            return False
        if key not in self._backoff_timers:
            self._backoff_timers.add(key)
            self._spawn(self._admit_later(key, wait))
        return True

    async def _admit_later(self, key: str, wait: float) -> None:
        try:
            await asyncio.sleep(wait)
        finally:
            self._backoff_timers.discard(key)
        if (
            self.sched is not None
            and key not in self.pod_job
            and not self._in_gang(key)
            and key not in self.rejected
        ):
            self._admit(key)
            self._dirty.set()

    def _back_off(self, key: str) -> None:
        """The API server refused the pod's bind: it waits before it is tried again,
        twice as long each time (kube-scheduler's pod backoff, 1 s to 10 s by default)."""
        _, delay = self.backoff.get(key, (0.0, self.opt.backoff_initial_s / 2))
        delay = min(delay * 2, self.opt.backoff_max_s)
        self.backoff[key] = (time.monotonic() + delay, delay)

    def _gang_size(self, gang: GangRef) -> int | None:
        if gang.size:
            return gang.size
        owner = f"{gang.namespace}/{gang.job_owner}"
        if owner in self.job_sizes:
            return self.job_sizes[owner]
        self._spawn(self._fetch_job_size(gang, owner))
        return None

    async def _fetch_job_size(self, gang: GangRef, owner: str) -> None:
        try:
            job = await self.kube.request(
                "GET", f"/apis/batch/v1/namespaces/{gang.namespace}/jobs/{gang.job_owner}"
            )
        except KubeError as exc:
            log.warning("gang %s: Job %s: %s", gang.job_id, owner, exc)
            return
        self.job_sizes[owner] = int((job.get("spec") or {}).get("parallelism") or 1)
        if self.sched is not None and gang.job_id in self.gangs:
            members = self.gangs[gang.job_id][1]
            if members:
                first = self.pod(next(iter(members)))
                if first is not None:
                    try:
                        self._try_gang(gang.job_id, self.resolve_queue(first))
                    except NotFoundError as exc:
                        self._reject(list(members), str(exc))
        self._dirty.set()

    def _try_gang(self, job_id: JobId, queue: str) -> None:
        gang, members = self.gangs[job_id]
        size = self._gang_size(gang)
        if size is None:
            return
        if job_id in self.jobs:
            # the gang was submitted already: a late pod (a replacement) runs on its own
            for key in list(members):
                del members[key]
                self.gang_of.pop(key, None)
                pod = self.pod(key)
                if pod is not None:
                    self._submit(pod_job_id(pod), queue, {key: self.requests[key]}, 1)
            return
        if len(members) < size:
            for key in members:
                self.status.park(
                    key, f"gang {gang.name} waiting for its pods: {len(members)}/{size} created"
                )
            return
        del self.gangs[job_id]
        for key in members:
            self.gang_of.pop(key, None)
        self._submit(job_id, queue, members, gang_size=size)

    def _submit(
        self, job_id: JobId, queue: str, pods: Mapping[str, PodRequest], gang_size: int
    ) -> None:
        assert self.sched is not None
        keys = sorted(pods)
        # a pod withdrawn to be read again keeps its place: the time it was first submitted
        first = [self.resubmit_at.pop(k) for k in keys if k in self.resubmit_at]
        job, task_pod = job_for_pods(
            job_id,
            queue,
            [(k, pods[k]) for k in keys],
            gang=gang_size > 1,
            min_member=gang_size if gang_size > 1 else None,
            now_s=min(first, default=self.clock()),
            constraints={k: self.constraints.get(k, Constraints()) for k in keys},
        )
        try:
            self.sched.submit(job, self.clock())
        except (InvalidJobError, NotFoundError, ConflictError) as exc:
            self._reject(keys, str(exc))
            return
        self.jobs[job_id] = JobInfo(job_id, queue, task_pod, gang_size=gang_size)
        for k in keys:
            self.pod_job[k] = job_id
        if self.provisioning is not None:  # its ProvisioningRequest, read back at a rebuild
            self.provisioning.resubmitted(job_id)
        self._dirty.set()

    def _reject(self, keys: list[str], reason: str) -> None:
        for key in keys:
            self.resubmit_at.pop(key, None)
            self.rejected[key] = reason
            self.stats.rejected += 1
            self.status.reject(key, reason)
