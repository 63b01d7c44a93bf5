"""The Scheduler's answers to adapters: queues, quota, nodes and cards as they stand, Elastic
GPU binders on its cards, and what an outside scheduler (the extender) asks of its profile."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from gpupool.core.admission import QuotaTree, Vec, try_admit
from gpupool.core.cluster import ClusterState
from gpupool.core.context import Context
from gpupool.core.elastic import Binder, ElasticGPUClass
from gpupool.core.errors import ConflictError
from gpupool.core.feasibility import flavor_problem
from gpupool.core.model import Job, JobId, Node, NodeName, Placement, Task
from gpupool.core.placement.framework import CycleState, Profile, Status
from gpupool.core.placement.place import feasible, normalized_scores
from gpupool.core.preemption import Running
from gpupool.core.queueing import Pending, Queues
from gpupool.core.quota import QueueConfig, ResourceFlavor
from gpupool.core.reasons import plugins
from gpupool.core.snapshot import Reservation
from gpupool.core.validation import Validator


class SchedulerQueries:
    """Part of ``Scheduler``: questions, and the few commands adapters give besides facts."""

    state: ClusterState
    tree: QuotaTree
    queues: Queues
    config: QueueConfig
    validator: Validator
    _ctx: Context

    if TYPE_CHECKING:
        def pending(self) -> list[Pending]: ...

    # -- questions adapters ask ------------------------------------------------------------

    def resolve_queue(self, queue: str) -> str:
        """The ClusterQueue a job naming ``queue`` (a LocalQueue, ``namespace/name``, or a
        ClusterQueue) goes to; NotFoundError naming the known queues otherwise."""
        return self.queues.resolve(queue)

    def is_pending(self, job: JobId) -> bool:
        return job in self.queues

    def pending_job(self, job: JobId) -> Pending | None:
        return self.queues.get(job)

    def running_job(self, job: JobId) -> Running | None:
        return self._ctx.running.get(job)

    def pending_count(self) -> int:
        return len(self.queues)

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
        return self.tree.usage(cq)

    def nominal(self, cq: str) -> Vec:
        return self.tree.nominal(cq)

    def share(self, cq: str) -> float:
        """A ClusterQueue's weighted dominant share now (its key in the fair order)."""
        return self.tree.share(cq)

    def flavors_of(self, cq: str) -> list[str]:
        """The ClusterQueue's flavors, in the order it tries them ([] for an unknown one)."""
        q = self.tree.queues.get(cq)
        return [fq.flavor for fq in q.flavors] if q is not None else []

    def flavor(self, name: str) -> ResourceFlavor | None:
        return self.tree.flavors.get(name)

    def usable_flavors(self, job: Job, cq: str) -> set[str]:
        """The flavors of ClusterQueue ``cq`` whose nodes, empty, could hold ``job``
        (``feasibility.flavor_problem``)."""
        t = self.state.table
        return {f for f in self.flavors_of(cq)
                if flavor_problem(job, self.tree.flavors.get(f), t) is None}

    @property
    def nodes_version(self) -> int:
        """Moves whenever a node joins, leaves or changes: answers about nodes stay valid
        while it stands."""
        return self.state.table.version

    def placements_on(self, node: NodeName) -> list[Placement]:
        """What is placed on a node now (jobs and ElasticGPUs alike)."""
        return list(self.state.placements_on(node))

    def totals(self) -> dict[str, int]:
        """Cluster-wide counts of cards and compute, total and in use."""
        return self.state.totals()

    def node_list(self) -> list[Node]:
        """The live nodes, in the table's order."""
        return list(self.state.nodes())

    @property
    def pods_version(self) -> int:
        """Moves whenever a pod this scheduler does not place changes (``set_pod``)."""
        return self.state.pods.version

    def confirm(self, placements: Iterable[Placement]) -> None:
        """The adapter bound these placements (see ``ClusterState.confirm``)."""
        for pl in placements:
            self.state.confirm(pl.task)

    def wake(self) -> None:
        """Something outside the core freed capacity (an ElasticGPU let go of its card): the
        parked jobs are offered again at the next cycle."""
        self.queues.wake()

    # -- elastic GPU objects ------------------------------------------------------------------


    def new_binder(self, classes: Iterable[ElasticGPUClass] = ()) -> Binder:
        """A binder of ElasticGPU objects on this scheduler's cards, with its profile: jobs and
        ElasticGPUs see each other's cards taken."""
        return Binder(self.state, self._ctx.profile, classes)

    def holds(self, binder: Binder) -> bool:
        """Whether ``binder`` is on this scheduler's cards (not one of a former scheduler)."""
        return binder.state is self.state

    # -- questions from outside schedulers (the extender) ----------------------------------

    def validate(self, job: Job) -> None:
        """InvalidJobError when no node of the cluster could ever hold ``job`` (the inventory
        check of ``submit``, without its queue)."""
        self.validator.check(job, self.state.table)

    def admissible_form(self, job: Job) -> str | None:
        """The form the job's queue would admit now: the name of one of its alternatives, ""
        for its own request, None when no form fits now (flavors in the queue's order, the
        job's own form first in each)."""
        cq = self.queues.resolve(job.queue)
        fit, _ = try_admit(job, cq, self.tree, self.state.snapshot(), self._ctx.profile)
        return None if fit is None else fit.alternative

    def feasible_nodes(self, task: Task) -> tuple[list[NodeName], Status]:
        """The nodes that pass every filter of the profile for ``task`` now; when none does,
        the Status says why, with counts."""
        snap = self.state.snapshot()
        rows, status = feasible(task, snap, self._ctx.profile)
        return [snap.table.nodes[int(r)].name for r in rows], status

    def node_scores(self, task: Task) -> dict[NodeName, float]:
        """What each feasible node scores for ``task`` in the profile, 0..100 (the weighted
        sum of ``place_task``, scaled back by the weights of the plugins that had a say)."""
        snap = self.state.snapshot()
        rows, _ = feasible(task, snap, self._ctx.profile)
        if not rows.size:
            return {}
        scores = normalized_scores(task, snap, self._ctx.profile, rows)
        return {snap.table.nodes[int(r)].name: float(s)
                for r, s in zip(rows, scores, strict=True)}

    def place_on(self, task: Task, node: NodeName) -> Placement:
        """The placement of ``task`` on ``node`` (its cards chosen by the profile), without
        assuming it; ConflictError when the node does not fit it now."""
        snap = self.state.snapshot()
        rows, status = feasible(task, snap, self._ctx.profile)
        row = snap.table.index.get(node)
        if row is None or row not in {int(r) for r in rows}:
            raise ConflictError(f"pod no longer fits on {node}: {status.message}")
        cs = CycleState(snap.table, snap.cache, pods=snap.pods)
        shares = self._ctx.profile.cards.choose_cards(cs, task, row)
        if shares is None:
            raise ConflictError(f"no cards for the pod on {node}")
        return Placement(task=task.id, job=task.job, node=node, cpu_milli=task.cpu_milli,
                         memory_mib=task.memory_mib, shares=shares)
