"""The Scheduler's answers to adapters: queues, quota, nodes and cards as they stand, Elastic
GPU binders on its cards, and what an outside scheduler (the extender) asks of its profile."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from gpupool.core import occupancy
from gpupool.core.admission import Key, QuotaTree, Vec, try_admit
from gpupool.core.cluster import ClusterState
from gpupool.core.context import Context
from gpupool.core.elastic import Binder, ElasticGPUClass
from gpupool.core.errors import ConflictError
from gpupool.core.feasibility import flavor_problem
from gpupool.core.model import ClusterQueueName, Job, JobId, Node, NodeName, Placement, Task
from gpupool.core.occupancy import NodeUse
from gpupool.core.placement.framework import CycleState, Profile, Status
from gpupool.core.placement.place import feasible, normalized_scores
from gpupool.core.preemption import Running
from gpupool.core.queueing import Pending, Queues
from gpupool.core.quota import QueueConfig, ResourceFlavor
from gpupool.core.reasons import plugins
from gpupool.core.snapshot import Reservation
from gpupool.core.table import NodeTable
from gpupool.core.validation import Validator


class SchedulerQueries:
    """Part of ``Scheduler``: questions, and the few commands adapters give besides facts."""

    _state: ClusterState
    _tree: QuotaTree
    _queues: Queues
    config: QueueConfig
    validator: Validator
    _ctx: Context

    if TYPE_CHECKING:

        def pending(self) -> list[Pending]: ...

    # -- questions adapters ask ------------------------------------------------------------

    def resolve_queue(self, queue: str) -> ClusterQueueName:
        """The ClusterQueue a job naming ``queue`` (a LocalQueue, ``namespace/name``, or a
        ClusterQueue) goes to; NotFoundError naming the known queues otherwise."""
        return self._queues.resolve(queue)

    def is_pending(self, job: JobId) -> bool:
        return job in self._queues

    def pending_job(self, job: JobId) -> Pending | None:
        return self._queues.get(job)

    def running_job(self, job: JobId) -> Running | None:
        return self._ctx.running.get(job)

    def pending_count(self) -> int:
        return len(self._queues)

    def pending_reasons(self) -> dict[str, int]:
        """Pending jobs by what holds them back: for each plugin (a filter's name or a step
        of the core, ``core.reasons``), the jobs with at least one reason it gave; a job
        held back by two plugins counts under both (kube-scheduler's
        ``unschedulable_pods{plugin}``). Jobs not yet tried have no reason and are not
        counted."""
        out: dict[str, int] = {}
        for p in self.pending():
            if p.reason is None:
                continue
            for plugin in plugins(p.reason.reasons):
                out[plugin] = out.get(plugin, 0) + 1
        return out

    @property
    def profile(self) -> Profile:
        return self._ctx.profile

    def reservation(self) -> Reservation | None:
        """The room held for a waiting large gang (backfill), if any."""
        return self._ctx.reservation

    def nominated(self) -> list[JobId]:
        """Preemptors whose victims are being evicted: tried first at the next cycle."""
        return list(self._ctx.nominated)

    def usage(self, cq: str) -> Vec:
        """Quota a ClusterQueue holds now, per (flavor, resource)."""
        return self._tree.usage(cq)

    def nominal(self, cq: str) -> Vec:
        return self._tree.nominal(cq)

    def share(self, cq: str) -> float:
        """A ClusterQueue's weighted dominant share now (its key in the fair order)."""
        return self._tree.share(cq)

    def flavors_of(self, cq: str) -> list[str]:
        """The ClusterQueue's flavors, in the order it tries them ([] for an unknown one)."""
        q = self._tree.queues.get(cq)
        return [fq.flavor for fq in q.flavors] if q is not None else []

    def flavor(self, name: str) -> ResourceFlavor | None:
        return self._tree.flavors.get(name)

    def usable_flavors(self, job: Job, cq: str) -> set[str]:
        """The flavors of ClusterQueue ``cq`` whose nodes, empty, could hold ``job``
        (``feasibility.flavor_problem``)."""
        t = self._state.table
        return {
            f
            for f in self.flavors_of(cq)
            if flavor_problem(job, self._tree.flavors.get(f), t) is None
        }

    @property
    def nodes_version(self) -> int:
        """Moves whenever a node joins, leaves or changes: answers about nodes stay valid
        while it stands."""
        return self._state.table.version

    def placements_on(self, node: NodeName) -> list[Placement]:
        """What is placed on a node now (jobs and ElasticGPUs alike)."""
        return list(self._state.placements_on(node))

    def totals(self) -> dict[str, int]:
        """Cluster-wide counts of cards and compute, total and in use."""
        return self._state.totals()

    def node_use(self, node: NodeName) -> NodeUse | None:
        """What a live node holds now: CPU, memory, and each card's use (MIG cards valued by
        ``core.mig``); None for a node that is not live."""
        t = self._state.table
        row = t.index.get(node)
        return occupancy.node_use(t, row) if row is not None else None

    def nodes_use(self) -> list[NodeUse]:
        """``node_use`` of every live node, in the table's order."""
        t = self._state.table
        return [occupancy.node_use(t, i) for i in t.live().tolist()]

    def fragmentation(self) -> tuple[int, int]:
        """(free compute, the part of it fragmented) in milli-GPU (``core.occupancy``)."""
        return occupancy.fragmentation(self._state.table)

    def borrowed(self, cq: str) -> Vec:
        """Quota a ClusterQueue holds beyond its nominal quota, per (flavor, resource)."""
        return self._tree.borrowed(cq)

    def entitled_gpus(self, cq: str) -> float:
        """The GPUs a ClusterQueue is entitled to now (nominal first, then its cohort's own
        quota by weight): what its share is measured against."""
        return self._tree.entitled_gpus(cq)

    def entitled(self, cq: str) -> dict[Key, float]:
        """``entitled_gpus`` per (flavor, resource)."""
        return self._tree.entitled(cq)

    def node_table(self) -> NodeTable:
        """The node table, for the measured-use load model's views only (``core.usage``
        reads cards by table row); every other question has its query here."""
        return self._state.table

    def node(self, name: NodeName) -> Node | None:
        """A live node as the scheduler knows it (None for one that is not live)."""
        t = self._state.table
        row = t.index.get(name)
        return t.nodes[row] if row is not None else None

    def node_list(self) -> list[Node]:
        """The live nodes, in the table's order."""
        return list(self._state.nodes())

    @property
    def pods_version(self) -> int:
        """Moves whenever a pod this scheduler does not place changes (``set_pod``)."""
        return self._state.pods.version

    def confirm(self, placements: Iterable[Placement]) -> None:
        """The adapter bound these placements (see ``ClusterState.confirm``)."""
        for pl in placements:
            self._state.confirm(pl.task)

    def wake(self) -> None:
        """Something outside the core freed capacity (an ElasticGPU let go of its card): the
        parked jobs are offered again at the next cycle."""
        self._queues.wake()

    # -- elastic GPU objects ------------------------------------------------------------------

    def new_binder(self, classes: Iterable[ElasticGPUClass] = ()) -> Binder:
        """A binder of ElasticGPU objects on this scheduler's cards, with its profile: jobs and
        ElasticGPUs see each other's cards taken."""
        return Binder(self._state, self._ctx.profile, classes)

    def holds(self, binder: Binder) -> bool:
        """Whether ``binder`` is on this scheduler's cards (not one of a former scheduler)."""
        return binder.state is self._state

    # -- questions from outside schedulers (the extender) ----------------------------------

    def validate(self, job: Job) -> None:
        """InvalidJobError when no node of the cluster could ever hold ``job`` (the inventory
        check of ``submit``, without its queue)."""
        self.validator.check(job, self._state.table)

    def admissible_form(self, job: Job) -> str | None:
        """The form the job's queue would admit now: the name of one of its alternatives, ""
        for its own request, None when no form fits now (flavors in the queue's order, the
        job's own form first in each)."""
        cq = self._queues.resolve(job.queue)
        fit, _ = try_admit(job, cq, self._tree, self._state.snapshot(), self._ctx.profile)
        return None if fit is None else fit.alternative

    def feasible_nodes(self, task: Task) -> tuple[list[NodeName], Status]:
        """The nodes that pass every filter of the profile for ``task`` now; when none does,
        the Status says why, with counts."""
        snap = self._state.snapshot()
        rows, status = feasible(task, snap, self._ctx.profile)
        return [snap.table.nodes[int(r)].name for r in rows], status

    def node_scores(self, task: Task) -> dict[NodeName, float]:
        """What each feasible node scores for ``task`` in the profile, 0..100 (the weighted
        sum of ``place_task``, scaled back by the weights of the plugins that had a say)."""
        snap = self._state.snapshot()
        rows, _ = feasible(task, snap, self._ctx.profile)
        if not rows.size:
            return {}
        scores = normalized_scores(task, snap, self._ctx.profile, rows)
        return {snap.table.nodes[int(r)].name: float(s) for r, s in zip(rows, scores, strict=True)}

    def place_on(self, task: Task, node: NodeName) -> Placement:
        """The placement of ``task`` on ``node`` (its cards chosen by the profile), without
        assuming it; ConflictError when the node does not fit it now."""
        snap = self._state.snapshot()
        rows, status = feasible(task, snap, self._ctx.profile)
        row = snap.table.index.get(node)
        if row is None or row not in {int(r) for r in rows}:
            raise ConflictError(f"pod no longer fits on {node}: {status.message}")
        cs = CycleState(snap.table, snap.cache, pods=snap.pods)
        shares = self._ctx.profile.cards.choose_cards(cs, task, row)
        if shares is None:
            raise ConflictError(f"no cards for the pod on {node}")
        return Placement(
            task=task.id,
            job=task.job,
            node=node,
            cpu_milli=task.cpu_milli,
            memory_mib=task.memory_mib,
            shares=shares,
        )
