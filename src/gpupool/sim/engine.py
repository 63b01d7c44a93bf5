"""The placement simulator: events on the simulation kernel's queue and a simulated clock.

The engine drives the core the way every adapter does. Facts go in (a job arrived, a job's
tasks finished, a node joined, left or was cordoned); ``run_cycle`` answers with binds and
parks; the engine carries them out (``state.confirm`` for a bind, ``state.forget`` for every
task of a finished job) and schedules what follows (the completion of a bound job after its
``duration_s``). Nothing here reads the wall clock: time is the timestamp of the event being
handled, so one trace and one seed give one event log, however fast the machine.

Three rules shape the loop, as SimPy's kernel and kube-scheduler's queue do:

- Events at one timestamp form a **batch**; the engine handles the whole batch, then runs one
  scheduling cycle, so a burst of arrivals is one cycle and not one per event. Ties inside a
  timestamp keep the order in which the events were scheduled (``gpupool.kernel.EventQueue``).
- Pending jobs are offered in FIFO order, ``(submit_time_s, id)``. A job that does not fit is
  **parked** with its reason and is offered again only after an event that could change the
  answer: capacity freed or added on a node where its request could fit (kube-scheduler's
  queueing hints). For one-task jobs that test is exact, because a request that fitted no node
  cannot fit a node that has since only filled up; jobs of several tasks are offered again
  after any capacity change. Arrivals are always offered in the cycle that follows them.
- Gangs are placed whole or not at all (``place_job``); a node that leaves takes every job
  with a task on it back to pending, whole, keeping its place in the FIFO order.

Per job the engine records submit, first start, end, wait and why it waited; per batch a
sample of GPU milli allocated / total, CPU allocated / total, pending and running jobs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace

import numpy as np
import numpy.typing as npt

from gpupool.core import run_cycle
from gpupool.core.cluster import ClusterState
from gpupool.core.decisions import CycleResult
from gpupool.core.errors import ConfigError, InvalidJobError
from gpupool.core.mig import request_milli, share_milli
from gpupool.core.model import (
    WHOLE_GPU_MILLI,
    Job,
    JobId,
    Node,
    NodeName,
    Placement,
)
from gpupool.core.placement.framework import Profile
from gpupool.core.table import NodeTable
from gpupool.core.validation import Validator
from gpupool.kernel import EventQueue
from gpupool.sim.engine_records import (
    ClusterSeries,
    Event,
    EventKind,
    JobOutcome,
    LogEntry,
    SimResult,
    percentiles,
)
from gpupool.sim.parked import NO_SLOTS, ParkedIndex, fifo

__all__ = [
    "ClusterSeries",
    "Engine",
    "Event",
    "EventKind",
    "JobOutcome",
    "ProgressFn",
    "SimResult",
    "percentiles",
]


ProgressFn = Callable[[float], None]
"""Called now and then with the simulated time reached."""


class Engine:
    """A simulated cluster: events in time order, one scheduling cycle per timestamp."""

    def __init__(
        self,
        nodes: Iterable[Node],
        profile: Profile,
        *,
        start_s: float = 0.0,
        keep_log: bool = True,
        on_cycle: Callable[[Engine, CycleResult], None] | None = None,
        progress: ProgressFn | None = None,
        progress_every: int = 256,
        hints: bool = True,
    ) -> None:
        nodes = list(nodes)
        self.state = ClusterState(nodes)
        self.profile = profile
        self.now = start_s
        self.start_s = start_s
        self.keep_log = keep_log
        self.on_cycle = on_cycle
        self.progress = progress
        self.progress_every = max(1, progress_every)
        self.hints = hints
        self.records: dict[JobId, JobOutcome] = {}
        self.series = ClusterSeries()
        self.log: list[LogEntry] = []
        self.cycles = 0
        self.offers = 0
        self._events: EventQueue[Event] = EventQueue(start_s)
        self._validator = Validator()
        self._jobs: dict[JobId, Job] = {}
        self._fresh: set[JobId] = set()  # arrived or requeued: offered in the next cycle
        self._parked = ParkedIndex()  # one-task jobs that did not fit
        self._parked_gangs: set[JobId] = set()  # jobs of several tasks that did not fit
        self._running: dict[JobId, tuple[int, tuple[Placement, ...]]] = {}  # run no., tasks
        self._runs: dict[JobId, int] = {}
        self._dirty: set[int] = set()  # table rows that gained free capacity this batch
        self._gpu_used = 0
        self._cpu_used = 0
        self._gpu_total = 0
        self._cpu_total = 0
        self._batches = 0
        for node in nodes:
            self._dirty.add(self.state.table.row(node.name))
        self._recount_capacity()

    # -- scheduling facts --------------------------------------------------------------------

    def submit(self, job: Job, at: float | None = None) -> None:
        """The job arrives at ``at`` (default: its ``submit_time_s``)."""
        self._push(Event(job.submit_time_s if at is None else at, EventKind.ARRIVAL, job=job))

    def submit_all(self, jobs: Iterable[Job]) -> None:
        for job in jobs:
            self.submit(job)

    def add_node(self, node: Node, at: float) -> None:
        self._push(Event(at, EventKind.NODE_JOINED, node=node))

    def remove_node(self, name: str, at: float) -> None:
        self._push(Event(at, EventKind.NODE_REMOVED, name=NodeName(name)))

    def cordon(self, name: str, at: float) -> None:
        self._push(Event(at, EventKind.NODE_CORDONED, name=NodeName(name)))

    def uncordon(self, name: str, at: float) -> None:
        self._push(Event(at, EventKind.NODE_UNCORDONED, name=NodeName(name)))

    def _push(self, event: Event) -> None:
        if event.time_s < self.now:
            raise ConfigError(
                f"{event.kind} at t={event.time_s:g}s is in the past "
                f"(the clock reads {self.now:g}s)"
            )
        self._events.schedule(event.time_s, event)

    # -- the loop ------------------------------------------------------------------------------

    @property
    def next_time(self) -> float | None:
        return self._events.peek() if self._events else None

    @property
    def pending(self) -> int:
        return len(self._fresh) + len(self._parked) + len(self._parked_gangs)

    @property
    def running(self) -> int:
        return len(self._running)

    def step(self) -> bool:
        """Handle every event at the earliest timestamp, then run one cycle. False when idle."""
        if not self._events:
            return False
        t = self._events.peek()
        self.now = t
        for _, event in self._events.pop_until(t):  # every event at t, those it adds too
            self._handle(event)
        self._cycle()
        self._batches += 1
        if self.progress is not None and self._batches % self.progress_every == 0:
            self.progress(self.now)
        return True

    def run(self, until: float | None = None) -> SimResult:
        """Process batches up to and including ``until`` (all of them when None)."""
        while self._events and (until is None or self._events.peek() <= until):
            self.step()
        if until is not None and until > self.now:
            self.now = until
        if self.progress is not None:
            self.progress(self.now)
        return self.result()

    def result(self) -> SimResult:
        return SimResult(
            self.records, self.series, self.log, self.cycles, self.offers, self.start_s, self.now
        )

    # -- events ----------------------------------------------------------------------------

    def _handle(self, event: Event) -> None:
        kind = event.kind
        if kind is EventKind.COMPLETION:
            assert event.job is not None
            self._complete(event.job.id, event.run)
        elif kind is EventKind.ARRIVAL:
            assert event.job is not None
            self._arrive(event.job)
        elif kind is EventKind.NODE_JOINED:
            assert event.node is not None
            self.state.add_node(event.node)
            self._dirty.add(self.state.table.row(event.node.name))
            self._recount_capacity()
            self._note(kind, event.node.name, f"{event.node.gpu_count} GPUs")
        elif kind is EventKind.NODE_REMOVED:
            assert event.name is not None
            self._remove_node(event.name)
        else:
            assert event.name is not None
            cordon = kind is EventKind.NODE_CORDONED
            node = self.state.node(event.name)
            self.state.update_node(replace(node, schedulable=not cordon))
            if not cordon:
                self._dirty.add(self.state.table.row(event.name))
            self._note(kind, event.name, "")

    def _arrive(self, job: Job) -> None:
        if job.id in self._jobs:
            raise ConfigError(f"job {job.id} is submitted twice")
        self._jobs[job.id] = job
        rec = JobOutcome(job.id, self.now, job.task_count, _job_gpu_milli(job, self.state.table))
        self.records[job.id] = rec
        try:
            self._validator.check(job, self.state.table)
        except InvalidJobError as exc:
            rec.rejected = str(exc)
            self._note("reject", job.id, rec.rejected)
            return
        self._fresh.add(job.id)
        self._note("arrive", job.id, "")

    def _complete(self, job_id: JobId, run: int) -> None:
        held = self._running.get(job_id)
        if held is None or held[0] != run:
            return  # that run was cut short by a node leaving
        del self._running[job_id]
        for p in held[1]:
            self.state.forget(p.task)
            self._release(p)
        self.records[job_id].end_s = self.now
        self._note("finish", job_id, "")

    def _remove_node(self, name: NodeName) -> None:
        lost = self.state.remove_node(name)  # forgets what ran there
        for p in lost:
            self._release(p)
        for job_id in sorted({p.job for p in lost}):
            _, placements = self._running.pop(job_id)
            for p in placements:
                if p.node != name:
                    self.state.forget(p.task)
                    self._release(p)
            self.records[job_id].restarts += 1
            self._fresh.add(job_id)
            self._note("evict", job_id, f"node {name} left")
        self._recount_capacity()
        self._note(EventKind.NODE_REMOVED, name, f"{len(lost)} tasks lost")

    # -- the cycle -------------------------------------------------------------------------

    def _cycle(self) -> None:
        rows = np.fromiter(sorted(self._dirty), np.int64, count=len(self._dirty))
        self._dirty.clear()
        direct = set(self._fresh)
        if rows.size:
            direct |= self._parked_gangs
            self._parked_gangs.clear()
        self._fresh.clear()
        hinted = NO_SLOTS
        if rows.size:
            hinted = self._parked.candidates(self.state.table, rows if self.hints else None)
        if direct or hinted.size:
            first = sorted((self._jobs[j] for j in direct), key=fifo)
            result = run_cycle(self.state, self._offer(first, hinted, rows), self.profile)
            self.cycles += 1
            self._carry_out(result)
            if self.on_cycle is not None:
                self.on_cycle(self, result)
        self._sample()

    def _offer(
        self, direct: list[Job], hinted: npt.NDArray[np.int64], rows: npt.NDArray[np.int64]
    ) -> Iterator[Job]:
        """The jobs of one cycle, in FIFO order, as ``run_cycle`` pulls them.

        ``direct`` jobs are offered as they are; ``hinted`` are parked jobs (slots of the
        parked index, in FIFO order) that passed the hint on ``rows`` at the start of the
        cycle. Jobs placed earlier in the cycle may take that room, so once ``rows`` have
        changed the hint is checked again for the parked jobs still to come, and a job that
        no longer passes it stays parked without a placement attempt.
        """
        t = self.state.table
        parked = self._parked
        seen = t.gen[rows].copy()
        alive = np.ones(hinted.size, np.bool_)
        i = f = 0
        while True:
            if i < hinted.size and self.hints:
                now = t.gen[rows]
                if not np.array_equal(now, seen):
                    seen = now.copy()
                    alive[i:] &= parked.could_fit(t, rows, hinted[i:])
                if not alive[i]:
                    ahead = np.flatnonzero(alive[i:])
                    i = i + int(ahead[0]) if ahead.size else hinted.size
            job: Job | None = None
            if i < hinted.size:
                job = self._jobs[parked.job_at(int(hinted[i]))]
                if f < len(direct) and fifo(direct[f]) < fifo(job):
                    job = None
            if job is not None:
                parked.discard(job.id)
                i += 1
            elif f < len(direct):
                job = direct[f]
                f += 1
            else:
                return
            self.offers += 1
            yield job

    def _carry_out(self, result: CycleResult) -> None:
        for bind in result.binds:
            job = self._jobs[bind.job]
            for p in bind.placements:
                self.state.confirm(p.task)
                self._take(p)
            run = self._runs.get(job.id, 0) + 1
            self._runs[job.id] = run
            self._running[job.id] = (run, bind.placements)
            rec = self.records[job.id]
            if rec.start_s is None:
                rec.start_s = self.now
            rec.nodes = tuple(sorted({p.node for p in bind.placements}))
            if self.keep_log:
                self._note("bind", job.id, _describe_binds(bind.placements))
            if job.duration_s is not None:
                self._push(Event(self.now + job.duration_s, EventKind.COMPLETION, job=job, run=run))
        for park in result.parks:
            job = self._jobs[park.job]
            rec = self.records[job.id]
            rec.parks += 1
            rec.last_reason = park.status.message
            if not rec.first_reason:
                rec.first_reason = rec.last_reason
                rec.first_reasons = park.status.reasons
            if job.task_count == 1 and len(job.pod_sets) == 1:
                self._parked.add(job)
            else:
                self._parked_gangs.add(job.id)
            self._note("park", job.id, rec.last_reason)

    # -- accounting ------------------------------------------------------------------------

    def _take(self, p: Placement) -> None:
        self._gpu_used += _placement_gpu_milli(p, self.state.table)
        self._cpu_used += p.cpu_milli

    def _release(self, p: Placement) -> None:
        self._gpu_used -= _placement_gpu_milli(p, self.state.table)
        self._cpu_used -= p.cpu_milli
        i = self.state.table.index.get(p.node)
        if i is not None:
            self._dirty.add(i)

    def _recount_capacity(self) -> None:
        """GPU capacity: healthy cards of live nodes, MIG-partitioned ones included."""
        t = self.state.table
        gpus = cpu = 0
        for i in t.live().tolist():
            node = t.nodes[i]
            gpus += sum(1 for g in node.gpus if g.healthy)
            cpu += node.cpu_milli
        self._gpu_total = gpus * WHOLE_GPU_MILLI
        self._cpu_total = cpu

    def _sample(self) -> None:
        s = self.series
        s.time_s.append(self.now)
        s.gpu_used_milli.append(self._gpu_used)
        s.gpu_total_milli.append(self._gpu_total)
        s.cpu_used_milli.append(self._cpu_used)
        s.cpu_total_milli.append(self._cpu_total)
        s.pending.append(self.pending)
        s.running.append(len(self._running))

    def _note(self, what: str, subject: str, detail: str) -> None:
        if self.keep_log:
            self.log.append((self.now, str(what), str(subject), detail))

    # -- views for reports -----------------------------------------------------------------

    def pending_jobs(self) -> list[Job]:
        ids = self._fresh | self._parked.ids() | self._parked_gangs
        return sorted((self._jobs[j] for j in ids), key=fifo)

    def running_placements(self) -> Iterator[Placement]:
        for _, placements in self._running.values():
            yield from placements

    def gpu_allocated(self) -> tuple[int, int]:
        """(milli-GPU allocated, milli-GPU of capacity) right now."""
        return self._gpu_used, self._gpu_total


def _placement_gpu_milli(p: Placement, table: NodeTable) -> int:
    if not p.shares:
        return 0
    if all(s.mig_profile is None for s in p.shares):
        return p.gpu_milli
    node = _node_by_name(table, p.node)
    return sum(share_milli(s, node.gpus[s.index]) for s in p.shares)


def _node_by_name(table: NodeTable, name: NodeName) -> Node:
    i = table.index.get(name)
    if i is not None:
        return table.nodes[i]
    return next(n for n in reversed(table.nodes) if n.name == name)  # a node being removed


def _job_gpu_milli(job: Job, table: NodeTable) -> int:
    """GPU compute a job asks for, in milli-GPU; a MIG instance counts as its declared share."""
    cards = [g for n in table.nodes for g in n.gpus]
    return sum(request_milli(ps.gpu, cards) * ps.count for ps in job.pod_sets)


def _describe_binds(placements: tuple[Placement, ...]) -> str:
    parts = []
    for p in placements:
        cards = ",".join(
            f"{s.index}"
            + (
                f":{s.mig_profile}"
                if s.mig_profile
                else ""
                if s.gpu_milli == WHOLE_GPU_MILLI
                else f":{s.gpu_milli}m"
            )
            for s in p.shares
        )
        parts.append(f"{p.node}[{cards}]" if cards else p.node)
    return " ".join(parts)
