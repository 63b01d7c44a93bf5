"""Scheduler: the queue-aware core behind one facade, facts in and decisions out.

Adapters (the simulator, the virtual cluster, Kubernetes) tell it what happened (``submit``,
``finished``, ``cancel``, nodes joining or leaving) with the time as a plain number, and ask
for a ``cycle``. It never reads a clock and does no I/O. A new queue configuration is applied
in place (``update_config``): running jobs, usage and pending jobs are kept.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from gpupool.core.admission import QuotaTree, Vec, placement_demand, request_demand
from gpupool.core.affinity import PodMeta
from gpupool.core.cluster import ClusterState
from gpupool.core.context import Context, release
from gpupool.core.cycle import schedule
from gpupool.core.decisions import CycleResult
from gpupool.core.elastic import Binder, ElasticGPUClass
from gpupool.core.errors import ConfigError, ConflictError, NotFoundError
from gpupool.core.estimate import Estimate, estimate
from gpupool.core.fairshare import UsageLedger
from gpupool.core.feasibility import flavor_problem, never_admitted
from gpupool.core.model import Job, JobId, Node, NodeName, Placement, Task
from gpupool.core.placement.framework import Code, CycleState, Profile, Status
from gpupool.core.placement.place import feasible, normalized_scores
from gpupool.core.placement.registry import default_profile
from gpupool.core.preemption import Running
from gpupool.core.provisioning import (
    MAX_ACTIVE_PER_PROJECT,
    AdmissionChecks,
    CheckRecord,
    CheckState,
    ProvisioningRequest,
    ProvisioningState,
)
from gpupool.core.queueing import Pending, Queues
from gpupool.core.quota import QueueConfig, ResourceFlavor
from gpupool.core.runtimes import Runtimes
from gpupool.core.snapshot import Reservation
from gpupool.core.validation import Validator


class Scheduler:
    def __init__(self, nodes: Iterable[Node], config: QueueConfig,
                 profile: Profile | None = None,
                 reserve_min_gpus: int = 8,
                 max_requests_per_project: int = MAX_ACTIVE_PER_PROJECT) -> None:
        """How long a job is expected to run (for usage charged at admission, reservations
        and wait estimates) is ``core.runtimes``: declared, learned from the jobs that ended,
        limited, or the configured default. ``max_requests_per_project``: active
        ProvisioningRequests a project (namespace) may hold."""
        config.validate()
        settings = config.settings
        self.config = config
        self.state = ClusterState(nodes)
        self.tree = QuotaTree(config)
        self._idle = QuotaTree(config)  # nothing charged: the most a queue could ever have
        self.ledger = UsageLedger(settings.usage_half_life_s)
        self.queues = Queues(config, self.ledger)
        self.validator = Validator()

        self._ctx = Context(
            state=self.state, tree=self.tree, queues=self.queues, ledger=self.ledger,
            settings=settings, profile=profile or default_profile(),
            runtimes=Runtimes(settings.default_runtime_s), reserve_min_gpus=reserve_min_gpus,
        )
        self._max_requests = max_requests_per_project
        checks = AdmissionChecks(config, max_requests_per_project)
        self._ctx.checks = checks if checks.configured else None

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
                field="settings.usage_half_life_s", value=config.settings.usage_half_life_s,
                rule="cannot change in place")
        names = {q.name for q in config.cluster_queues}
        ac = self._ctx.checks
        holding = [(r.queue, r.job.id) for r in self._ctx.running.values()]
        if ac is not None:
            holding += [(rec.queue, rec.job.id) for rec in ac.records() if rec.demand]
        gone = sorted((q, str(j)) for q, j in holding if q not in names)
        if gone:
            queue = gone[0][0]
            jobs = [j for q, j in gone if q == queue]
            raise ConflictError(f"ClusterQueue {queue} is gone from the configuration but "
                                f"still holds quota for {len(jobs)} job(s) ({', '.join(jobs[:5])})"
                                "; it stays until they end")
        tree = QuotaTree(config)
        for r in self._ctx.running.values():
            tree.add(r.queue, r.demand)
        if ac is not None:
            for queue, demand in ac.held():
                tree.add(queue, demand)
        dropped = self.queues.reconfigure(config)
        self.config = config
        self.tree = self._ctx.tree = tree
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
        if job.id in self.queues or job.id in self._ctx.running or self._checked(job.id):
            raise ConflictError(f"job {job.id} already exists")
        p = self.queues.add(job)
        self._ctx.arrivals.record(p.queue, job, now_s)

    def check(self, job: Job) -> str:
        """The checks of ``submit`` without queueing the job: its ClusterQueue if it could
        ever run here; InvalidJobError (or NotFoundError for an unknown queue) otherwise."""
        provisioned = self._provisioned_queue(job.queue)
        if provisioned is not None and self._ctx.checks is not None:
            self._ctx.checks.validate(job, provisioned)
        else:
            self.validator.check(job, self.state.table)
        cq = self.queues.resolve(job.queue)
        refused = never_admitted(job, cq, self._idle, self.state.table,
                                 nodes=provisioned is None)
        if refused is not None:
            raise refused
        return cq

    def queue_again(self, job: Job, preemptions: int = 0) -> Pending:
        """A job accepted before a restart that the checks of ``submit`` would refuse now
        (the nodes it needs are away): it waits in its queue, parked with its reason, until
        they are back."""
        return self.queues.add(job, preemptions=preemptions)

    def _provisioned_queue(self, queue: str) -> str | None:
        """The ClusterQueue behind ``queue`` when it has a provisioning check, else None (also
        for an unknown queue: the usual checks report it)."""
        if self._ctx.checks is None:
            return None
        try:
            cq = self.queues.resolve(queue)
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
        self._unbook(job)
        r = release(self._ctx, job, now_s)
        self._ctx.runtimes.observe(r.job, now_s - r.start_s)
        return r

    def _unbook(self, job: JobId) -> Job | None:
        """A job that ran on provisioned nodes is done with them: its request is deleted.
        Returns the job as submitted (its run limit not cut to the request's)."""
        ac = self._ctx.checks
        return ac.unbook(job) if ac is not None else None

    def cancel(self, job: JobId, now_s: float) -> None:
        """Remove a job, pending or running. A job waiting on a provisioning check gives back
        the quota it reserved; its request is deleted (cancelled), unless it is Provisioned
        already: then the booking is kept until it expires, for the next job of the queue
        that fits its nodes."""
        ac = self._ctx.checks
        rec = ac.cancel(job) if ac is not None else None
        if rec is not None:
            if rec.demand:
                self.tree.add(rec.queue, rec.demand, -1)
                self.queues.wake()
            if job not in self.queues:
                return
        if job in self.queues:
            self.queues.remove(job)
            if self._ctx.reservation is not None and self._ctx.reservation.job == job:
                self._ctx.reservation = None
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
        if job.id in self.queues or job.id in self._ctx.running:
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
        self._ctx.running[job.id] = r
        self._ctx.runtimes.started(job, start_s)
        return r

    def add_node(self, node: Node) -> None:
        self.state.add_node(node)
        self.queues.wake()

    def update_node(self, node: Node) -> None:
        self.state.update_node(node)
        self.queues.wake()

    def requeue(self, job: JobId, now_s: float) -> None:
        """A running job goes back to its queue, whole, its cards freed (its node is being
        drained); as for a node that left, with the node kept."""
        submitted = self._unbook(job)
        r = release(self._ctx, job, now_s)
        self.queues.add(submitted or r.job, preemptions=r.preemptions)

    def set_outside(self, name: NodeName, cpu_milli: int, memory_mib: int) -> None:
        """What pods this scheduler does not place (DaemonSets, other schedulers' pods)
        hold of a node's CPU and memory; less than before wakes the parked jobs."""
        t = self.state.table
        i = t.row(name)
        freed = cpu_milli < t.cpu_outside[i] or memory_mib < t.mem_outside[i]
        self.state.set_outside(name, cpu_milli, memory_mib)
        if freed:
            self.queues.wake()

    def set_pod(self, key: str, node: NodeName | None, meta: PodMeta | None = None) -> None:
        """A pod this scheduler does not place, on ``node`` with ``meta`` (its namespace,
        labels, anti-affinity), as pod affinity and topology spread count it; ``node`` None:
        it left. A change wakes the parked jobs (an affinity or a spread may now hold)."""
        before = self.state.pods.version
        self.state.set_pod(key, node, meta)
        if self.state.pods.version != before:
            self.queues.wake()

    def remove_node(self, name: NodeName, now_s: float) -> list[JobId]:
        """A node left: every job with a task there goes back to its queue, whole."""
        hit = sorted({p.job for p in self.state.placements_on(name)
                      if p.job in self._ctx.running})
        for job in hit:
            submitted = self._unbook(job)
            r = release(self._ctx, job, now_s)
            self.queues.add(submitted or r.job, preemptions=r.preemptions)
        self.state.remove_node(name)
        self._ctx.reservation = None
        return hit

    # -- provisioning: facts from the cloud ---------------------------------------------------

    @property
    def checks(self) -> AdmissionChecks | None:
        """The provisioning admission checks (None when no queue names one)."""
        return self._ctx.checks

    def _book(self) -> AdmissionChecks:
        if self._ctx.checks is None:
            self._ctx.checks = AdmissionChecks(self.config, self._max_requests)
        return self._ctx.checks

    def provisioning_requests(self) -> list[ProvisioningRequest]:
        return self._ctx.checks.requests() if self._ctx.checks is not None else []

    def provisioning_request(self, key: str) -> ProvisioningRequest | None:
        return self._ctx.checks.request(key) if self._ctx.checks is not None else None

    def provisioning_state(self) -> ProvisioningState:
        """What the admission checks hold, as an adapter keeps it across a restart."""
        ac = self._ctx.checks
        return ac.export() if ac is not None else ProvisioningState()

    def create_provisioning_request(self, req: ProvisioningRequest,
                                    now_s: float) -> ProvisioningRequest:
        """A request made by hand, for no job: its booking is left alone by admission checks
        and expires unless its owner's pods consume it (``consume_provisioning_request``)."""
        return self._book().create(req, now_s)

    def provisioning_accepted(self, key: str, now_s: float) -> ProvisioningRequest:
        return self._book().accept(key, now_s)

    def provisioning_provisioned(self, key: str, nodes: Iterable[str],
                                 now_s: float) -> ProvisioningRequest:
        """Every node of the request has joined (add them with ``add_node`` first or after:
        the job starts once they are there). The job waiting for it starts at the next
        cycle."""
        req = self._book().provisioned(key, nodes, now_s)
        self.queues.wake()
        return req

    def provisioning_failed(self, key: str, message: str, now_s: float,
                            reason: str = "ProvisioningFailed") -> ProvisioningRequest:
        return self._book().request_failed(key, message, now_s, reason)

    def provisioning_revoked(self, key: str, message: str, now_s: float) -> ProvisioningRequest:
        """The cloud took the nodes back (remove them with ``remove_node``: their jobs are
        requeued whole)."""
        return self._book().revoke(key, message, now_s)

    def consume_provisioning_request(self, key: str, now_s: float) -> ProvisioningRequest:
        """Pods of a request made by hand started on its nodes: the booking will not expire."""
        return self._book().consume(key, now_s)

    def delete_provisioning_request(self, key: str, now_s: float) -> ProvisioningRequest:
        """Delete (cancel) a request. A job waiting for it backs off and retries at the next
        cycle, as for a failure."""
        return self._book().delete(key)

    # -- provisioning: taken back after a restart ----------------------------------------------

    def restore_provisioning(self, requests: Iterable[ProvisioningRequest]) -> None:
        """ProvisioningRequests as they stood before a restart, with their conditions, nodes
        and consumption; nothing is asked of the cloud."""
        self._book().restore(requests)

    def restore_check(self, job: JobId, state: CheckState, *, request: str = "",
                      flavor: str = "", attempts: int = 0, made: int = 0,
                      retry_at_s: float = 0.0, message: str = "") -> CheckRecord:
        """A pending job's place in its queue's admission check, as before a restart. The job
        was submitted again first (it is in its queue); where the check held quota for it (a
        request made and not failed: Pending with a request, or Ready) the quota is reserved
        again and the job leaves its queue, as does a job backing off or rejected. NotFoundError
        when the job is not pending or its queue has no check; the request must be restored
        first (``restore_provisioning``)."""
        ac = self._ctx.checks
        if ac is None or job not in self.queues:
            raise NotFoundError(f"job {job} is not pending in a queue with an admission check")
        p = self.queues.get(job)
        assert p is not None
        check = ac.check_for(p.queue)
        if check is None:
            raise NotFoundError(f"ClusterQueue {p.queue} has no admission check")
        holds = bool(request) and state in (CheckState.PENDING, CheckState.READY)
        rec = ac.restore_record(CheckRecord(
            p.job, p.queue, check, ac.namespace(p.job), state, request, flavor,
            request_demand(p.job, flavor) if holds else {}, attempts=attempts,
            retry_at_s=retry_at_s, message=message, preemptions=p.preemptions), made)
        if holds:
            self.tree.add(p.queue, rec.demand)
        if holds or state in (CheckState.RETRY, CheckState.REJECTED):
            self.queues.remove(job)
        return rec

    def restore_requests_made(self, job: JobId, made: int) -> None:
        """How many ProvisioningRequests a job had before a restart (read back from their
        names): its next one is numbered past them."""
        self._book().restore_made(job, made)

    def restore_booking(self, job: JobId, request: str) -> Running:
        """A running job taken back (``restore``) that runs on the nodes of ``request``: the
        request stays until the job ends, and the job's run limit is what the booking left it
        at its start."""
        ac = self._book()
        r = self._ctx.running.get(job)
        if r is None:
            raise NotFoundError(f"job {job} is not running")
        req = ac.restore_booking(job, request, r.job)
        ends = req.run_ends_s
        if ends is not None:
            left = max(0.0, ends - r.start_s)
            if r.job.run_limit_s is None or left < r.job.run_limit_s:
                r = replace(r, job=replace(r.job, run_limit_s=left))
                self._ctx.running[job] = r
        return r

    # -- decisions -------------------------------------------------------------------------

    def cycle(self, now_s: float) -> CycleResult:
        return schedule(self._ctx, now_s)

    # -- views -----------------------------------------------------------------------------

    def running(self) -> list[Running]:
        return list(self._ctx.running.values())

    def pending(self) -> list[Pending]:
        """Pending jobs: those in the queues, then those past quota waiting on an admission
        check (parked, with the check's state as the reason)."""
        out = self.queues.all()
        ac = self._ctx.checks
        if ac is not None:
            for rec in ac.records():
                if rec.job.id in self.queues:
                    continue
                code = Code.UNRESOLVABLE if rec.state is CheckState.REJECTED else Code.WAIT
                out.append(Pending(rec.job, rec.queue, 0, Status(code, (ac.status(rec),)),
                                   parked=True, preemptions=rec.preemptions))
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

        Jobs of queues with a provisioning check start when the cloud delivers, which the core
        cannot know: they get a time only once their request is Provisioned (now: they start
        at the next cycle)."""
        out = estimate(self._ctx, now_s, limit)
        ac = self._ctx.checks
        if ac is not None:
            for p in self.queues.all():
                if ac.check_for(p.queue) is not None and p.job.id in out:
                    out[p.job.id] = Estimate(out[p.job.id].position, None,
                                             "waits for its ProvisioningRequest")
            for rec in ac.records():
                if rec.job.id not in self.queues:
                    req = ac.request(rec.request) if rec.request else None
                    booked = req is not None and req.booked
                    out[rec.job.id] = Estimate(
                        0, now_s if booked else None,
                        "its capacity is provisioned" if booked
                        else "waits for its ProvisioningRequest")
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
