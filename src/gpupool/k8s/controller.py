"""The scheduler for pods whose ``schedulerName`` is gpupool's, on a real API server.

Facts come from two informers (Nodes, and Pods selected by ``spec.schedulerName``) and go
into the core :class:`~gpupool.core.scheduler.Scheduler`; its decisions come back out:

- ``Bind``: each pod is bound through the Binding subresource. The Binding carries the pod's
  annotations (gpupool's placement record and HAMi's device annotations); the API server
  copies them onto the pod in the same write that sets ``spec.nodeName``, so a pod is never
  bound without them (``annotate_first`` patches them in a write of their own first, as
  HAMi's scheduler does). ``409 Conflict`` is retried after reading the pod back; a pod that
  turns out bound to the node chosen counts as bound.
- ``Park``: the pod gets ``PodScheduled=False`` (reason ``Unschedulable``) and an Event
  ``FailedScheduling`` whose message is the core's reason, in numbers; written again only
  when the message changes.
- A pod that can never run (bad request, unknown queue, a slice larger than any card) is
  rejected: the same condition and an Event ``Rejected`` with the reason; never pending.

The card view is rebuilt from the API server alone: a bound pod's ``gpupool.io/placement``
annotation records job, task, queue, flavor, node and cards, and :meth:`Controller.rebuild`
takes every live bound pod's cards and quota back (``Scheduler.restore``) before scheduling
anything. It runs when this replica becomes leader, so a new leader starts from what the
old one bound. A watch re-listed after ``410 Gone`` reports deletions it missed as
``DELETED`` (see ``informer.py``), which end those pods here: no ghost pods, no cards held
for pods that are gone.

A job's cards are held until every pod of it has ended (Succeeded, Failed or deleted).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpupool.core.decisions import Bind
from gpupool.core.errors import (
    AdapterError,
    ConflictError,
    GpupoolError,
    InvalidJobError,
    NotFoundError,
)
from gpupool.core.model import (
    Job,
    JobId,
    Node,
    NodeName,
    Placement,
    PodSet,
    QueueName,
    TaskId,
)
from gpupool.core.quota import QueueConfig
from gpupool.core.scheduler import Scheduler
from gpupool.k8s.informer import Informer, object_key
from gpupool.k8s.kube import MERGE_PATCH, STRATEGIC_PATCH, ApiError, Kube
from gpupool.k8s.lease import LeaderElector, micro_time
from gpupool.k8s.translate import (
    PLACEMENT_ANNOTATION,
    GangRef,
    PodRequest,
    RecordedPlacement,
    ResourceNames,
    TranslateError,
    card_floor,
    hami_annotations,
    hami_labels,
    is_terminal,
    node_from_k8s,
    placement_annotation,
    placement_from_hami,
    pod_gang,
    pod_job_id,
    pod_queue,
    pod_request,
    read_placement,
)
from gpupool.k8s.wakeup import wait_event

__all__ = ["Controller", "JobInfo", "Options", "Stats", "job_for_pods"]

log = logging.getLogger("gpupool.k8s")


@dataclass(frozen=True)
class Options:
    scheduler_name: str = "gpupool"
    default_queue: str = "default"
    names: ResourceNames = field(default_factory=ResourceNames)
    identity: str = field(default_factory=lambda: f"{socket.gethostname()}-{os.getpid()}")
    annotate_first: bool = False
    bind_concurrency: int = 64
    bind_retry_s: float = 90.0  # how long transient API errors are retried per bind
    reason_interval_s: float = 5.0  # a pod's pending reason is written at most this often
    status_concurrency: int = 8
    cycle_interval_s: float = 2.0
    debounce_s: float = 0.005
    lease_namespace: str = "gpupool-system"
    lease_name: str = "gpupool-scheduler"
    leader_elect: bool = True
    lease_s: float = 15.0
    renew_s: float = 2.0
    foreign_schedulers: tuple[str, ...] = ()
    """Schedulers whose pods gpupool's extender binds (usually ``default-scheduler``): their
    bound pods' cards are tracked, their pending pods left alone."""


@dataclass
class JobInfo:
    """The pods behind one core job and where each stands."""

    id: JobId
    queue: str
    task_pod: dict[TaskId, str]  # task -> pod key
    gang_size: int = 1
    running: bool = False
    ended: set[str] = field(default_factory=set)  # pod keys that ended while running

    @property
    def pods(self) -> list[str]:
        return list(self.task_pod.values())


@dataclass
class Stats:
    binds: int = 0
    bind_failures: int = 0
    conflicts_retried: int = 0
    rejected: int = 0
    restored_jobs: int = 0
    restore_conflicts: int = 0
    cycles: int = 0
    evictions: int = 0
    bound_at: dict[str, float] = field(default_factory=dict)  # pod key -> wall time bound


class Controller:
    def __init__(self, kube: Kube, config: QueueConfig, options: Options = Options(), *,
                 clock: Callable[[], float] = time.time) -> None:
        self.kube = kube
        self.config = config
        self.opt = options
        self.clock = clock
        self.sched: Scheduler | None = None
        self.nodes_by_name: dict[str, Node] = {}
        self.jobs: dict[JobId, JobInfo] = {}
        self.pod_job: dict[str, JobId] = {}
        self.requests: dict[str, PodRequest] = {}
        self.rejected: dict[str, str] = {}  # pod key -> reason
        self.bad_nodes: dict[str, str] = {}
        self.gangs: dict[JobId, tuple[GangRef, dict[str, PodRequest]]] = {}
        self.job_sizes: dict[str, int] = {}  # ns/job -> parallelism
        self.last_reason: dict[str, str] = {}
        self._reason_at: dict[str, float] = {}
        self._reason_due: dict[str, str] = {}
        self.evicting: dict[str, str] = {}  # pod key -> node, for evicted pods not yet gone
        self.deferred: dict[JobId, tuple[Bind, float]] = {}  # binds waiting for victims
        self.stats = Stats()
        self.node_informer = Informer(kube, "/api/v1/nodes", self._on_node, name="nodes")
        self.pod_informer = Informer(
            kube, "/api/v1/pods", self._on_pod, name="pods",
            params={"fieldSelector": f"spec.schedulerName={options.scheduler_name}"})
        self.foreign_informers = [
            Informer(kube, "/api/v1/pods", self._on_foreign_pod, name=f"pods of {name}",
                     params={"fieldSelector": f"spec.schedulerName={name}"})
            for name in options.foreign_schedulers]
        self.elector: LeaderElector | None = None
        if options.leader_elect:
            self.elector = LeaderElector(
                kube, options.lease_namespace, options.lease_name, options.identity,
                lease_s=options.lease_s, renew_s=options.renew_s,
                on_started=self._became_leader, on_stopped=self._lost_leadership)
        self._dirty = asyncio.Event()
        self._bind_sem = asyncio.Semaphore(options.bind_concurrency)
        self._status_sem = asyncio.Semaphore(options.status_concurrency)
        self._tasks: set[asyncio.Task[Any]] = set()
        self._leader_ready = asyncio.Event()
        # (smallest card MiB, GPU models): what pod requests are read against; cleared
        # whenever the nodes change
        self._inventory: tuple[int, frozenset[str]] | None = None
        # Elastic GPU objects (k8s/elastic.py) when attached: rebuilt with the scheduler,
        # consulted for pods that consume claims
        self.elastic: Any = None
        # queued provisioning (k8s/provisioning.py) when attached: makes and watches the
        # ProvisioningRequests the cycles ask for
        self.provisioning: Any = None

    # -- running ---------------------------------------------------------------------------

    def is_leader(self) -> bool:
        return self.elector.is_leader() if self.elector is not None else True

    async def run(self) -> None:
        """Watch, elect, schedule, until cancelled."""
        informers = [self.node_informer, self.pod_informer, *self.foreign_informers]
        if self.elastic is not None:  # its objects are read before the first rebuild
            informers.extend(self.elastic.informers.values())
        loops = [asyncio.create_task(i.run()) for i in informers]
        waits = list(informers)
        if self.provisioning is not None:  # its informer runs in the adapter's task; its
            waits.append(self.provisioning.informer)  # requests are read back at a rebuild
        try:
            for i in waits:
                await i.synced.wait()
            if self.elector is not None:
                loops.append(asyncio.create_task(self.elector.run()))
            else:
                await self._became_leader()
            loops.append(asyncio.create_task(self._cycle_loop()))
            await asyncio.gather(*loops)
        finally:
            for t in loops:
                t.cancel()
            for t in list(self._tasks):
                t.cancel()
            await asyncio.gather(*loops, *self._tasks, return_exceptions=True)
            if self.elector is not None:
                await self.elector.release()

    def wake(self) -> None:
        """Run a cycle soon (something outside the informers changed the cards)."""
        self._dirty.set()

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _became_leader(self) -> None:
        self.rebuild()
        self._leader_ready.set()
        self._dirty.set()

    async def _lost_leadership(self) -> None:
        self.sched = None
        self._leader_ready.clear()

    async def _cycle_loop(self) -> None:
        while True:
            await wait_event(self._dirty, self.opt.cycle_interval_s)
            self._dirty.clear()
            await asyncio.sleep(self.opt.debounce_s)
            if self.sched is None or not self.is_leader():
                continue
            try:
                self.cycle()
            except GpupoolError:
                log.exception("scheduling cycle failed")

    # -- rebuilding from the API server ----------------------------------------------------

    def _translate_nodes(self) -> list[Node]:
        nodes = []
        self.bad_nodes.clear()
        for obj in self.node_informer.cache.values():
            try:
                nodes.append(node_from_k8s(obj))
            except TranslateError as exc:
                self._bad_node(obj, str(exc))
        return nodes

    def rebuild(self) -> None:
        """A new core scheduler from the informers' caches: nodes, then every live bound
        pod's recorded cards and quota, then the pending pods. With queued provisioning
        attached, the ProvisioningRequests gpupool made are taken back too: running jobs'
        bookings before the pending pods are submitted, each pending job's check when it is
        (see ``k8s/provisioning.py``)."""
        nodes = self._translate_nodes()
        self.nodes_by_name = {n.name: n for n in nodes}
        self._inventory = None
        self.sched = Scheduler(nodes, self.config)
        self.jobs.clear()
        self.pod_job.clear()
        self.requests.clear()
        self.gangs.clear()
        self.rejected.clear()
        self.deferred.clear()
        bound: dict[JobId, list[tuple[str, RecordedPlacement]]] = {}
        pending: list[str] = []
        for key, pod in self.all_pods():
            if _ended(pod):
                continue
            if (pod.get("spec") or {}).get("nodeName"):
                try:
                    rec = self.recorded(pod)
                except TranslateError as exc:
                    log.warning("%s", exc)
                    continue
                if rec is not None:
                    bound.setdefault(rec.job, []).append((key, rec))
            elif key in self.pod_informer.cache:
                pending.append(key)
        for job_id, members in sorted(bound.items()):
            self._restore(job_id, members)
        if self.elastic is not None:
            self.elastic.ready()  # ElasticGPUs take their cards back before pods are placed
        if self.provisioning is not None:  # running jobs' bookings; the rest wait for _submit
            self.provisioning.restore(self.sched)
        for key in sorted(pending):
            self._admit(key)
        if self.provisioning is not None:  # requests of jobs that are gone
            self.provisioning.sweep()

    def _restore(self, job_id: JobId, members: list[tuple[str, RecordedPlacement]]) -> None:
        assert self.sched is not None
        first = members[0][1]
        pods = {}
        for key, _rec in members:
            try:
                pods[key] = self.read_request(self.pod(key) or {})
            except (InvalidJobError, TranslateError, NotFoundError) as exc:
                log.warning("bound pod %s cannot be read: %s", key, exc)
                return
        job = job_for_pods(job_id, first.queue, [(k, pods[k]) for k, _ in members],
                   gang=len(members) > 1)[0]
        placements = [rec.placement() for _, rec in members]
        try:
            self.sched.restore(job, placements, first.start_s, first.flavor)
        except (GpupoolError, KeyError, ValueError) as exc:
            self.stats.restore_conflicts += 1
            log.error("job %s bound before cannot be taken back: %s", job_id, exc)
            return
        info = JobInfo(job_id, first.queue, {rec.task: key for key, rec in members},
                       gang_size=first.gang_size, running=True)
        self.jobs[job_id] = info
        for key, _ in members:
            self.pod_job[key] = job_id
            self.requests[key] = pods[key]
        self.stats.restored_jobs += 1

    # -- nodes -----------------------------------------------------------------------------

    def _on_node(self, event: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        if self.sched is None:
            return
        name = str((obj.get("metadata") or {}).get("name"))
        if event == "DELETED":
            self._remove_node(name)
            return
        try:
            node = node_from_k8s(obj)
        except TranslateError as exc:
            self._bad_node(obj, str(exc))
            self._remove_node(name)
            return
        self.bad_nodes.pop(name, None)
        known = self.nodes_by_name.get(name)
        if known == node:
            return
        if known is None:
            self.sched.add_node(node)
        else:
            self.sched.update_node(node)
        self.nodes_by_name[name] = node
        self._inventory = None
        self._dirty.set()

    def _remove_node(self, name: str) -> None:
        assert self.sched is not None
        if name not in self.nodes_by_name:
            return
        del self.nodes_by_name[name]
        self._inventory = None
        for job_id in self.sched.remove_node(NodeName(name), self.clock()):
            # Its pods stay bound to the node that left; they will not run anywhere else.
            self.sched.cancel(job_id, self.clock())
            info = self.jobs.pop(job_id, None)
            for key in info.pods if info else ():
                self.pod_job.pop(key, None)
        self._dirty.set()

    def _bad_node(self, obj: Mapping[str, Any], reason: str) -> None:
        name = str((obj.get("metadata") or {}).get("name"))
        if self.bad_nodes.get(name) == reason:
            return
        self.bad_nodes[name] = reason
        log.warning("node %s ignored: %s", name, reason)
        if self.is_leader():
            self._spawn(self._event(obj, "Warning", "InvalidNode", reason))

    # -- pods ------------------------------------------------------------------------------

    def _on_pod(self, event: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        if self.sched is None:
            return
        key = object_key(obj)
        if key in self.evicting:
            if event == "DELETED" or _ended(obj):
                self._victim_gone(key)
            return
        if event == "DELETED" or _ended(obj):
            self._pod_ended(key)
            return
        if (obj.get("spec") or {}).get("nodeName"):
            job = self.pod_job.get(key)
            if job is not None and self.jobs[job].running:
                return  # bound here
            if job is not None:
                self._pod_ended(key)  # bound while pending here: stop scheduling it
            # its recorded cards are taken (a bind whose answer was lost, another leader)
            self._bound_elsewhere(key, obj)
            return
        if key in self.pod_job or key in self.rejected or self._in_gang(key):
            return
        self._admit(key)
        self._dirty.set()

    def _on_foreign_pod(self, event: str, obj: dict[str, Any],
                        old: dict[str, Any] | None) -> None:
        """A pod of another scheduler: only its cards matter (bound through the extender)."""
        if self.sched is None:
            return
        key = object_key(obj)
        if key in self.evicting:
            if event == "DELETED" or _ended(obj):
                self._victim_gone(key)
        elif event == "DELETED" or _ended(obj):
            self._pod_ended(key)
        elif (obj.get("spec") or {}).get("nodeName") and key not in self.pod_job:
            self._bound_elsewhere(key, obj)

    def all_pods(self) -> list[tuple[str, dict[str, Any]]]:
        """Every cached pod (key, object): gpupool's and the foreign schedulers'."""
        out = list(self.pod_informer.cache.items())
        for i in self.foreign_informers:
            out.extend(i.cache.items())
        return out

    def pod(self, key: str) -> dict[str, Any] | None:
        """A cached pod by key, gpupool's or a foreign scheduler's."""
        pod = self.pod_informer.cache.get(key)
        if pod is None:
            for i in self.foreign_informers:
                pod = i.cache.get(key)
                if pod is not None:
                    break
        return pod

    async def bind_foreign(self, pod: dict[str, Any], p: Placement) -> None:
        """Binds a pod another scheduler chose ``p.node`` for (the extender's bind): its
        cards are taken in the core first (ConflictError when they are not free), then the
        pod is bound as gpupool binds its own. AdapterError when the bind failed."""
        if self.sched is None:
            raise NotFoundError("gpupool is not leading")
        key = object_key(pod)
        req = self.read_request(pod)
        queue = self.resolve_queue(pod)
        job, task_pod = job_for_pods(JobId(key), queue, [(key, req)], gang=False)
        now = self.clock()
        self.sched.restore(job, [p], now)
        info = JobInfo(job.id, queue, task_pod, running=True)
        self.jobs[job.id] = info
        self.pod_job[key] = job.id
        self.requests[key] = req
        await self._bind(key, p, info, "", now)
        if key not in self.stats.bound_at:
            raise AdapterError(f"binding {key} to {p.node} failed")

    def _in_gang(self, key: str) -> bool:
        return any(key in members for _, members in self.gangs.values())

    def _bound_elsewhere(self, key: str, obj: dict[str, Any]) -> None:
        """A pod bound outside this replica's view (another leader): take its cards."""
        try:
            rec = self.recorded(obj)
        except TranslateError as exc:
            log.warning("%s", exc)
            return
        if rec is None or rec.job in self.jobs:
            return
        members = []
        for k, pod in self.all_pods():
            if _ended(pod) or not (pod.get("spec") or {}).get("nodeName"):
                continue
            try:
                r = self.recorded(pod)
            except TranslateError:
                continue
            if r is not None and r.job == rec.job:
                members.append((k, r))
        if len(members) >= rec.gang_size:
            self._restore(rec.job, members)

    def recorded(self, pod: Mapping[str, Any]) -> RecordedPlacement | None:
        """A bound pod's cards: gpupool's record, else HAMi's device annotation (a pod that
        HAMi's scheduler bound). TranslateError when neither can be read."""
        rec = read_placement(pod)
        if rec is not None:
            return rec
        node = self.nodes_by_name.get(str((pod.get("spec") or {}).get("nodeName") or ""))
        if node is None:
            return None
        try:
            req = self.read_request(pod)
            queue = self.resolve_queue(pod)
        except (InvalidJobError, NotFoundError) as exc:
            raise TranslateError(f"bound pod {object_key(pod)}: {exc}") from exc
        return placement_from_hami(pod, node, queue, req.cpu_milli, req.memory_mib)

    def read_request(self, pod: Mapping[str, Any]) -> PodRequest:
        if self._inventory is None:
            nodes = self.nodes_by_name.values()
            self._inventory = (card_floor(nodes),
                               frozenset(g.model for n in nodes for g in n.gpus))
        floor, models = self._inventory
        req = pod_request(pod, self.opt.names, card_memory_mib=floor, models=models)
        if self.elastic is not None:
            req = self.elastic.consumer_request(pod, req)  # its claims hold the cards
        return req

    def resolve_queue(self, pod: Mapping[str, Any]) -> str:
        assert self.sched is not None
        ns = str((pod.get("metadata") or {}).get("namespace", "default"))
        name = pod_queue(pod, self.opt.default_queue) or self.opt.default_queue
        for candidate in (f"{ns}/{name}", name):
            try:
                self.sched.queues.resolve(candidate)
                return candidate
            except NotFoundError:
                continue
        self.sched.queues.resolve(name)  # raises, naming the known queues
        return name

    def _admit(self, key: str) -> None:
        """A pending pod: submit it (alone, or with its gang once the gang is complete)."""
        assert self.sched is not None
        pod = self.pod_informer.cache.get(key)
        if pod is None:
            return
        try:
            req = self.read_request(pod)
            queue = self.resolve_queue(pod)
            gang = pod_gang(pod)
        except (InvalidJobError, TranslateError, NotFoundError) as exc:
            self._reject([key], str(exc))
            return
        self.requests[key] = req
        if gang is None:
            self._submit(pod_job_id(pod), queue, {key: req}, gang_size=1)
            return
        _, members = self.gangs.setdefault(gang.job_id, (gang, {}))
        members[key] = req
        self._try_gang(gang.job_id, queue)

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
                "GET", f"/apis/batch/v1/namespaces/{gang.namespace}/jobs/{gang.job_owner}")
        except ApiError as exc:
            log.warning("gang %s: Job %s: %s", gang.job_id, owner, exc)
            return
        self.job_sizes[owner] = int((job.get("spec") or {}).get("parallelism") or 1)
        if self.sched is not None and gang.job_id in self.gangs:
            members = self.gangs[gang.job_id][1]
            if members:
                first = self.pod_informer.cache.get(next(iter(members)))
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
                pod = self.pod_informer.cache.get(key)
                if pod is not None:
                    self._submit(pod_job_id(pod), queue, {key: self.requests[key]}, 1)
            return
        if len(members) < size:
            for key in members:
                self._park_message(key, f"gang {gang.name} waiting for its pods: "
                                        f"{len(members)}/{size} created")
            return
        del self.gangs[job_id]
        self._submit(job_id, queue, members, gang_size=size)

    def _submit(self, job_id: JobId, queue: str, pods: Mapping[str, PodRequest],
                gang_size: int) -> None:
        assert self.sched is not None
        keys = sorted(pods)
        job, task_pod = job_for_pods(job_id, queue, [(k, pods[k]) for k in keys],
                             gang=gang_size > 1, min_member=gang_size if gang_size > 1 else None,
                             now_s=self.clock())
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

    def _pod_ended(self, key: str) -> None:
        assert self.sched is not None
        self.rejected.pop(key, None)
        self.last_reason.pop(key, None)
        self._reason_at.pop(key, None)
        self._reason_due.pop(key, None)
        self.requests.pop(key, None)
        for job_id, (_gang, members) in list(self.gangs.items()):
            if members.pop(key, None) is not None and not members:
                del self.gangs[job_id]
        found = self.pod_job.pop(key, None)
        if found is None:
            return
        job_id = found
        info = self.jobs[job_id]
        now = self.clock()
        if not info.running:
            # pending: withdraw the job; its other pods wait again (a gang) or go on alone
            self.sched.cancel(job_id, now)
            del self.jobs[job_id]
            for other in info.pods:
                if other != key and self.pod_job.pop(other, None) is not None:
                    self._admit(other)
            self._dirty.set()
            return
        info.ended.add(key)
        if all(k in info.ended for k in info.pods):
            del self.jobs[job_id]
            with contextlib.suppress(NotFoundError):
                self.sched.finished(job_id, now)
            self._dirty.set()

    # -- a cycle ---------------------------------------------------------------------------

    def cycle(self) -> None:
        assert self.sched is not None
        now = self.clock()
        result = self.sched.cycle(now)
        self.stats.cycles += 1
        if self.provisioning is not None:
            self.provisioning.handle(result)
        for bind in result.binds:
            info = self.jobs.get(bind.job)
            if info is None:
                continue
            info.running = True
            self._dispatch(bind, info, now)
        for park in result.parks:
            info = self.jobs.get(park.job)
            if info is None:
                continue
            message = park.status.message or "waiting"
            for key in info.pods:
                self._park_message(key, message)
        for ev in result.evicts:
            self._evict_job(ev.job, f"preempted by {ev.preemptor} ({ev.reason})")

    def _evict_job(self, job_id: JobId, reason: str) -> None:
        """The core took a job's cards back for a preemptor: its pods are evicted (they do
        not come back; a Job controller makes new ones, scheduled as new jobs). Binds onto
        their nodes wait until they are gone (see ``_dispatch``), so the preemptor never
        shares a card with a victim still running."""
        assert self.sched is not None
        info = self.jobs.pop(job_id, None)
        with contextlib.suppress(NotFoundError):
            self.sched.cancel(job_id, self.clock())  # the core queued it again
        if info is None:
            return
        for key in info.pods:
            self.pod_job.pop(key, None)
            if key in info.ended:
                continue
            pod = self.pod(key)
            node = str(((pod or {}).get("spec") or {}).get("nodeName") or "")
            self.evicting[key] = node
            self._spawn(self._evict(key, reason))

    def _dispatch(self, bind: Bind, info: JobInfo, now: float) -> None:
        busy = set(self.evicting.values())
        if any(p.node in busy for p in bind.placements):
            self.deferred[bind.job] = (bind, now)
            return
        for p in bind.placements:
            key = info.task_pod[p.task]
            self.last_reason.pop(key, None)
            self._spawn(self._bind(key, p, info, bind.flavor, now))

    def _victim_gone(self, key: str) -> None:
        self.evicting.pop(key, None)
        busy = set(self.evicting.values())
        for job_id, (bind, now) in list(self.deferred.items()):
            info = self.jobs.get(job_id)
            if info is None:
                del self.deferred[job_id]
            elif not any(p.node in busy for p in bind.placements):
                del self.deferred[job_id]
                self._dispatch(bind, info, now)

    # -- writes ----------------------------------------------------------------------------

    async def _bind(self, key: str, p: Placement, info: JobInfo, flavor: str,
                    now: float) -> None:
        ns, name = key.split("/", 1)
        req = self.requests.get(key)
        node = self.nodes_by_name.get(p.node)
        annotations = {PLACEMENT_ANNOTATION: placement_annotation(
            p, info.queue, flavor, now, info.gang_size)}
        annotations["gpupool.io/bound-by"] = self.opt.identity
        if req is not None and node is not None:
            annotations.update(hami_annotations(req, p, node, now))
        if self.elastic is not None:
            annotations.update(self.elastic.bind_annotations(self.pod(key) or {}, p.node, now))
        if self.provisioning is not None:
            annotations.update(self.provisioning.bind_annotations(info.id))
        binding: dict[str, Any] = {
            "apiVersion": "v1", "kind": "Binding",
            "metadata": {"name": name, "namespace": ns},
            "target": {"apiVersion": "v1", "kind": "Node", "name": p.node},
        }
        if not self.opt.annotate_first:
            binding["metadata"]["annotations"] = annotations
        labels = hami_labels(annotations)  # a Binding carries no labels: patched first
        patch: dict[str, Any] = {"annotations": annotations} if self.opt.annotate_first else {}
        if labels:
            patch["labels"] = labels
        async with self._bind_sem:
            deadline = time.monotonic() + self.opt.bind_retry_s
            attempt = 0
            while time.monotonic() < deadline:
                attempt += 1
                if not self.is_leader():
                    log.info("not leader any more: %s not bound", key)
                    return
                try:
                    if patch:
                        await self.kube.request(
                            "PATCH", f"/api/v1/namespaces/{ns}/pods/{name}",
                            {"metadata": patch}, content_type=MERGE_PATCH)
                    await self.kube.request(
                        "POST", f"/api/v1/namespaces/{ns}/pods/{name}/binding", binding)
                    self.stats.binds += 1
                    self.stats.bound_at[key] = time.time()
                    return
                except ApiError as exc:
                    if exc.status == 409:
                        self.stats.conflicts_retried += 1
                        if await self._bound_here(ns, name, p.node):
                            self.stats.binds += 1
                            self.stats.bound_at[key] = time.time()
                            return
                        continue
                    if exc.status == 404:
                        log.info("%s is gone; not bound", key)
                        break
                    if exc.status in (0, 429) or exc.status >= 500:
                        # transient (an API server restarting): retry; a bind that had
                        # worked answers 409 next time and is recognised above
                        await asyncio.sleep(min(0.05 * 2 ** attempt, 2.0))
                        continue
                    log.warning("binding %s to %s failed: %s", key, p.node, exc)
                    self.stats.bind_failures += 1
                    self._bind_failed(key, f"binding to {p.node} failed: {exc.message}")
                    return
        self.stats.bind_failures += 1
        self._bind_failed(key, None)

    async def _bound_here(self, ns: str, name: str, node: str) -> bool:
        """After a 409: is the pod bound to ``node`` (a retried bind that had worked)?"""
        try:
            pod = await self.kube.request("GET", f"/api/v1/namespaces/{ns}/pods/{name}")
        except ApiError:
            return False
        bound_to = (pod.get("spec") or {}).get("nodeName")
        if bound_to and bound_to != node:
            raise ApiError(409, "Conflict", f"pod is bound to {bound_to} already",
                           f"binding {ns}/{name}")
        return bound_to == node

    def _bind_failed(self, key: str, reason: str | None) -> None:
        """The pod could not be bound: it counts as ended for its job (whose other pods may
        be bound); if it still exists it is scheduled again."""
        if self.sched is None:
            return
        self._pod_ended(key)
        pod = self.pod_informer.cache.get(key)
        if pod is not None and not (pod.get("spec") or {}).get("nodeName") and not _ended(pod):
            if reason is not None:
                self._park_message(key, reason)
            self._admit(key)
            self._dirty.set()

    async def _evict(self, key: str, reason: str) -> None:
        ns, name = key.split("/", 1)
        try:
            await self.kube.request(
                "POST", f"/api/v1/namespaces/{ns}/pods/{name}/eviction",
                {"apiVersion": "policy/v1beta1", "kind": "Eviction",
                 "metadata": {"name": name, "namespace": ns}})
            self.stats.evictions += 1
        except ApiError as exc:
            if exc.status == 404:
                self._victim_gone(key)
                return
            log.warning("evicting %s (%s) failed: %s", key, reason, exc)

    def _park_message(self, key: str, message: str) -> None:
        """Says why a pod waits (condition and Event), when the reason changed; at most once
        per ``reason_interval_s`` per pod, the latest reason written when the interval ends
        (a wake-up re-parks every waiting pod with new numbers; this keeps that from
        flooding the API server)."""
        if self.last_reason.get(key) == message:
            self._reason_due.pop(key, None)
            return
        now = time.monotonic()
        wait = self._reason_at.get(key, -1e9) + self.opt.reason_interval_s - now
        if wait > 0:
            if key not in self._reason_due:
                self._spawn(self._park_later(key, wait))
            self._reason_due[key] = message
            return
        self._reason_due.pop(key, None)
        self.last_reason[key] = message
        self._reason_at[key] = now
        pod = self.pod_informer.cache.get(key)
        if pod is not None and self.is_leader():
            self._spawn(self._pending(pod, "Unschedulable", "FailedScheduling", message))

    async def _park_later(self, key: str, wait: float) -> None:
        await asyncio.sleep(wait)
        message = self._reason_due.pop(key, None)
        if message is not None and self._still_waiting(key):
            self._park_message(key, message)

    def _still_waiting(self, key: str) -> bool:
        job = self.pod_job.get(key)
        if job is not None:
            info = self.jobs.get(job)
            return info is not None and not info.running
        return self._in_gang(key)

    def _reject(self, keys: Iterable[str], reason: str) -> None:
        for key in keys:
            self.rejected[key] = reason
            self.stats.rejected += 1
            pod = self.pod_informer.cache.get(key)
            if pod is not None and self.is_leader():
                self._spawn(self._pending(pod, "Unschedulable", "Rejected",
                                          f"rejected: {reason}"))

    async def _pending(self, pod: Mapping[str, Any], reason: str, event_reason: str,
                       message: str) -> None:
        meta = pod.get("metadata") or {}
        ns, name = meta.get("namespace"), meta.get("name")
        async with self._status_sem:
            try:
                await self.kube.request(
                    "PATCH", f"/api/v1/namespaces/{ns}/pods/{name}/status",
                    {"status": {"conditions": [{
                        "type": "PodScheduled", "status": "False", "reason": reason,
                        "message": message, "lastProbeTime": None,
                        "lastTransitionTime": micro_time()[:19] + "Z"}]}},
                    content_type=STRATEGIC_PATCH)
            except ApiError as exc:
                if exc.status != 404:
                    log.warning("pod %s/%s status: %s", ns, name, exc)
            await self._event(pod, "Warning", event_reason, message)

    async def _event(self, obj: Mapping[str, Any], type_: str, reason: str,
                     message: str) -> None:
        meta = obj.get("metadata") or {}
        ns = meta.get("namespace") or "default"
        now = micro_time()[:19] + "Z"
        body = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"generateName": f"{meta.get('name')}.", "namespace": ns},
            "involvedObject": {"apiVersion": obj.get("apiVersion", "v1"),
                               "kind": obj.get("kind", "Pod"), "name": meta.get("name"),
                               "namespace": meta.get("namespace"), "uid": meta.get("uid")},
            "reason": reason, "message": message[:1024], "type": type_,
            "source": {"component": self.opt.scheduler_name},
            "reportingComponent": self.opt.scheduler_name,
            "reportingInstance": self.opt.identity,
            "firstTimestamp": now, "lastTimestamp": now, "count": 1,
        }
        try:
            await self.kube.request("POST", f"/api/v1/namespaces/{ns}/events", body)
        except ApiError as exc:
            log.warning("event for %s: %s", meta.get("name"), exc)

    # -- views -----------------------------------------------------------------------------

    def allocations(self) -> dict[str, tuple[str, tuple[tuple[int, int, int], ...]]]:
        """Pod key -> (node, cards as (index, milli, MiB)) for every running pod here."""
        out: dict[str, tuple[str, tuple[tuple[int, int, int], ...]]] = {}
        if self.sched is None:
            return out
        for r in self.sched.running():
            info = self.jobs.get(r.job.id)
            if info is None:
                continue
            for p in r.placements:
                key = info.task_pod.get(p.task)
                if key is not None and key not in info.ended:
                    out[key] = (str(p.node), tuple((s.index, s.gpu_milli, s.memory_mib)
                                                   for s in p.shares))
        return out


def _ended(pod: Mapping[str, Any]) -> bool:
    return is_terminal(pod) or bool((pod.get("metadata") or {}).get("deletionTimestamp"))


def job_for_pods(job_id: JobId, queue: str, pods: list[tuple[str, PodRequest]], *, gang: bool,
         min_member: int | None = None, now_s: float = 0.0
         ) -> tuple[Job, dict[TaskId, str]]:
    """A core job for pods: pods with the same request share a pod set; tasks map to pods
    in the order given."""
    groups: dict[tuple[object, ...], list[tuple[str, PodRequest]]] = {}
    for key, req in pods:
        groups.setdefault(req.key(), []).append((key, req))
    pod_sets = []
    task_pod: dict[TaskId, str] = {}
    for i, members in enumerate(groups.values()):
        req = members[0][1]
        ps = PodSet(name=f"ps{i}", count=len(members), cpu_milli=req.cpu_milli,
                    memory_mib=req.memory_mib, gpu=req.gpu, node_selector=req.node_selector,
                    tolerations=req.tolerations)
        pod_sets.append(ps)
        for j, (key, _) in enumerate(members):
            task_pod[TaskId(f"{job_id}/ps{i}-{j}")] = key
    priority = max((req.priority for _, req in pods), default=0)
    job = Job(id=job_id, pod_sets=tuple(pod_sets), queue=QueueName(queue),
              priority=priority, submit_time_s=now_s,
              min_member=min_member if gang else None)
    return job, task_pod
