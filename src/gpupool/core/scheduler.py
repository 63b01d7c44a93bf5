"""Scheduler: the queue-aware core behind one facade, facts in and decisions out.

Adapters (the simulator, the virtual cluster, Kubernetes) tell it what happened (``submit``,
``finished``, ``cancel``, nodes joining or leaving) with the time as a plain number, and ask
for a ``cycle``. It never reads a clock and does no I/O. A new queue configuration is applied
in place (``update_config``): running jobs, usage and pending jobs are kept.
"""

from __future__ import annotations

from collections.abc import Iterable

from gpupool.core.admission import QuotaTree, placement_demand
from gpupool.core.affinity import PodMeta
from gpupool.core.cluster import ClusterState
from gpupool.core.context import Context, release
from gpupool.core.cycle import schedule
from gpupool.core.decisions import CycleResult
from gpupool.core.errors import ConfigError, ConflictError, InvalidJobError, NotFoundError
from gpupool.core.estimate import Estimate, estimate
from gpupool.core.estimate_provisioning import waiting_on_requests
from gpupool.core.estimate_provisioning_quota import waiting_for_quota
from gpupool.core.fairshare import UsageLedger
from gpupool.core.feasibility import never_admitted
from gpupool.core.model import ClusterQueueName, Job, JobId, Node, NodeName, Placement
from gpupool.core.placement.framework import Code, Profile, Status
from gpupool.core.placement.registry import default_profile
from gpupool.core.preemption import Running
from gpupool.core.provisioning import (
    MAX_ACTIVE_PER_PROJECT,
    AdmissionChecks,
    CheckState,
)
from gpupool.core.queueing import Pending, Queues
from gpupool.core.quota import QueueConfig
from gpupool.core.runtimes import Runtimes
from gpupool.core.scheduler_provisioning import ProvisioningFacts
from gpupool.core.scheduler_queries import SchedulerQueries
from gpupool.core.usage import LoadModel
from gpupool.core.validation import Validator


class Scheduler(ProvisioningFacts, SchedulerQueries):
    def __init__(
        self,
        nodes: Iterable[Node],
        config: QueueConfig,
        profile: Profile | None = None,
        reserve_min_gpus: int = 8,
        max_requests_per_project: int = MAX_ACTIVE_PER_PROJECT,
    ) -> None:
        """How long a job is expected to run (for usage charged at admission, reservations
        and wait estimates) is ``core.runtimes``: declared, learned from the jobs that ended,
        limited, or the configured default. ``max_requests_per_project``: active
        ProvisioningRequests a project (namespace) may hold."""
        config.validate()
        settings = config.settings
        self.config = config
        self._state = ClusterState(nodes)
        self._tree = QuotaTree(config)
        self._idle = QuotaTree(config)  # nothing charged: the most a queue could ever have
        self.ledger = UsageLedger(settings.usage_half_life_s)
        self._queues = Queues(config, self.ledger)
        self.validator = Validator()

        self._ctx = Context(
            state=self._state,
            tree=self._tree,
            queues=self._queues,
            ledger=self.ledger,
            settings=settings,
            profile=profile or default_profile(),
            runtimes=Runtimes(settings.default_runtime_s),
            reserve_min_gpus=reserve_min_gpus,
        )
        self._max_requests = max_requests_per_project
        checks = AdmissionChecks(config, max_requests_per_project)
        self._ctx.checks = checks if checks.configured else None

    @property
    def tree(self) -> QuotaTree:
        """The quota tree itself, for tests that check invariants against it. Adapters ask
        ``usage``, ``nominal``, ``borrowed``, ``share`` and ``entitled``; a test
        (``test_adapters_ask_the_scheduler_and_do_not_reach_inside``) keeps them out."""
        return self._tree

    # -- configuration ---------------------------------------------------------------------

    def update_config(self, config: QueueConfig) -> list[Pending]:
        """Apply a new queue configuration in place, as Kueue applies an edited ClusterQueue:
        running jobs keep their cards and are charged to the new quota tree (a queue may be
        over its new quota; nothing is evicted for that), the users' decayed usage is kept,
        and pending jobs keep their order and are offered again (the quota changed). Pending
        jobs whose queue no longer exists leave the queues and are returned, for the caller
        to report. ConfigError (nothing changes) when the configuration is invalid or changes
        the usage half-life; ConflictError (nothing changes) when a ClusterQueue that still
        holds quota for running jobs, or for jobs waiting on an admission check, is gone."""
        config.validate()
        if config.settings.usage_half_life_s != self.ledger.half_life_s:
            raise ConfigError(
                f"settings.usage_half_life_s={config.settings.usage_half_life_s} cannot change "
                f"in place (it is {self.ledger.half_life_s}); restart to change it",
                field="settings.usage_half_life_s",
                value=config.settings.usage_half_life_s,
                rule="cannot change in place",
            )
        names = {q.name for q in config.cluster_queues}
        ac = self._ctx.checks
        holding = [(r.queue, r.job.id) for r in self._ctx.running.values()]
        if ac is not None:
            holding += [(rec.queue, rec.job.id) for rec in ac.records() if rec.demand]
        gone = sorted((q, str(j)) for q, j in holding if q not in names)
        if gone:
            queue = gone[0][0]
            jobs = [j for q, j in gone if q == queue]
            raise ConflictError(
                f"ClusterQueue {queue} is gone from the configuration but "
                f"still holds quota for {len(jobs)} job(s) ({', '.join(jobs[:5])})"
                "; it stays until they end"
            )
        tree = QuotaTree(config)
        for r in self._ctx.running.values():
            tree.add(r.queue, r.demand)
        if ac is not None:
            for queue, demand in ac.held():
                tree.add(queue, demand)
        dropped = self._queues.reconfigure(config)
        self.config = config
        self._tree = self._ctx.tree = tree
        self._idle = QuotaTree(config)
        self._ctx.settings = config.settings
        self._ctx.runtimes.default_runtime_s = config.settings.default_runtime_s
        self._ctx.reservation = None  # held against the old quota; the next cycle decides again
        if ac is not None:
            ac.reconfigure(config)
        else:
            checks = AdmissionChecks(config, self._max_requests)
            self._ctx.checks = checks if checks.configured else None
        return dropped

    # -- facts -----------------------------------------------------------------------------

    def submit(self, job: Job, now_s: float) -> None:
        """Accept a job: InvalidJobError if it can never run here, NotFoundError for an
        unknown queue; nothing changes in either case. A job of a queue with a provisioning
        admission check is checked against the rules of a ProvisioningRequest instead of the
        cluster's inventory (its nodes do not exist yet). A job no flavor of its ClusterQueue
        could ever admit (its quota too small even with every other queue idle, or the
        flavor's nodes unable to hold it) is refused too (``feasibility.never_admitted``):
        every mode refuses it rather than queue it forever."""
        self.check(job)
        if job.id in self._queues or job.id in self._ctx.running or self._checked(job.id):
            raise ConflictError(f"job {job.id} already exists")
        p = self._queues.add(job)
        self._ctx.arrivals.record(p.queue, job, now_s)

    def check(self, job: Job) -> str:
        """The checks of ``submit`` without queueing the job: its ClusterQueue if it could
        ever run here; InvalidJobError (or NotFoundError for an unknown queue) otherwise."""
        provisioned = self._provisioned_queue(job.queue)
        if provisioned is not None and self._ctx.checks is not None:
            self._ctx.checks.validate(job, provisioned)
        else:
            self.validator.check(job, self._state.table)
        cq = self._queues.resolve(job.queue)
        refused = never_admitted(job, cq, self._idle, self._state.table, nodes=provisioned is None)
        if refused is not None:
            raise refused
        return cq

    def queue_again(self, job: Job, preemptions: int = 0) -> Pending:
        """A job accepted before a restart that the checks of ``submit`` would refuse now
        (the nodes it needs are away): it waits in its queue, parked with its reason, until
        they are back."""
        return self._queues.add(job, preemptions=preemptions)

    def _provisioned_queue(self, queue: str) -> str | None:
        """The ClusterQueue behind ``queue`` when it has a provisioning check, else None (also
        for an unknown queue: the usual checks report it)."""
        if self._ctx.checks is None:
            return None
        try:
            cq = self._queues.resolve(queue)
        except NotFoundError:
            return None
        return cq if self._ctx.checks.check_for(cq) is not None else None

    def _checked(self, job: JobId) -> bool:
        return self._ctx.checks is not None and self._ctx.checks.record(job) is not None

    def finished(self, job: JobId, now_s: float) -> Running:
        """A running job ended: its cards and quota are free again."""
        if job not in self._ctx.running:
            raise NotFoundError(f"job {job} is not running")
        if self._ctx.reservation is not None and self._ctx.reservation.job == job:
            self._ctx.reservation = None
        self._unbook(job, now_s)
        r = release(self._ctx, job, now_s)
        self._ctx.runtimes.observe(r.job, now_s - r.start_s, r.start_s)
        return r

    def _unbook(self, job: JobId, now_s: float) -> Job | None:
        """A job that ran on provisioned nodes is done with them: its request is deleted.
        Returns the job as submitted (its run limit not cut to the request's)."""
        ac = self._ctx.checks
        return ac.unbook(job, now_s) if ac is not None else None

    def cancel(self, job: JobId, now_s: float) -> None:
        """Remove a job, pending or running. A job waiting on a provisioning check gives back
        the quota it reserved; its request is deleted (cancelled), unless it is Provisioned
        already: then the booking is kept until it expires, for the next job of the queue
        that fits its nodes."""
        ac = self._ctx.checks
        rec = ac.cancel(job, now_s) if ac is not None else None
        if rec is not None:
            if rec.demand:
                self._tree.add(rec.queue, rec.demand, -1)
                self._queues.wake()
            if job not in self._queues:
                return
        if job in self._queues:
            self._queues.remove(job)
            if self._ctx.reservation is not None and self._ctx.reservation.job == job:
                self._ctx.reservation = None
            return
        self.finished(job, now_s)

    def restore(
        self,
        job: Job,
        placements: Iterable[Placement],
        start_s: float,
        flavor: str = "",
        preemptions: int = 0,
        alternative: str = "",
    ) -> Running:
        """A job that was running before a restart runs on where it was: its cards and quota
        are taken again as they were, in the form it ran as (``alternative``), with no new
        decision. ConflictError if a card it held is taken already (nothing changes then);
        usage charged before the restart is not known and is charged again at its end."""
        if alternative and all(a.name != alternative for a in job.alternatives):
            raise InvalidJobError(
                "alternative",
                alternative,
                f"must name one of the job's alternatives {[a.name for a in job.alternatives]}",
                job.id,
            )
        self.validator.check(job, self._state.table)
        q = self._queues.resolve(job.queue)
        if job.id in self._queues or job.id in self._ctx.running:
            raise ConflictError(f"job {job.id} already exists")
        held = tuple(placements)
        done: list[Placement] = []
        try:
            for pl in held:
                self._state.assume(pl)
                self._state.confirm(pl.task)
                done.append(pl)
        except Exception:
            for pl in done:
                self._state.forget(pl.task)
            raise
        demand = placement_demand(held, flavor, self._state.table, self._tree.normalized)
        self._tree.add(q, demand)
        r = Running(job, q, flavor, held, demand, start_s, preemptions, alternative=alternative)
        self._ctx.running[job.id] = r
        self._ctx.runtimes.started(job, start_s)
        return r

    def add_node(self, node: Node) -> None:
        self._state.add_node(node)
        self._queues.wake()

    def update_node(self, node: Node) -> None:
        self._state.update_node(node)
        self._queues.wake()

    def requeue(self, job: JobId, now_s: float) -> None:
        """A running job goes back to its queue, whole, its cards freed (its node is being
        drained); as for a node that left, with the node kept."""
        submitted = self._unbook(job, now_s)
        r = release(self._ctx, job, now_s)
        self._queues.add(submitted or r.job, preemptions=r.preemptions)

    def set_outside(self, name: NodeName, cpu_milli: int, memory_mib: int) -> None:
        """What pods this scheduler does not place (DaemonSets, other schedulers' pods)
        hold of a node's CPU and memory; less than before wakes the parked jobs."""
        t = self._state.table
        i = t.row(name)
        freed = cpu_milli < t.cpu_outside[i] or memory_mib < t.mem_outside[i]
        self._state.set_outside(name, cpu_milli, memory_mib)
        if freed:
            self._queues.wake()

    def set_binds_in_flight(self, name: NodeName, count: int) -> None:
        """How many GPU placements on the node are still being bound (an adapter whose binds
        go one at a time per node, as under HAMi's node lock, says so before each cycle);
        read by the ``bind-queue`` score."""
        self._state.set_binds_in_flight(name, max(0, count))

    def binds_in_flight(self) -> dict[NodeName, int]:
        """The nodes whose count of GPU binds in flight is not 0, with it (what the adapter
        last said plus the GPU placements taken since)."""
        t = self._state.table
        live = t.live()
        rows = live[t.binds_in_flight[live] > 0]
        return {t.nodes[i].name: int(t.binds_in_flight[i]) for i in rows.tolist()}

    def set_pod(self, key: str, node: NodeName | None, meta: PodMeta | None = None) -> None:
        """A pod this scheduler does not place, on ``node`` with ``meta`` (its namespace,
        labels, anti-affinity), as pod affinity and topology spread count it; ``node`` None:
        it left. A change wakes the parked jobs (an affinity or a spread may now hold)."""
        before = self._state.pods.version
        self._state.set_pod(key, node, meta)
        if self._state.pods.version != before:
            self._queues.wake()

    def remove_node(self, name: NodeName, now_s: float) -> list[JobId]:
        """A node left: every job with a task there goes back to its queue, whole."""
        hit = sorted({p.job for p in self._state.placements_on(name) if p.job in self._ctx.running})
        for job in hit:
            submitted = self._unbook(job, now_s)
            r = release(self._ctx, job, now_s)
            self._queues.add(submitted or r.job, preemptions=r.preemptions)
        self._state.remove_node(name)
        if self._ctx.checks is not None:
            self._ctx.checks.node_left(name, now_s)
        self._ctx.reservation = None
        return hit

    def use_measurements(self, model: LoadModel | None) -> None:
        """Place by measured use from ``model`` (``core.usage``) from the next cycle on, with a
        profile that names the measured plugins; None: by requests alone."""
        self._ctx.usage = model

    @property
    def measured_use(self) -> LoadModel | None:
        """The load model placement reads (None: by requests alone)."""
        return self._ctx.usage

    # -- decisions -------------------------------------------------------------------------

    def cycle(self, now_s: float) -> CycleResult:
        return schedule(self._ctx, now_s)

    # -- views -----------------------------------------------------------------------------

    def running(self) -> list[Running]:
        return list(self._ctx.running.values())

    def pending(self) -> list[Pending]:
        """Pending jobs: those in the queues, then those past quota waiting on an admission
        check (parked, with the check's state as the reason)."""
        out = self._queues.all()
        ac = self._ctx.checks
        if ac is not None:
            for rec in ac.records():
                if rec.job.id in self._queues:
                    continue
                code = Code.UNRESOLVABLE if rec.state is CheckState.REJECTED else Code.WAIT
                out.append(
                    Pending(
                        rec.job,
                        ClusterQueueName(rec.queue),
                        0,
                        Status(code, (ac.reason(rec),)),
                        parked=True,
                        preemptions=rec.preemptions,
                    )
                )
        return out

    def run_limit_s(self, job: JobId) -> float | None:
        """The run limit a running job was admitted with: its own, or less when the
        provisioning booking it runs on ends sooner (``maxRunDurationSeconds``)."""
        r = self._ctx.running.get(job)
        return r.job.run_limit_s if r is not None else None

    def placements(self, job: JobId) -> tuple[Placement, ...]:
        r = self._ctx.running.get(job)
        return r.placements if r else ()

    def estimates(self, now_s: float, limit: int = 200) -> dict[JobId, tuple[int, float | None]]:
        """Queue position and estimated start time of pending jobs (``estimate_details``
        without the basis)."""
        return {j: (e.position, e.start_s) for j, e in self.estimate_details(now_s, limit).items()}

    def estimate_details(self, now_s: float, limit: int = 200) -> dict[JobId, Estimate]:
        """Queue position, estimated start and what it rests on, per pending job (see
        core.estimate).

        Jobs of queues with a provisioning check start when the cloud delivers: a job still
        queued for quota when the quota it needs is expected free, its request made then and
        served in its class's queue; one whose request is active is expected when the cloud
        has room for it and has made it (``core.estimate_provisioning``); once Provisioned, at
        the next cycle."""
        out = estimate(self._ctx, now_s, limit)
        ac = self._ctx.checks
        if ac is not None:
            recs = [rec for rec in ac.records() if rec.job.id not in self._queues]
            on_requests = waiting_on_requests(self._ctx, recs, now_s)
            queued = [
                (out[p.job.id].position, p)
                for p in self._queues.all()
                if ac.check_for(p.queue) is not None and p.job.id in out
            ]
            for jid, e in waiting_for_quota(self._ctx, queued, on_requests, now_s).items():
                out[jid] = Estimate(out[jid].position, e.start_s, e.basis)
            out.update(on_requests)
        return out

    def expected_end_s(self, job: JobId) -> float | None:
        """When a running job is expected to end (its start plus its expected runtime, never
        past its run limit); None if it is not running."""
        r = self._ctx.running.get(job)
        if r is None:
            return None
        end = r.start_s + self._ctx.runtimes(r.job)
        if r.job.run_limit_s is not None:
            end = min(end, r.start_s + r.job.run_limit_s)
        return end
