"""The scheduler for pods whose ``schedulerName`` is gpupool's, on a real API server.

Facts come from two informers (Nodes, and every Pod) and go into the core
:class:`~gpupool.core.scheduler.Scheduler`; its decisions come back out. The work is split
by concept:

- ``k8s/pods.py``: pod events (foreign pods; every other pod counted against its node's
  CPU and memory through ``k8s/podview.py``); ``k8s/admit.py``: pending pods read and
  submitted as core jobs and gangs (gates, bind backoff);
- ``k8s/nodes.py``: node events into the core's nodes;
- ``k8s/decisions.py``: the cycle, and what each of its decisions does;
- ``k8s/binding.py``: binds (UID-fenced, under HAMi's node lock, pipelined across nodes)
  and evictions, with their one retry policy; ``k8s/bindhost.py``: what a bind writes and
  what its outcome means for the core;
- ``k8s/status.py``: pending conditions and Events;
- ``k8s/rebuild.py``: the core rebuilt from the API server alone when this replica leads;
- ``k8s/hooks.py``: the typed seams Elastic GPU objects and queued provisioning attach by.

This module ties them together: the shared state, leadership and the cycle loop. A job's
cards are held until every pod of it has ended (Succeeded, Failed or deleted).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gpupool.core.decisions import Bind
from gpupool.core.errors import ConfigError, GpupoolError
from gpupool.core.model import JobId, Node
from gpupool.core.quota import QueueConfig
from gpupool.core.scheduler import Scheduler
from gpupool.core.usage import LoadSettings
from gpupool.k8s import projection, slim
from gpupool.k8s.admit import PodAdmission
from gpupool.k8s.bindhost import BindHost
from gpupool.k8s.binding import PodBinder, RetryPolicy
from gpupool.k8s.constraints import Constraints
from gpupool.k8s.decisions import Decisions
from gpupool.k8s.extended import ExtendedLedger
from gpupool.k8s.hooks import ElasticHook, ProvisioningHook
from gpupool.k8s.informer import Informer
from gpupool.k8s.inventory import Inventory, NodeMemo
from gpupool.k8s.jobs import JobInfo, job_for_pods
from gpupool.k8s.kube import Kube
from gpupool.k8s.lease_thread import LeaseThread
from gpupool.k8s.migledger import MigLedger
from gpupool.k8s.namespaces import NAMESPACES, Namespaces, listable
from gpupool.k8s.nodelock import LOCK_EXPIRE_S, NodeLocks
from gpupool.k8s.noderesources import ExtendedAndMigResources
from gpupool.k8s.nodes import NodeEvents
from gpupool.k8s.pods import PodEvents
from gpupool.k8s.podview import NodeUsage, reduce
from gpupool.k8s.rebuild import Rebuild
from gpupool.k8s.status import StatusWriter
from gpupool.k8s.translate import (
    GangRef,
    PodRequest,
    RecordedPlacement,
    ResourceNames,
)
from gpupool.k8s.vendors import PROTOCOLS
from gpupool.k8s.vendors.switch import FormSwitcher
from gpupool.k8s.wakeup import wait_event
from gpupool.usage.feed import MeasuredUse
from gpupool.usage.prometheus import PrometheusReader, PrometheusSettings

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
    status_writes_per_s: float = 50.0  # pending conditions and Events, all pods together
    status_concurrency: int = 4
    cycle_interval_s: float = 2.0
    debounce_s: float = 0.005
    lease_namespace: str = "gpupool-system"
    lease_name: str = "gpupool-scheduler"
    leader_elect: bool = True
    lease_s: float = 15.0
    renew_s: float = 2.0
    node_lock: bool = True
    """Take HAMi's node lock (``hami.io/mutex.lock``) before binding a pod with devices."""
    bind_queue_weight: float = 1.0
    """Weight of the ``bind-queue`` score (against ``binpack``'s 1) with the node lock; 0:
    none, a burst packs as tightly as an idle cluster."""

    def __post_init__(self) -> None:
        if self.bind_queue_weight < 0:
            raise ConfigError(
                f"--bind-queue-weight={self.bind_queue_weight} must be at least 0",
                field="bind_queue_weight",
                value=self.bind_queue_weight,
                rule="at least 0",
            )

    lock_expire_s: float = LOCK_EXPIRE_S  # HAMi's HAMI_NODELOCK_EXPIRE
    backoff_initial_s: float = 1.0  # a pod whose bind was refused waits this, doubling
    backoff_max_s: float = 10.0  # each time up to this (kube-scheduler's defaults)
    extender_lock_wait_s: float = 25.0  # the extender's bind waits this long for a lock
    foreign_schedulers: tuple[str, ...] = ()
    """Schedulers whose pods gpupool's extender binds (usually ``default-scheduler``): their
    bound pods' cards are tracked, their pending pods left alone."""
    prometheus: PrometheusSettings | None = None
    """Where measured GPU use is read (``--prometheus``); None: placement by requests."""
    measured: LoadSettings = field(default_factory=LoadSettings)
    measured_interval_s: float = 15.0
    hot_pct: float = 80.0


@dataclass
class Stats:
    binds: int = 0
    bind_failures: int = 0
    bind_refusals: int = 0  # 409s other than "bound here already": the pod backs off
    bound_elsewhere: int = 0  # found bound to another node while binding
    rejected: int = 0
    restored_jobs: int = 0
    restore_conflicts: int = 0
    cycles: int = 0
    evictions: int = 0
    bound_at: dict[str, float] = field(default_factory=dict)  # pod key -> wall time bound


class Controller(
    PodEvents, PodAdmission, NodeEvents, Decisions, ExtendedAndMigResources, Rebuild, BindHost
):
    def __init__(
        self,
        kube: Kube,
        config: QueueConfig,
        options: Options = Options(),
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.kube = kube
        self.config = config
        self.opt = options
        self.clock = clock
        self.sched: Scheduler | None = None
        self.nodes_by_name: dict[str, Node] = {}
        self.jobs: dict[JobId, JobInfo] = {}
        self.pod_job: dict[str, JobId] = {}
        self.requests: dict[str, PodRequest] = {}
        self.constraints: dict[str, Constraints] = {}
        self.uids: dict[str, str] = {}  # pod key -> UID its decision was made for
        self.rejected: dict[str, str] = {}  # pod key -> reason
        self.gated: dict[str, tuple[str, ...]] = {}  # pod key -> its scheduling gates
        self.backoff: dict[str, tuple[float, float]] = {}  # pod key -> (until, delay)
        self._backoff_timers: set[str] = set()
        self.bad_nodes: dict[str, str] = {}
        self.gangs: dict[JobId, tuple[GangRef, dict[str, PodRequest]]] = {}
        self.gang_of: dict[str, JobId] = {}  # pod key -> the gang it waits in
        # bound pods of jobs the core does not hold yet (bound by another leader), by job
        self.unclaimed: dict[JobId, dict[str, RecordedPlacement]] = {}
        self.unclaimed_job: dict[str, JobId] = {}
        self.job_sizes: dict[str, int] = {}  # ns/job -> parallelism
        self.evicting: dict[str, str] = {}  # pod key -> node, for evicted pods not yet gone
        self.deferred: dict[JobId, tuple[Bind, float]] = {}  # binds waiting for victims
        self.usage = NodeUsage()  # what pods outside the core take of each node
        # extended resources other than GPUs: gpupool's own pods' share (others: usage)
        self.extended = ExtendedLedger(
            self.usage,
            frozenset(options.names.all())
            | frozenset(
                r
                for p in PROTOCOLS
                for r in (*p.resources(), p.capacity_count, p.capacity_cores, p.capacity_memory)
                if r
            ),
        )
        self.extended_asks: dict[str, dict[str, int]] = {}  # pod key -> what it asks
        self.mig = MigLedger()  # the instances on MIG-mode cards, whoever placed them
        self._mig_recheck = False  # MIG-mode nodes changed: pending MIG pods read again
        self.stats = Stats()
        self.measured: MeasuredUse | None = (
            None
            if options.prometheus is None
            else MeasuredUse(
                PrometheusReader(options.prometheus), options.measured, options.measured_interval_s
            )
        )
        self.node_informer = Informer(
            kube,
            "/api/v1/nodes",
            self._on_node,
            name="nodes",
            transform=slim.node,
            shape=lambda _: projection.NODE,
        )
        watched = frozenset({options.scheduler_name, *options.foreign_schedulers})
        self.pod_informer = Informer(
            kube,
            "/api/v1/pods",
            self._on_pod,
            name="pods",
            transform=lambda pod: (
                slim.own_pod(pod)
                if (pod.get("spec") or {}).get("schedulerName") in watched
                else reduce(pod)
            ),
            shape=projection.pod_shape(watched),
        )
        self.namespaces = Namespaces(kube, self._namespace_changed)
        self.elector: LeaseThread | None = None
        if options.leader_elect:  # renewed on its own thread: no cycle can starve it
            self.elector = LeaseThread(
                kube,
                options.lease_namespace,
                options.lease_name,
                options.identity,
                lease_s=options.lease_s,
                renew_s=options.renew_s,
                on_started=self._became_leader,
                on_stopped=self._lost_leadership,
            )
        self._dirty = asyncio.Event()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._leader_ready = asyncio.Event()
        # (smallest card MiB, GPU models): what pod requests are read against; cleared
        # whenever the nodes change
        self._inventory: Inventory | None = None
        self.resubmit_at: dict[str, float] = {}  # pod key -> its first submit time
        self.node_memo = NodeMemo()  # each Node object read once per change gpupool reads
        self.status = StatusWriter(
            kube,
            component=options.scheduler_name,
            identity=options.identity,
            pod=self.pod,
            is_leader=self.is_leader,
            still_waiting=self._still_waiting,
            writes_per_s=options.status_writes_per_s,
            concurrency=options.status_concurrency,
        )
        self.locks = NodeLocks(
            kube,
            self.node_informer.cache.get,
            self._pod_exists,
            expire_s=options.lock_expire_s,
            clock=clock,
        )
        self.binder = PodBinder(
            kube,
            self.locks,
            self,
            concurrency=options.bind_concurrency,
            retry=RetryPolicy(deadline_s=options.bind_retry_s),
            annotate_first=options.annotate_first,
        )
        # attached by k8s/main.py (attach): Elastic GPU objects, queued provisioning
        self.elastic: ElasticHook | None = None
        self.provisioning: ProvisioningHook | None = None
        # waiting bare pods made again in another of their forms (k8s/vendors/switch.py)
        self.switcher = FormSwitcher()

    def attach(
        self, *, elastic: ElasticHook | None = None, provisioning: ProvisioningHook | None = None
    ) -> None:
        """Attach Elastic GPU objects and/or queued provisioning (before :meth:`run`)."""
        if elastic is not None:
            self.elastic = elastic
        if provisioning is not None:
            self.provisioning = provisioning

    @property
    def last_reason(self) -> dict[str, str]:
        return self.status.last

    # -- running ---------------------------------------------------------------------------

    def is_leader(self) -> bool:
        return self.elector.is_leader() if self.elector is not None else True

    def ready(self) -> bool:
        """Whether this replica should receive the extender's and webhook's calls: synced
        and leading (a Service then reaches only the leader)."""
        return self.pod_informer.synced.is_set() and self.sched is not None and self.is_leader()

    async def run(self) -> None:
        """Watch, elect, schedule, until cancelled."""
        informers = [self.node_informer, self.pod_informer]
        if await listable(
            self.kube,
            NAMESPACES,
            "pod affinity terms' namespaceSelectors "
            "and ClusterQueues' namespaceSelectors are not honoured",
        ):
            informers.append(self.namespaces.informer)
        if self.elastic is not None:  # its objects are read before the first rebuild
            informers.extend(self.elastic.informers.values())
        loops = [asyncio.create_task(i.run()) for i in informers]
        waits = list(informers)
        if self.provisioning is not None:  # its informer runs in the adapter's task; its
            waits.append(self.provisioning.informer)  # requests are read back at a rebuild
        try:
            for i in waits:
                await i.synced.wait()
            self.namespaces.watched = self.namespaces.informer in informers
            if self.elector is not None:
                loops.append(asyncio.create_task(self.elector.run()))
            else:
                await self._became_leader()
            loops.append(asyncio.create_task(self._cycle_loop()))
            if self.measured is not None:
                from gpupool.k8s.measured import measured_loop

                loops.append(asyncio.create_task(measured_loop(self, self.measured)))
            await asyncio.gather(*loops)
        finally:
            for t in loops:
                t.cancel()
            for t in list(self._tasks):
                t.cancel()
            await asyncio.gather(*loops, *self._tasks, return_exceptions=True)
            await self.binder.close()
            await self.status.close()
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
        self.binder.drop()  # the old term's decisions are not bound by this replica
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
                    out[key] = (
                        str(p.node),
                        tuple((s.index, s.gpu_milli, s.memory_mib) for s in p.shares),
                    )
        return out
