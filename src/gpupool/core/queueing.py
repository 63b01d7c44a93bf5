"""Pending jobs: per ClusterQueue, active or parked with a reason.

A parked job is not offered again until an event that could change its answer: capacity
freed or added in its queue's cohort tree, or a quota change (kube-scheduler's unschedulable
pods, Kueue's inadmissible workloads). ``ordered`` gives a queue's active jobs in admission
order: priority, then the user's decayed usage, then submit time, then id.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator, Set
from contextlib import contextmanager
from dataclasses import dataclass

from gpupool.core.errors import NotFoundError
from gpupool.core.fairshare import UsageLedger
from gpupool.core.model import ClusterQueueName, Job, JobId
from gpupool.core.placement.framework import Status
from gpupool.core.quota import QueueConfig


@dataclass(slots=True)
class Pending:
    job: Job
    queue: ClusterQueueName
    seq: int  # arrival order, the last tie-break
    reason: Status | None = None  # set while parked
    parked: bool = False
    preemptions: int = 0  # times this job was evicted so far


class Queues:
    def __init__(self, config: QueueConfig, ledger: UsageLedger) -> None:
        self.ledger = ledger
        self._jobs: dict[JobId, Pending] = {}
        self._by_queue: dict[str, dict[JobId, Pending]] = {}
        self._seq = 0
        self._names(config)

    def _names(self, config: QueueConfig) -> None:
        self._cq = {q.name for q in config.cluster_queues}
        self._local: dict[str, str] = {}
        for lq in config.local_queues:
            self._local[f"{lq.namespace}/{lq.name}"] = lq.cluster_queue
            self._local.setdefault(lq.name, lq.cluster_queue)
        self._by_queue = {q: self._by_queue.get(q, {}) for q in sorted(self._cq)}

    def reconfigure(self, config: QueueConfig) -> list[Pending]:
        """New queue names in place: every pending job is filed again under the ClusterQueue
        its queue now names, keeping its arrival order and preemption count, and made active
        (the quota changed). Jobs whose queue no longer resolves are removed and returned."""
        jobs = sorted(self._jobs.values(), key=lambda p: p.seq)
        self._jobs = {}
        self._by_queue = {}
        self._names(config)
        dropped: list[Pending] = []
        for p in jobs:
            try:
                cq = self.resolve(p.job.queue)
            except NotFoundError:
                dropped.append(p)
                continue
            p.queue = cq
            p.parked = False
            self._jobs[p.job.id] = p
            self._by_queue[cq][p.job.id] = p
        return dropped

    def resolve(self, queue: str) -> ClusterQueueName:
        """The ClusterQueue behind a LocalQueue name (``ns/name`` or ``name``) or a CQ name."""
        cq = self._local.get(queue)
        if cq is not None:
            return ClusterQueueName(cq)
        if queue in self._cq:
            return ClusterQueueName(queue)
        known = sorted({*self._local, *self._cq})
        raise NotFoundError(f"queue {queue!r} does not exist; known: {', '.join(known)}")

    def add(self, job: Job, preemptions: int = 0) -> Pending:
        cq = self.resolve(job.queue)
        self._seq += 1
        p = Pending(job, cq, self._seq, preemptions=preemptions)
        self._jobs[job.id] = p
        self._by_queue[cq][job.id] = p
        return p

    @contextmanager
    def provisional(self, jobs: Iterable[Job]) -> Iterator[list[Pending]]:
        """Jobs that are pending only inside the block (a forecast's expected arrivals); on
        leaving it they are gone and arrival numbers are as before."""
        seq = self._seq
        added = [self.add(j) for j in jobs]
        try:
            yield added
        finally:
            for p in added:
                if p.job.id in self._jobs:
                    self.remove(p.job.id)
            self._seq = seq

    def remove(self, job: JobId) -> Pending:
        p = self._jobs.pop(job, None)
        if p is None:
            raise NotFoundError(f"job {job} is not pending")
        del self._by_queue[p.queue][job]
        return p

    def get(self, job: JobId) -> Pending | None:
        return self._jobs.get(job)

    def __contains__(self, job: JobId) -> bool:
        return job in self._jobs

    def __len__(self) -> int:
        return len(self._jobs)

    def queues(self) -> list[str]:
        return sorted(self._by_queue)

    def park(self, job: JobId, reason: Status) -> None:
        p = self._jobs[job]
        p.parked = True
        p.reason = reason

    def note(self, job: JobId, reason: Status) -> None:
        """Record why a job waits without parking it (it stays active)."""
        self._jobs[job].reason = reason

    def wake(self, queues: set[str] | None = None) -> None:
        """Parked jobs of ``queues`` (all when None) become active again."""
        for q, jobs in self._by_queue.items():
            if queues is None or q in queues:
                for p in jobs.values():
                    p.parked = False

    def ordered(self, queue: str, now_s: float, active_only: bool = True) -> list[Pending]:
        led = self.ledger
        usage = {
            u: led.value(queue, u, now_s)
            for u in {p.job.user for p in self._by_queue[queue].values()}
        }
        jobs = [p for p in self._by_queue[queue].values() if not (active_only and p.parked)]
        jobs.sort(key=lambda p: (-p.job.priority, usage[p.job.user], p.job.submit_time_s, p.seq))
        return jobs

    def has_pending(self, queue: str) -> bool:
        """Whether the queue holds any pending job, active or parked."""
        return bool(self._by_queue[queue])

    def has_active(self, queue: str) -> bool:
        return any(not p.parked for p in self._by_queue[queue].values())

    def all(self) -> list[Pending]:
        return list(self._jobs.values())


class AdmissionOrder:
    """The order in which pending jobs are offered for admission: the one home of it, used by
    the scheduling cycle and by the wait estimator alike.

    Queues go by lowest ``key`` (their fairness key: see ``fairshare.ShareHistory``), re-keyed
    after each job offered, so one queue's admission lets the next-lowest queue go; inside a
    queue, jobs go by ``Queues.ordered`` (priority, the user's decayed usage, age). A queue in
    ``strict`` (StrictFIFO) whose head was not admitted is offered nothing more: its head
    blocks it. ``active_only``: leave parked jobs out (the cycle) or offer them too (a
    forecast, which does not know what will wake them). ``only``: offer just these jobs
    (the forecast's jobs not yet started), in the same order.
    """

    def __init__(
        self,
        queues: Queues,
        names: Iterable[str],
        key: Callable[[str], float],
        now_s: float,
        *,
        strict: frozenset[str] = frozenset(),
        active_only: bool = True,
        only: Set[JobId] | None = None,
    ) -> None:
        self._queues = queues
        self._key = key
        self._now_s = now_s
        self._strict = strict
        self._active_only = active_only
        self._only = only
        self._jobs: dict[str, list[Pending]] = {}
        self._next: dict[str, int] = {}
        self._heap = [
            (key(q), q)
            for q in names
            if (queues.has_active(q) if active_only else queues.has_pending(q))
        ]
        heapq.heapify(self._heap)
        self._current: str | None = None

    def next(self) -> Pending | None:
        """The next job to offer; None when every queue is done. Call ``offered`` after each."""
        while self._heap:
            _, q = heapq.heappop(self._heap)
            jobs = self._jobs.get(q)
            if jobs is None:
                jobs = self._queues.ordered(q, self._now_s, active_only=self._active_only)
                if self._only is not None:
                    jobs = [p for p in jobs if p.job.id in self._only]
                self._jobs[q] = jobs
                self._next[q] = 0
            i = self._next[q]
            if i >= len(jobs):
                continue
            self._next[q] = i + 1
            p = jobs[i]
            if p.job.id not in self._queues:  # admitted or removed earlier in this pass
                heapq.heappush(self._heap, (self._key(q), q))
                continue
            self._current = q
            return p
        return None

    def offered(self, admitted: bool) -> None:
        """The job last returned was admitted or not: its queue is re-keyed (or, for a
        StrictFIFO queue whose head stays, done)."""
        q = self._current
        if q is None:
            return
        self._current = None
        if not admitted and q in self._strict:
            return
        heapq.heappush(self._heap, (self._key(q), q))
