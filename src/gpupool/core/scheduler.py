"""Scheduler: the queue-aware core behind one facade, facts in and decisions out.

Adapters (the simulator, the virtual cluster, Kubernetes) tell it what happened (``submit``,
``finished``, ``cancel``, nodes joining or leaving) with the time as a plain number, and ask
for a ``cycle``. It never reads a clock and does no I/O. A new queue configuration is applied
in place (``update_config``): running jobs, usage and pending jobs are kept.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from gpupool.core.admission import QuotaTree, placement_demand, request_demand
from gpupool.core.affinity import PodMeta
from gpupool.core.cluster import ClusterState
from gpupool.core.cycle import Context, release, schedule
from gpupool.core.decisions import CycleResult
from gpupool.core.errors import ConfigError, ConflictError, NotFoundError
from gpupool.core.estimate import Estimate, estimate
from gpupool.core.fairshare import UsageLedger
from gpupool.core.model import Job, JobId, Node, NodeName, Placement
from gpupool.core.placement.framework import Code, Profile, Status
from gpupool.core.placement.registry import default_profile
from gpupool.core.preemption import Running
from gpupool.core.provisioning import (
    MAX_ACTIVE_PER_PROJECT,
    AdmissionChecks,
    CheckRecord,
    CheckState,
    ProvisioningRequest,
)
from gpupool.core.queueing import Pending, Queues
from gpupool.core.quota import QueueConfig
from gpupool.core.runtimes import Runtimes
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
        self.ledger = UsageLedger(settings.usage_half_life_s)
        self.queues = Queues(config, self.ledger)
        self.validator = Validator()

        self.ctx = Context(
            state=self.state, tree=self.tree, queues=self.queues, ledger=self.ledger,
            settings=settings, profile=profile or default_profile(),
            runtimes=Runtimes(settings.default_runtime_s), reserve_min_gpus=reserve_min_gpus,
        )
        self._max_requests = max_requests_per_project
        checks = AdmissionChecks(config, max_requests_per_project)
        self.ctx.checks = checks if checks.by_queue else None

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
        ac = self.ctx.checks
        holding = [(r.queue, r.job.id) for r in self.ctx.running.values()]
        if ac is not None:
            holding += [(rec.queue, job) for job, rec in ac.records.items() if rec.demand]
        gone = sorted((q, str(j)) for q, j in holding if q not in names)
        if gone:
            queue = gone[0][0]
            jobs = [j for q, j in gone if q == queue]
            raise ConflictError(f"ClusterQueue {queue} is gone from the configuration but "
                                f"still holds quota for {len(jobs)} job(s) ({', '.join(jobs[:5])})"
                                "; it stays until they end")
        tree = QuotaTree(config)
        for r in self.ctx.running.values():
            tree.add(r.queue, r.demand)
        if ac is not None:
            for rec in ac.records.values():
                if rec.demand:
                    tree.add(rec.queue, rec.demand)
        dropped = self.queues.reconfigure(config)
        self.config = config
        self.tree = self.ctx.tree = tree
        self.ctx.settings = config.settings
        self.ctx.runtimes.default_runtime_s = config.settings.default_runtime_s
        self.ctx.reservation = None  # held against the old quota; the next cycle decides again
        if ac is not None:
            ac.reconfigure(config)
        else:
            checks = AdmissionChecks(config, self._max_requests)
            self.ctx.checks = checks if checks.by_queue else None
        return dropped

    # -- facts -----------------------------------------------------------------------------

    def submit(self, job: Job, now_s: float) -> None:
        """Accept a job: InvalidJobError if it can never run here, NotFoundError for an
        unknown queue; nothing changes in either case. A job of a queue with a provisioning
        admission check is checked against the rules of a ProvisioningRequest instead of the
        cluster's inventory (its nodes do not exist yet)."""
        cq = self._provisioned_queue(job.queue)
        if cq is not None and self.ctx.checks is not None:
            self.ctx.checks.validate(job, cq)
        else:
            self.validator.check(job, self.state.table)
        self.queues.resolve(job.queue)
        if job.id in self.queues or job.id in self.ctx.running or self._checked(job.id):
            raise ConflictError(f"job {job.id} already exists")
        p = self.queues.add(job)
        self.ctx.arrivals.record(p.queue, job, now_s)

    def _provisioned_queue(self, queue: str) -> str | None:
        """The ClusterQueue behind ``queue`` when it has a provisioning check, else None (also
        for an unknown queue: the usual checks report it)."""
        if self.ctx.checks is None:
            return None
        try:
            cq = self.queues.resolve(queue)
        except NotFoundError:
            return None
        return cq if self.ctx.checks.check_for(cq) is not None else None

    def _checked(self, job: JobId) -> bool:
        return self.ctx.checks is not None and job in self.ctx.checks.records

    def finished(self, job: JobId, now_s: float) -> Running:
        """A running job ended: its cards and quota are free again."""
        if job not in self.ctx.running:
            raise NotFoundError(f"job {job} is not running")
        if self.ctx.reservation is not None and self.ctx.reservation.job == job:
            self.ctx.reservation = None
        self._unbook(job)
        r = release(self.ctx, job, now_s)
        self.ctx.runtimes.observe(r.job, now_s - r.start_s)
        return r

    def _unbook(self, job: JobId) -> Job | None:
        """A job that ran on provisioned nodes is done with them: its request is deleted.
        Returns the job as submitted (its run limit not cut to the request's)."""
        ac = self.ctx.checks
        if ac is None or job not in ac.booked:
            return None
        key = ac.booked.pop(job)
        if key in ac.book:
            ac.book.delete(key)
        ac.outbox.append(key)
        return ac.submitted.pop(job, None)

    def cancel(self, job: JobId, now_s: float) -> None:
        """Remove a job, pending or running. A job waiting on a provisioning check gives back
        the quota it reserved; its request is deleted (cancelled), unless it is Provisioned
        already: then the booking is kept until it expires, for the next job of the queue
        that fits its nodes."""
        ac = self.ctx.checks
        if ac is not None and job in ac.records:
            rec = ac.records.pop(job)
            if rec.demand:
                self.tree.add(rec.queue, rec.demand, -1)
                self.queues.wake()
            if rec.request and rec.request in ac.book and not ac.book.get(rec.request).booked:
                ac.book.delete(rec.request)
                ac.outbox.append(rec.request)
            if job not in self.queues:
                return
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
        self.ctx.runtimes.started(job, start_s)
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
        r = release(self.ctx, job, now_s)
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

    def set_binds_in_flight(self, name: NodeName, count: int) -> None:
        """How many GPU placements on the node are still being bound (an adapter whose binds
        go one at a time per node, as under HAMi's node lock, says so before each cycle);
        read by the ``bind-queue`` score."""
        self.state.set_binds_in_flight(name, max(0, count))

    def binds_in_flight(self) -> dict[NodeName, int]:
        """The nodes whose count of GPU binds in flight is not 0, with it (what the adapter
        last said plus the GPU placements taken since)."""
        t = self.state.table
        live = t.live()
        rows = live[t.binds_in_flight[live] > 0]
        return {t.nodes[i].name: int(t.binds_in_flight[i]) for i in rows.tolist()}

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
                      if p.job in self.ctx.running})
        for job in hit:
            submitted = self._unbook(job)
            r = release(self.ctx, job, now_s)
            self.queues.add(submitted or r.job, preemptions=r.preemptions)
        self.state.remove_node(name)
        self.ctx.reservation = None
        return hit

    # -- provisioning: facts from the cloud ---------------------------------------------------

    @property
    def checks(self) -> AdmissionChecks | None:
        """The provisioning admission checks (None when no queue names one)."""
        return self.ctx.checks

    def _book(self) -> AdmissionChecks:
        if self.ctx.checks is None:
            self.ctx.checks = AdmissionChecks(self.config, self._max_requests)
        return self.ctx.checks

    def provisioning_requests(self) -> list[ProvisioningRequest]:
        return list(self.ctx.checks.book) if self.ctx.checks is not None else []

    def create_provisioning_request(self, req: ProvisioningRequest,
                                    now_s: float) -> ProvisioningRequest:
        """A request made by hand, for no job: its booking is left alone by admission checks
        and expires unless its owner's pods consume it (``consume_provisioning_request``)."""
        return self._book().book.create(req, now_s)

    def provisioning_accepted(self, key: str, now_s: float) -> ProvisioningRequest:
        return self._book().book.accept(key, now_s)

    def provisioning_provisioned(self, key: str, nodes: Iterable[str],
                                 now_s: float) -> ProvisioningRequest:
        """Every node of the request has joined (add them with ``add_node`` first or after:
        the job starts once they are there). The job waiting for it starts at the next
        cycle."""
        req = self._book().book.provisioned(key, nodes, now_s)
        self.queues.wake()
        return req

    def provisioning_failed(self, key: str, message: str, now_s: float,
                            reason: str = "ProvisioningFailed") -> ProvisioningRequest:
        return self._book().book.fail(key, message, now_s, reason)

    def provisioning_revoked(self, key: str, message: str, now_s: float) -> ProvisioningRequest:
        """The cloud took the nodes back (remove them with ``remove_node``: their jobs are
        requeued whole)."""
        return self._book().book.revoke(key, message, now_s)

    def consume_provisioning_request(self, key: str, now_s: float) -> ProvisioningRequest:
        """Pods of a request made by hand started on its nodes: the booking will not expire."""
        return self._book().book.consume(key, now_s)

    def delete_provisioning_request(self, key: str, now_s: float) -> ProvisioningRequest:
        """Delete (cancel) a request. A job waiting for it backs off and retries at the next
        cycle, as for a failure."""
        req = self._book().book.delete(key)
        self._book().outbox.append(key)
        return req

    # -- provisioning: taken back after a restart ----------------------------------------------

    def restore_provisioning(self, requests: Iterable[ProvisioningRequest]) -> None:
        """ProvisioningRequests as they stood before a restart, with their conditions, nodes
        and consumption; nothing is asked of the cloud."""
        book = self._book().book
        for req in requests:
            book.restore(req)

    def restore_check(self, job: JobId, state: CheckState, *, request: str = "",
                      flavor: str = "", attempts: int = 0, made: int = 0,
                      retry_at_s: float = 0.0, message: str = "") -> CheckRecord:
        """A pending job's place in its queue's admission check, as before a restart. The job
        was submitted again first (it is in its queue); where the check held quota for it (a
        request made and not failed: Pending with a request, or Ready) the quota is reserved
        again and the job leaves its queue, as does a job backing off or rejected. NotFoundError
        when the job is not pending or its queue has no check; the request must be restored
        first (``restore_provisioning``)."""
        ac = self.ctx.checks
        if ac is None or job not in self.queues:
            raise NotFoundError(f"job {job} is not pending in a queue with an admission check")
        p = self.queues.get(job)
        assert p is not None
        check = ac.check_for(p.queue)
        if check is None:
            raise NotFoundError(f"ClusterQueue {p.queue} has no admission check")
        if request and request not in ac.book:
            raise NotFoundError(f"ProvisioningRequest {request!r} does not exist")
        rec = CheckRecord(p.job, p.queue, check, ac.namespace(p.job), state, request, flavor,
                          attempts=attempts, retry_at_s=retry_at_s, message=message,
                          preemptions=p.preemptions)
        holds = bool(request) and state in (CheckState.PENDING, CheckState.READY)
        if holds:
            rec.demand = request_demand(p.job, flavor)
            self.tree.add(p.queue, rec.demand)
        if holds or state in (CheckState.RETRY, CheckState.REJECTED):
            self.queues.remove(job)
        ac.records[job] = rec
        ac.made[job] = max(made, ac.made.get(job, 0))
        return rec

    def restore_booking(self, job: JobId, request: str) -> Running:
        """A running job taken back (``restore``) that runs on the nodes of ``request``: the
        request stays until the job ends, and the job's run limit is what the booking left it
        at its start."""
        ac = self._book()
        r = self.ctx.running.get(job)
        if r is None:
            raise NotFoundError(f"job {job} is not running")
        req = ac.book.get(request)
        ac.booked[job] = request
        ac.submitted[job] = r.job
        ends = req.run_ends_s
        if ends is not None:
            left = max(0.0, ends - r.start_s)
            if r.job.run_limit_s is None or left < r.job.run_limit_s:
                r = replace(r, job=replace(r.job, run_limit_s=left))
                self.ctx.running[job] = r
        return r

    # -- decisions -------------------------------------------------------------------------

    def cycle(self, now_s: float) -> CycleResult:
        return schedule(self.ctx, now_s)

    # -- views -----------------------------------------------------------------------------

    def running(self) -> list[Running]:
        return list(self.ctx.running.values())

    def pending(self) -> list[Pending]:
        """Pending jobs: those in the queues, then those past quota waiting on an admission
        check (parked, with the check's state as the reason)."""
        out = self.queues.all()
        ac = self.ctx.checks
        if ac is not None:
            for rec in ac.records.values():
                if rec.job.id in self.queues:
                    continue
                code = Code.UNRESOLVABLE if rec.state is CheckState.REJECTED else Code.WAIT
                out.append(Pending(rec.job, rec.queue, 0, Status(code, (ac.status(rec),)),
                                   parked=True, preemptions=rec.preemptions))
        return out

    def run_limit_s(self, job: JobId) -> float | None:
        """The run limit a running job was admitted with: its own, or less when the
        provisioning booking it runs on ends sooner (``maxRunDurationSeconds``)."""
        r = self.ctx.running.get(job)
        return r.job.run_limit_s if r is not None else None

    def placements(self, job: JobId) -> tuple[Placement, ...]:
        r = self.ctx.running.get(job)
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
        out = estimate(self.ctx, now_s, limit)
        ac = self.ctx.checks
        if ac is not None:
            for p in self.queues.all():
                if ac.check_for(p.queue) is not None and p.job.id in out:
                    out[p.job.id] = Estimate(out[p.job.id].position, None,
                                             "waits for its ProvisioningRequest")
            for rec in ac.records.values():
                if rec.job.id not in self.queues:
                    req = ac.book.find(rec.request) if rec.request else None
                    booked = req is not None and req.booked
                    out[rec.job.id] = Estimate(
                        0, now_s if booked else None,
                        "its capacity is provisioned" if booked
                        else "waits for its ProvisioningRequest")
        return out

    def expected_end_s(self, job: JobId) -> float | None:
        """When a running job is expected to end (its start plus its expected runtime, never
        past its run limit); None if it is not running."""
        r = self.ctx.running.get(job)
        if r is None:
            return None
        end = r.start_s + self.ctx.runtimes(r.job)
        if r.job.run_limit_s is not None:
            end = min(end, r.start_s + r.job.run_limit_s)
        return end
