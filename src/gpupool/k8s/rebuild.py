"""The core rebuilt from the API server alone, when this replica becomes leader.

A bound pod's ``gpupool.io/placement`` annotation records job, task, queue, flavor, node
and cards (HAMi's device annotation stands in for a pod HAMi's own scheduler bound);
:meth:`Rebuild.rebuild` takes every live bound pod's cards and quota back
(``Scheduler.restore``) before scheduling anything, so a new leader starts from what the old
one bound. Then every other pod on a node is counted against that node's CPU and memory,
and the pending pods are submitted. A watch re-listed after ``410 Gone`` reports deletions
it missed as ``DELETED`` (``k8s/informer.py``), which end those pods: no ghost pods, no
cards held for pods that are gone.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from gpupool.core.errors import GpupoolError, InvalidJobError, NotFoundError
from gpupool.core.model import JobId, Node
from gpupool.core.scheduler import Scheduler
from gpupool.k8s.bindhost import scheduling_profile
from gpupool.k8s.constraints import pod_constraints
from gpupool.k8s.extended import ExtendedResourcesFit, with_extended_filter
from gpupool.k8s.hami.register import HAMI_REGISTER, parse_hami_register
from gpupool.k8s.jobs import JobInfo, job_for_pods
from gpupool.k8s.parts import ControllerParts
from gpupool.k8s.podaffinity import pod_meta
from gpupool.k8s.pods import ended
from gpupool.k8s.translate import RecordedPlacement, TranslateError

__all__ = ["Rebuild"]

log = logging.getLogger("gpupool.k8s")


class Rebuild(ControllerParts):
    """The rebuild half of :class:`~gpupool.k8s.controller.Controller` (mixed into it)."""

    def _node_from(self, obj: Mapping[str, Any]) -> Node:
        """The core's node for a Node object: with queued provisioning attached, marked for
        the request whose booking holds it (``k8s/provisioning_nodes.py``)."""
        old_modes = self.node_memo.entries.get(str((obj.get("metadata") or {}).get("name", "")))
        node, modes, fresh = self.node_memo.read(obj)
        name = str(node.name)
        if fresh and (old_modes is None or old_modes[2] != modes):
            self._inventory = None  # the cards' modes changed
        if any(g.mig for g in node.gpus) or self.mig.has_mig(name):
            if fresh:
                text = ((obj.get("metadata") or {}).get("annotations") or {}).get(HAMI_REGISTER)
                self.mig.set_devices(name, parse_hami_register(text) if text else [])
            node = self.mig.counted(node)
        return self.provisioning.mark(node) if self.provisioning is not None else node

    def _translate_nodes(self) -> list[Node]:
        nodes = []
        self.bad_nodes.clear()
        for obj in self.node_informer.cache.values():
            try:
                nodes.append(self._node_from(obj))
            except TranslateError as exc:
                self._bad_node(obj, str(exc))
        return nodes

    def rebuild(self) -> None:
        """A new core scheduler from the informers' caches: nodes, then every live bound
        pod's recorded cards and quota, then what other pods take of each node, then the
        pending pods. With queued provisioning attached, the ProvisioningRequests gpupool
        made are taken back too: running jobs' bookings before the pending pods are
        submitted, each pending job's check when it is (see ``k8s/provisioning.py``)."""
        self.mig.pods.clear()  # read again from the pods below
        nodes = self._translate_nodes()
        self.nodes_by_name = {n.name: n for n in nodes}
        self._inventory = None
        measured = getattr(self, "measured", None)
        profile = with_extended_filter(
            scheduling_profile(
                self.opt.node_lock,
                self.opt.bind_queue_weight,
                measured_hot_pct=None if measured is None else self.opt.hot_pct,
            ),
            ExtendedResourcesFit(self.extended),
        )
        self.sched = Scheduler(nodes, self.config, profile=profile)
        if measured is not None:  # the model outlives schedulers: its samples stay valid
            self.sched.use_measurements(measured.model)
        for d in (
            self.jobs,
            self.pod_job,
            self.requests,
            self.constraints,
            self.gangs,
            self.rejected,
            self.deferred,
            self.gated,
            self.gang_of,
            self.unclaimed,
            self.unclaimed_job,
            self.resubmit_at,
        ):
            d.clear()
        bound: dict[JobId, list[tuple[str, RecordedPlacement]]] = {}
        pending: list[str] = []
        for key, pod in self.all_pods():
            if ended(pod):
                continue
            if (pod.get("spec") or {}).get("nodeName"):
                try:
                    rec = self.recorded(pod)
                except TranslateError as exc:
                    log.warning("%s", exc)
                    continue
                if rec is not None:
                    bound.setdefault(rec.job, []).append((key, rec))
            elif self.own_pod(key) is not None:
                pending.append(key)
        for job_id, members in sorted(bound.items()):
            self._restore(job_id, members)
        self._count_all()
        for name in list(self.mig.profiles):
            self._mig_changed(name)
        if self.elastic is not None:
            self.elastic.ready()  # ElasticGPUs take their cards back before pods are placed
        if self.provisioning is not None:  # running jobs' bookings; the rest wait for _submit
            self.provisioning.restore(self.sched)
        for key in sorted(pending):
            self._admit(key)
        if self.provisioning is not None:  # requests of jobs that are gone
            self.provisioning.sweep()

    def _count_all(self) -> None:
        """Every pod on a node counted afresh: other pods' requests (``self.usage``), and
        the extended resources each node has and gpupool's own pods take."""
        self.usage = type(self.usage)()
        self.extended.outside = self.usage
        self.extended.own.clear()
        for name, obj in self.node_informer.cache.items():
            self.extended.set_node(name, obj)
        for key, pod in self.pod_informer.cache.items():
            self._count("ADDED", key, pod)
        self._apply_usage()  # every node with other pods on it

    def _restore(self, job_id: JobId, members: list[tuple[str, RecordedPlacement]]) -> None:
        assert self.sched is not None
        first = members[0][1]
        pods = {}
        cons = {}
        for key, _rec in members:
            try:
                pods[key] = self.read_request(self.pod(key) or {})
                cons[key] = pod_constraints(self.pod(key) or {}, self.namespaces.known())
            except (InvalidJobError, TranslateError, NotFoundError) as exc:
                log.warning("bound pod %s cannot be read: %s", key, exc)
                return
        job = job_for_pods(
            job_id,
            first.queue,
            [(k, pods[k]) for k, _ in members],
            gang=len(members) > 1,
            constraints=cons,
        )[0]
        # with the pod, so that other pods' affinity and spread count it
        placements = [
            replace(rec.placement(), pod=pod_meta(self.pod(key) or {}, self.namespaces.known()))
            for key, rec in members
        ]
        try:
            self.sched.restore(job, placements, first.start_s, first.flavor)
        except (GpupoolError, KeyError, ValueError) as exc:
            self.stats.restore_conflicts += 1
            log.error("job %s bound before cannot be taken back: %s", job_id, exc)
            return
        info = JobInfo(
            job_id,
            first.queue,
            {rec.task: key for key, rec in members},
            gang_size=first.gang_size,
            running=True,
        )
        self.jobs[job_id] = info
        for key, _ in members:
            self.pod_job[key] = job_id
            self.requests[key] = pods[key]
            self.usage.drop(key)  # its CPU and memory are the core's now
            self.sched.set_pod(key, None)  # and its labels, with the placement
        self.stats.restored_jobs += 1
