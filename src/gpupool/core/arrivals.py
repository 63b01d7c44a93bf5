"""Expected arrivals: each queue that has been submitting steadily is expected to go on.

The wait estimates (``core/estimate.py``) add the jobs a queue is expected to submit to their
forecast, so that capacity a queue frees is not all forecast to go to others when its own
next jobs, ahead of them in the fair order, will take it; the cycle's lending
(``core/lending.py``) holds back what a steadily submitting queue is expected to ask for.
"""

from __future__ import annotations

from collections import deque
from dataclasses import replace

from gpupool.core.model import Job, JobId

ARRIVAL_WINDOW_S = 1800.0
"""Arrivals of the last half hour set each queue's expected arrival rate."""

MIN_ARRIVALS = 4
"""A queue is expected to go on submitting once it submitted at this many distinct times
within the window, spread over at least a third of it."""

STOPPED_GAPS = 5.0
"""A queue quiet for this many of its mean gaps between arrivals is taken to have stopped.
Arrivals at a steady rate (Poisson) are that quiet by chance less than 1 % of the time
(e^-5); at two gaps it is 14 %, and a queue wrongly taken to have stopped leaves its
capacity to the others in the forecast, which then start early."""

PROJECT_MIN_SPAN_S = 0.0
"""The span of recent arrivals from which a queue's stream is projected into a forecast: any,
once it has ``MIN_ARRIVALS`` distinct arrival times and is not quiet for ``STOPPED_GAPS`` of
its gaps. (The cycle's lending waits until they span a third of the window; a forecast that
waited as long would lend a young stream's quota for the whole horizon, while the cycle
stops lending it minutes later.)"""

MAX_EXPECTED_ARRIVALS = 100
"""Expected arrivals a forecast adds per queue at most."""


class Arrivals:
    """Recent submissions per ClusterQueue: the forecast expects each queue to go on
    submitting at its rate of the last ``ARRIVAL_WINDOW_S``, jobs like its recent ones. A
    queue over its share with a long backlog otherwise looks as if the capacity others free
    will all come to it, while the others' next jobs, ahead of it in the fair order, take it.
    """

    def __init__(self, window_s: float = ARRIVAL_WINDOW_S) -> None:
        self.window_s = window_s
        self._recent: dict[str, deque[Job]] = {}
        # ``stream``'s answers at one time (``_memo_at``), until the next arrival: a cycle
        # asks it for every lender of its cohort tree per borrowing admission.
        self._memo: dict[tuple[str, float | None], tuple[float, list[Job]] | None] = {}
        self._memo_at: float | None = None

    def record(self, queue: str, job: Job, now_s: float) -> None:
        d = self._recent.setdefault(queue, deque())
        d.append(job)
        self._trim(d, now_s)
        self._memo.clear()

    def _trim(self, d: deque[Job], now_s: float) -> None:
        while d and d[0].submit_time_s < now_s - self.window_s:
            d.popleft()

    def copy(self) -> Arrivals:
        """The same recent arrivals, to be added to apart (a forecast's expected ones)."""
        out = Arrivals(self.window_s)
        out._recent = {q: deque(d) for q, d in self._recent.items()}
        return out

    def stream(
        self, queue: str, now_s: float, min_span_s: float | None = None
    ) -> tuple[float, list[Job]] | None:
        """The mean gap between the queue's recent arrivals and those jobs, when it is
        submitting steadily (at ``MIN_ARRIVALS`` distinct times or more, spread over
        ``min_span_s``, by default a third of the window, and not quiet for
        ``STOPPED_GAPS`` of its gaps); else None. The list is shared: callers only read it."""
        if now_s != self._memo_at:
            self._memo.clear()
            self._memo_at = now_s
        key = (queue, min_span_s)
        if key not in self._memo:
            self._memo[key] = self._stream(queue, now_s, min_span_s)
        return self._memo[key]

    def _stream(
        self, queue: str, now_s: float, min_span_s: float | None
    ) -> tuple[float, list[Job]] | None:
        d = self._recent.get(queue)
        if not d:
            return None
        self._trim(d, now_s)
        recent = list(d)
        if len({j.submit_time_s for j in recent}) < MIN_ARRIVALS:
            return None  # a burst or a few jobs: nothing says more are coming
        first, last = recent[0].submit_time_s, recent[-1].submit_time_s
        if last - first < (self.window_s / 3 if min_span_s is None else min_span_s):
            return None
        # The rate between the first and the last arrival; a queue quiet for longer than
        # ``STOPPED_GAPS`` of its mean gaps has stopped submitting.
        gap = (last - first) / sum(1 for j in recent if j.submit_time_s > first)
        if now_s - last > STOPPED_GAPS * gap:
            return None
        return gap, recent

    def expected(self, now_s: float, horizon_s: float) -> list[Job]:
        """Jobs expected to arrive from ``now_s`` to ``horizon_s``, per queue evenly spaced at
        its recent rate, each a copy of one of its recent jobs in turn (ids end in ``~k``),
        all in order of arrival. A stream that began less than a third of the window ago
        is expected to go on as well (``PROJECT_MIN_SPAN_S``): the cycle will take it for a
        stream once its arrivals span that third, and lend around it from then on."""
        out: list[Job] = []
        for queue in sorted(self._recent):
            got = self.stream(queue, now_s, PROJECT_MIN_SPAN_S)
            if got is None:
                continue
            gap, recent = got
            k = 0
            t = now_s + gap
            while t < horizon_s and k < MAX_EXPECTED_ARRIVALS:
                src = recent[k % len(recent)]
                out.append(replace(src, id=JobId(f"{src.id}~{k}"), submit_time_s=t))
                k += 1
                t += gap
        # In time order: the forecast takes them in as its clock passes their arrival.
        out.sort(key=lambda j: (j.submit_time_s, j.id))
        return out
