"""Scheduler: the queue-aware core behind one facade, facts in and decisions out.

Adapters (the simulator, the virtual cluster, Kubernetes) tell it what happened (``submit``,
``finished``, ``cancel``, nodes joining or leaving) with the time as a plain number, and ask
for a ``cycle``. It never reads a clock and does no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from gpupool.core.admission import QuotaTree, placement_demand
from gpupool.core.cluster import ClusterState
from gpupool.core.cycle import Context, release, schedule
from gpupool.core.decisions import CycleResult
from gpupool.core.errors import ConflictError, NotFoundError
from gpupool.core.estimate import estimate_starts
from gpupool.core.fairshare import UsageLedger
from gpupool.core.model import Job, JobId, Node, NodeName, Placement
from gpupool.core.placement.framework import Profile
from gpupool.core.placement.registry import default_profile
from gpupool.core.preemption import Running
from gpupool.core.queueing import Pending, Queues
from gpupool.core.quota import QueueConfig
from gpupool.core.validation import Validator


class Scheduler:
    def __init__(self, nodes: Iterable[Node], config: QueueConfig,
                 profile: Profile | None = None,
                 runtime_hint: Callable[[Job], float] | None = None,
                 reserve_min_gpus: int = 8) -> None:
        """``runtime_hint`` says how long a job is expected to run (for usage charged at
        admission, reservations and wait estimates); by default its declared run limit, else
        the configured default runtime."""
        config.validate()
        settings = config.settings
        self.config = config
        self.state = ClusterState(nodes)
        self.tree = QuotaTree(config)
        self.ledger = UsageLedger(settings.usage_half_life_s)
        self.queues = Queues(config, self.ledger)
        self.validator = Validator()

        def declared(job: Job) -> float:
            return job.run_limit_s if job.run_limit_s is not None else settings.default_runtime_s

        self.ctx = Context(
            state=self.state, tree=self.tree, queues=self.queues, ledger=self.ledger,
            settings=settings, profile=profile or default_profile(),
            runtime=runtime_hint or declared, reserve_min_gpus=reserve_min_gpus,
        )

    # -- facts -----------------------------------------------------------------------------

    def submit(self, job: Job, now_s: float) -> None:
        """Accept a job: InvalidJobError if it can never run here, NotFoundError for an
        unknown queue; nothing changes in either case."""
        self.validator.check(job, self.state.table)
        self.queues.resolve(job.queue)
        if job.id in self.queues or job.id in self.ctx.running:
            raise ConflictError(f"job {job.id} already exists")
        self.queues.add(job)

    def finished(self, job: JobId, now_s: float) -> Running:
        """A running job ended: its cards and quota are free again."""
        if job not in self.ctx.running:
            raise NotFoundError(f"job {job} is not running")
        if self.ctx.reservation is not None and self.ctx.reservation.job == job:
            self.ctx.reservation = None
        return release(self.ctx, job, now_s)

    def cancel(self, job: JobId, now_s: float) -> None:
        """Remove a job, pending or running."""
        if job in self.queues:
            self.queues.remove(job)
            if self.ctx.reservation is not None and self.ctx.reservation.job == job:
                self.ctx.reservation = None
            return
        self.finished(job, now_s)

    def restore(self, job: Job, placements: Iterable[Placement], start_s: float,
                flavor: str = "", preemptions: int = 0) -> Running:
        """A job that was running before a restart runs on where it was: its cards and quota
        are taken again as they were, with no new decision. ConflictError if a card it held
        is taken already (nothing changes then); usage charged before the restart is not
        known and is charged again at its end."""
        self.validator.check(job, self.state.table)
        q = self.queues.resolve(job.queue)
        if job.id in self.queues or job.id in self.ctx.running:
            raise ConflictError(f"job {job.id} already exists")
        held = tuple(placements)
        done: list[Placement] = []
        try:
            for pl in held:
                self.state.assume(pl)
                self.state.confirm(pl.task)
                done.append(pl)
        except Exception:
            for pl in done:
                self.state.forget(pl.task)
            raise
        demand = placement_demand(held, flavor, self.state.table)
        self.tree.add(q, demand)
        r = Running(job, q, flavor, held, demand, start_s, preemptions)
        self.ctx.running[job.id] = r
        return r

    def add_node(self, node: Node) -> None:
        self.state.add_node(node)
        self.queues.wake()

    def update_node(self, node: Node) -> None:
        self.state.update_node(node)
        self.queues.wake()

    def remove_node(self, name: NodeName, now_s: float) -> list[JobId]:
        """A node left: every job with a task there goes back to its queue, whole."""
        hit = sorted({p.job for p in self.state.placements_on(name)})
        for job in hit:
            r = release(self.ctx, job, now_s)
            self.queues.add(r.job, preemptions=r.preemptions)
        self.state.remove_node(name)
        self.ctx.reservation = None
        return hit

    # -- decisions -------------------------------------------------------------------------

    def cycle(self, now_s: float) -> CycleResult:
        return schedule(self.ctx, now_s)

    # -- views -----------------------------------------------------------------------------

    def running(self) -> list[Running]:
        return list(self.ctx.running.values())

    def pending(self) -> list[Pending]:
        return self.queues.all()

    def placements(self, job: JobId) -> tuple[Placement, ...]:
        r = self.ctx.running.get(job)
        return r.placements if r else ()

    def estimates(self, now_s: float, limit: int = 200) -> dict[JobId, tuple[int, float | None]]:
        """Queue position and estimated start time of pending jobs (see core.estimate)."""
        return estimate_starts(self.ctx, now_s, limit)
