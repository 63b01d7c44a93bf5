"""The run loop of a scenario: the queue-aware scheduler driven on simulated time.

In simulated seconds, on the simulation kernel's event queue (:class:`gpupool.kernel.EventQueue`):

- events (a job arrives, a run ends) are handled at their time: an arrival is submitted to
  the scheduler, the end of a run is reported with ``finished``;
- scheduling cycles run on a grid, every ``schedulingInterval``, whenever something happened
  since the last cycle or jobs are pending (admission can change with time alone: minimum
  runtimes expire, usage decays). Events at a tick's time come before its cycle;
- a bound job runs for its duration, or until its declared run limit stops it; an evicted
  job loses its run (its completion is cancelled) and waits again, to restart from scratch;
- after a cycle that evicts, the victims need ``gracePeriod`` to stop: the next cycle runs
  once it has passed, and none before. The core has already taken the victims off its books,
  so a cycle inside the grace period would bind onto cards that, in a real cluster, are still
  busy;
- with ``spec.measuredUse`` (``sim/measured.py``), every card is sampled for what its
  running jobs actually use before each cycle, and the scheduler places by that measure
  (``placeBy: requests``: by requests, measured all the same); the run carries hot-card time;
- every ``estimateEvery`` (default 5 minutes; 0 after every cycle) the jobs that arrived since
  the last estimate and still wait are asked about (``Scheduler.estimates``), to compare with
  their actual start later.

After every cycle an observer, when given, sees the scheduler (the quota oracle of the
property tests watches from there). Nothing here reads the wall clock; one file and one seed
give one result.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

from gpupool.core.decisions import Bind, Evict
from gpupool.core.errors import GpupoolError
from gpupool.core.model import WHOLE_GPU_MILLI, Job, JobId
from gpupool.core.quota import Resource
from gpupool.kernel import EventQueue
from gpupool.sim.scenario_jobs import JobSource, generate_jobs
from gpupool.sim.scenario_model import Scenario
from gpupool.sim.scenario_results import Eviction, JobRun, QueueSeries, RunResult, gpu_entitlement

if TYPE_CHECKING:
    from gpupool.cloud.region import Cloud
    from gpupool.core.scheduler import Scheduler
    from gpupool.sim.measured import SimMeasuredUse

__all__ = ["CycleObserver", "ProgressFn", "ScenarioRun", "simulate"]


ProgressFn = Callable[[float], None]
"""Called now and then with the simulated time reached."""

CycleObserver = Callable[[float, "Scheduler"], None]
"""Called after every cycle with the simulated time and the scheduler, to check it."""


def simulate(
    scenario: Scenario,
    seed: int,
    *,
    progress: ProgressFn | None = None,
    progress_every: int = 64,
    clock: Callable[[], float] | None = None,
    observe: CycleObserver | None = None,
) -> RunResult:
    """Run one seed of ``scenario`` (see the module docstring for the loop); ``observe``
    sees the scheduler after every cycle."""
    started = clock() if clock else 0.0
    jobs, sources = generate_jobs(scenario, seed)
    run = ScenarioRun(scenario, seed, jobs, sources, progress, progress_every, observe=observe)
    result = run.loop()
    result.wall_s = (clock() - started) if clock else 0.0
    return result


_ARRIVAL, _END = 0, 1


class ScenarioRun:
    """One seed of one scenario, run; ``loop`` returns what happened."""

    def __init__(
        self,
        scenario: Scenario,
        seed: int,
        jobs: list[Job],
        sources: dict[JobId, JobSource],
        progress: ProgressFn | None,
        progress_every: int,
        *,
        observe: CycleObserver | None = None,
    ) -> None:
        from gpupool.core.scheduler import Scheduler

        self.s = scenario
        self.seed = seed
        self.measured: SimMeasuredUse | None = None
        if scenario.measured is not None:
            from gpupool.sim.measured import SimMeasuredUse

            self.measured = SimMeasuredUse(scenario.measured, sources, seed)
        self.sched = Scheduler(
            list(scenario.nodes),
            scenario.config,
            profile=self.measured.profile if self.measured else None,
        )
        if self.measured is not None:
            self.measured.attach(self.sched)
        self.queues = sorted(q.name for q in scenario.config.cluster_queues)
        self.qindex = {q: i for i, q in enumerate(self.queues)}
        self.progress = progress
        self.progress_every = max(1, progress_every)
        tenant_cq = {t.name: t.cluster_queue for t in scenario.tenants}
        self.jobs: dict[JobId, JobRun] = {}
        for job in jobs:
            src = sources[job.id]
            milli = job.task_count * job.pod_sets[0].gpu.total_milli
            self.jobs[job.id] = JobRun(
                job,
                src.tenant,
                src.stream,
                tenant_cq[src.tenant],
                milli,
                job.submit_time_s,
                src.duration_s,
            )
        self.events: EventQueue[tuple[int, JobId, int]] = EventQueue()  # (what, job, run)
        for job in jobs:
            self.events.schedule(job.submit_time_s, (_ARRIVAL, job.id, 0))
        self.observe = observe
        self.now = 0.0
        self.running: dict[JobId, tuple[int, float]] = {}  # run number, start of the run
        self.used = [0] * len(self.queues)  # GPU milli allocated per queue
        users = sorted({j.user for j in jobs})
        self.uindex = {u: i for i, u in enumerate(users)}
        self.used_by_user = [0] * len(users)
        self.series = QueueSeries(self.queues, users)
        self.evictions: list[Eviction] = []
        self.partial = 0
        self.cycles = 0
        self.fresh: list[JobId] = []  # submitted since the last estimate
        self.entitled: dict[str, float] = {}
        self.nominal: dict[str, int] = {}
        self.used_flavor: dict[tuple[str, str], int] = {}  # GPU milli per (queue, flavor)
        self.nominal_flavor: dict[tuple[str, str], int] = {}
        for q in self.queues:
            for (f, res), v in self.sched.nominal(q).items():
                milli = (
                    v * WHOLE_GPU_MILLI
                    if res is Resource.GPU
                    else v
                    if res is Resource.GPU_MILLI
                    else 0
                )
                self.nominal_flavor[(q, f)] = max(self.nominal_flavor.get((q, f), 0), milli)
        for q in self.queues:
            e, n = gpu_entitlement(self.sched, q)
            self.entitled[q] = e
            self.nominal[q] = n
        self.first_submit: dict[str, float] = {}
        self.at_nominal: dict[str, float] = {}
        self._pending = 0  # jobs the scheduler holds as pending
        self.next_estimate = 0.0  # estimates are taken at the first cycle from then on
        self.limit: dict[JobId, float | None] = {}  # run limit of each running job
        self.cloud: Cloud | None = None
        if scenario.cloud is not None:
            from gpupool.cloud.region import Cloud, SchedulerHost

            self.cloud = Cloud(scenario.cloud, SchedulerHost(self.sched), seed, scenario.duration_s)

    # -- the loop -----------------------------------------------------------------------

    def loop(self) -> RunResult:
        end = self.s.duration_s
        iv = self.s.interval_s
        grace = self.s.grace_s
        last_cycle = -math.inf
        follow_up: float | None = None
        dirty = False
        steps = 0
        while True:
            tj = self.events.peek()
            tcloud = self.cloud.next_event_s() if self.cloud is not None else math.inf
            te = min(tj, tcloud)
            if follow_up is not None:
                tc = follow_up
            elif dirty or self.n_pending:
                tc = math.ceil(self.now / iv) * iv
                if tc <= last_cycle:
                    tc = (math.floor(last_cycle / iv) + 1) * iv
            else:
                tc = math.inf
            if min(te, tc) > end:
                break
            if te <= tc:
                self._events_at(te, cloud_due=tcloud <= te)
                dirty = True
            else:
                self.now = tc
                evicted = self._cycle()
                last_cycle = tc
                follow_up = tc + grace if evicted and grace > 0 else None
                dirty = False
            steps += 1
            if self.progress is not None and steps % self.progress_every == 0:
                self.progress(self.now)
        return self._finish(end)

    def _events_at(self, t: float, *, cloud_due: bool) -> None:
        """Every job event at ``t``, then the cloud's (when it has one due)."""
        self.now = t
        for _, (kind, jid, run_no) in self.events.pop_until(t):
            if kind == _ARRIVAL:
                self._arrive(jid)
            else:
                self._end(jid, run_no)
        if self.cloud is not None and cloud_due:  # after the jobs' own events
            for jid in self.cloud.advance(t):
                self._revoked(jid)
        if self.measured is not None:  # runs that ended stop counting from now on
            self.measured.sample(self.sched, t, feed=False)
        self._sample()

    def _finish(self, end: float) -> RunResult:
        """Runs still going are cut at the end; what happened, as a RunResult."""
        self.now = end
        if self.measured is not None:
            self.measured.sample(self.sched, end, feed=False)  # hot-card time up to the end
        for jid in sorted(self.running):
            self._close_run(jid, end)
        self._sample()
        cloud = self.cloud.finish(end) if self.cloud is not None else None
        if self.progress is not None:
            self.progress(end)
        ttn: dict[str, float | None] = {}
        for q in self.queues:
            if q in self.first_submit and q in self.at_nominal:
                ttn[q] = self.at_nominal[q] - self.first_submit[q]
            else:
                ttn[q] = None
        return RunResult(
            self.s,
            self.seed,
            self.jobs,
            self.series,
            self.evictions,
            self.partial,
            self.cycles,
            self.entitled,
            self.nominal,
            ttn,
            self.s.config.settings.max_preemptions_per_job,
            cloud=cloud,
            measured=self.measured.summary() if self.measured is not None else None,
        )

    @property
    def n_pending(self) -> int:
        return self._pending

    # -- events -------------------------------------------------------------------------

    def _arrive(self, jid: JobId) -> None:
        rec = self.jobs[jid]
        try:
            self.sched.submit(rec.job, self.now)
        except GpupoolError as exc:
            rec.rejected = f"{type(exc).__name__}: {exc}"
            return
        self._pending += 1
        self.first_submit.setdefault(rec.queue, self.now)
        self.fresh.append(jid)

    def _end(self, jid: JobId, run_no: int) -> None:
        held = self.running.get(jid)
        if held is None or held[0] != run_no:
            return  # an evicted run
        rec = self.jobs[jid]
        self.sched.finished(jid, self.now)
        self._close_run(jid, self.now)
        rec.end_s = self.now
        duration = rec.duration_s
        limit = self.limit.pop(jid, rec.job.run_limit_s)
        if limit is not None and limit < duration:
            rec.stopped_at_limit = True

    def _revoked(self, jid: JobId) -> None:
        """The cloud took a running job's nodes back: the run is lost, the job waits again."""
        rec = self.jobs[jid]
        rec.revoked += 1
        if jid in self.running:
            self._close_run(jid, self.now)
        self.limit.pop(jid, None)
        self._pending += 1

    def _close_run(self, jid: JobId, at: float) -> None:
        _, start = self.running.pop(jid)
        rec = self.jobs[jid]
        self.used[self.qindex[rec.queue]] -= rec.gpu_milli
        self.used_flavor[(rec.queue, rec.flavor)] -= rec.gpu_milli
        self.used_by_user[self.uindex[rec.job.user]] -= rec.gpu_milli
        gpus = rec.gpu_milli / WHOLE_GPU_MILLI
        rec.gpu_s += gpus * (at - start)
        w0, w1 = self.s.window
        overlap = min(at, w1) - max(start, w0)
        if overlap > 0:
            rec.window_gpu_s += gpus * overlap

    # -- the cycle ----------------------------------------------------------------------

    def _cycle(self) -> bool:
        if self.measured is not None:  # every card read before the cycle places
            self.measured.sample(self.sched, self.now)
        result = self.sched.cycle(self.now)
        self.cycles += 1
        # A queue's use as the evictions found it: before the cycle, plus what the cycle
        # admitted for it (the core may admit for a queue before it reclaims from it).
        used_before = dict(self.used_flavor)
        for bind in result.binds:
            rec = self.jobs[JobId(bind.job)]
            rec.gpu_milli = self._charged_milli(JobId(bind.job))
            rec.flavor = bind.flavor
            key = (rec.queue, rec.flavor)
            used_before[key] = used_before.get(key, 0) + rec.gpu_milli
        for ev in result.evicts:
            self._evict(ev, used_before)
        for bind in result.binds:
            self._bind(bind)
        self._pending += len(result.evicts) - len(result.binds)
        if self.fresh and self.now >= self.next_estimate:
            waiting = [j for j in self.fresh if self.jobs[j].start_s is None]
            if waiting:
                every = self.s.estimate_every_s
                self.next_estimate = (
                    (math.floor(self.now / every) + 1) * every if every else self.now
                )
                est = self.sched.estimates(self.now)
                for jid in waiting:
                    rec = self.jobs[jid]
                    got = est.get(jid)
                    rec.estimate_at_s = self.now
                    if got is not None:
                        rec.position, rec.estimate_s = got[0], got[1]
                        rec.estimated = got[1] is not None
            self.fresh.clear()
        if self.cloud is not None:
            self.cloud.on_cycle(result, self.now)
        if self.observe is not None:
            self.observe(self.now, self.sched)
        if self.measured is not None:  # what the cycle bound runs from now on
            self.measured.sample(self.sched, self.now, feed=False)
        self._sample()
        for q in self.queues:
            if (
                q not in self.at_nominal
                and q in self.first_submit
                and self.nominal[q] > 0
                and self.used[self.qindex[q]] >= self.nominal[q]
            ):
                self.at_nominal[q] = self.now
        return bool(result.evicts)

    def _charged_milli(self, jid: JobId) -> int:
        """The GPUs a running job is charged, in milli-GPU: what the scheduler's quota books
        hold for it (a slice counts the larger of its compute and its memory share of the
        card), so delivery is measured as the scheduler accounts it."""
        r = self.sched.running_job(jid)
        if r is None:
            return self.jobs[jid].gpu_milli
        return sum(v for (_, res), v in r.demand.items() if res is Resource.GPU_MILLI)

    def _evict(self, ev: Evict, used_before: dict[tuple[str, str], int]) -> None:
        """Record an eviction with its queue's use and nominal quota of the victim's flavor:
        borrowed capacity is borrowed per flavor, so guaranteed quota is judged per flavor."""
        jid = JobId(ev.job)
        rec = self.jobs[jid]
        key = (rec.queue, rec.flavor)
        preemptor = self.jobs.get(JobId(ev.preemptor))
        self.evictions.append(
            Eviction(
                self.now,
                jid,
                rec.queue,
                str(ev.reason),
                str(ev.preemptor),
                preemptor.queue if preemptor else "",
                rec.gpu_milli,
                used_before.get(key, 0),
                self.nominal_flavor.get(key, 0),
            )
        )
        used_before[key] = used_before.get(key, 0) - rec.gpu_milli
        rec.evictions += 1
        if jid in self.running:
            self._close_run(jid, self.now)  # its completion event is now stale

    def _bind(self, bind: Bind) -> None:
        jid = JobId(bind.job)
        rec = self.jobs[jid]
        if len(bind.placements) < rec.job.gang_size:
            self.partial += 1
        rec.runs += 1
        if rec.start_s is None:
            rec.start_s = self.now
        self.running[jid] = (rec.runs, self.now)
        self.used[self.qindex[rec.queue]] += rec.gpu_milli
        self.used_flavor[(rec.queue, rec.flavor)] = (
            self.used_flavor.get((rec.queue, rec.flavor), 0) + rec.gpu_milli
        )
        self.used_by_user[self.uindex[rec.job.user]] += rec.gpu_milli
        duration = rec.duration_s
        limit = self.sched.run_limit_s(jid)  # a provisioning booking may cut the job's own
        self.limit[jid] = limit
        checks = self.sched.checks
        if checks is not None and checks.booking_of(jid) is not None:
            rec.provisioned = True
        if limit is not None:
            duration = min(duration, limit)
        self.events.schedule(self.now + duration, (_END, jid, rec.runs))

    def _sample(self) -> None:
        s = self.series
        if s.time_s and s.time_s[-1] == self.now:
            s.used_milli[-1] = list(self.used)
            s.user_milli[-1] = list(self.used_by_user)
            s.pending[-1] = self._pending
            return
        s.time_s.append(self.now)
        s.used_milli.append(list(self.used))
        s.user_milli.append(list(self.used_by_user))
        s.pending.append(self._pending)
