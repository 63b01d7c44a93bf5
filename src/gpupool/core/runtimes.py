"""How long a job is expected to run, and what that expectation rests on.

In order of trust:

1. a **declared duration** (``Job.duration_s``: the virtual cluster runs a job exactly that
   long; elsewhere it is the user's word), cut to the run limit when that comes first;
2. a **learned runtime**: an exponential moving average of the runtimes of the jobs that
   ended, per (queue, user), else per queue; a declared **run limit** caps it (the job is
   stopped there);
3. the **run limit** alone, when nothing was learned yet (an upper bound);
4. the configured **default runtime**.

Only jobs that ended by themselves teach the average (an evicted or cancelled run says
nothing of how long the job needs). Early on, only the short jobs have ended, so the average
alone is biased short: the learned runtime is therefore never below the mean age of the
same queue and user's runs still going (runs that have not ended count as at least their
age). The scheduler uses the expectation for the usage it
charges at admission, for reservations, and for wait estimates.

Besides the average, the last ``SAMPLES`` runtimes per key are kept: the wait estimates spread
the expected ends of the runs going by that distribution (``distribution``, with the runs
still going counted as at least their age; ``residuals``, ``quantile``) instead of ending them
all at the mean, which ends a crowd of runs at one instant while in truth they end one after
another from the first minute on. The distribution is kept per kind of job as well
(``shape``: run limit and GPU request), so that a queue's long and short kinds of work are
not forecast from one mixture; the average the scheduler charges by is not split.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from gpupool.core.model import Job

EMA_WEIGHT = 0.2
"""Weight of each new runtime in the average: about the last ten jobs count."""

SAMPLES = 64
"""Runtimes kept per key for their distribution: about the last hour of a busy queue."""

MIN_SAMPLES = 4
"""Runtimes seen ended before their distribution is used; fewer: the mean alone."""

OWN_SAMPLES = 32
"""Runtimes of one queue and user seen ended before the user's own distribution is used; until
then the queue's (all its users'). Quantiles from a handful of runtimes are far off (of 8
runtimes drawn evenly between 20 and 60 minutes, the median is 4 minutes or more off half the
time; of 32, a quarter of the time), and every forecast end of that user's runs moves with
them."""

Dist = list[tuple[float, float]]
"""A distribution of durations: (seconds, probability) points in order, summing to 1."""

Shape = tuple[object, ...]
"""What kind of job it is, for its runtime distribution: its run limit and, per pod set, the
tasks and the GPUs each asks for (``shape``)."""


def shape(job: Job) -> Shape:
    """The job's kind: jobs of one queue alike in run limit and GPU request are taken to be
    alike in runtime too (a queue's 2-GPU training runs and its 1-GPU runs under a 45 minute
    limit are two distributions, not one mixture)."""
    return (
        job.run_limit_s,
        *(
            (ps.count, ps.gpu.count, ps.gpu.gpu_milli, ps.gpu.memory_mib, ps.gpu.mig_profile)
            for ps in job.pod_sets
        ),
    )


def survival(ended: list[float], going: list[float], tail_at: float) -> Dist:
    """Kaplan-Meier: the distribution of runtimes from runs that ``ended`` after their
    runtime and runs still ``going`` at their age (censored: they take at least that long).
    The probability left past the last end is put at ``tail_at`` or the longest time seen,
    whichever is later."""
    events = sorted([(t, 1) for t in ended] + [(t, 0) for t in going])
    at_risk = len(events)
    left = 1.0
    out: Dist = []
    i = 0
    while i < len(events):
        t = events[i][0]
        done = gone = 0
        while i < len(events) and events[i][0] == t:
            done += events[i][1]
            gone += 1 - events[i][1]
            i += 1
        if done:
            drop = left * done / at_risk
            out.append((t, drop))
            left -= drop
        at_risk -= done + gone
    if left > 1e-9:
        out.append((max(tail_at, events[-1][0]), left))
    return out


PRIOR_JOBS = 3
"""The runtime assumed before any job ended (the run limit, else the default runtime) counts
as this many jobs in the learned runtime: ``(n * average + 3 * assumed) / (n + 3)`` after
``n`` ends."""


@dataclass(frozen=True, slots=True)
class Expected:
    runtime_s: float
    basis: str  # "declared duration", "learned runtime of team-a/ann (12 jobs)", ...


@dataclass(slots=True)
class _Ema:
    value: float  # of runtimes
    n: int
    square: float = 0.0  # of squared runtimes: their spread

    def cv2(self) -> float:
        """Squared coefficient of variation, 0 (always the same) to 1 (memoryless) or more."""
        if self.value <= 0 or self.n < 2:
            return 0.0
        return max(0.0, self.square - self.value**2) / self.value**2


@dataclass(frozen=True, slots=True)
class _Ended:
    """A run that ended by itself: how long it ran, and when it began."""

    runtime_s: float
    started_s: float


def _cohort(ended: deque[_Ended], going: dict[str, float] | None) -> list[float]:
    """The starts of the runs still ``going`` that belong with the ``ended`` runs kept.
    Once older ends have dropped out of the kept ones, a run going since before the oldest
    kept run began is a survivor of an era whose other runs are forgotten: counted at its
    age, it alone would stand for that era and make the long tail too heavy. Only the runs
    that began at or after the start of the oldest kept ended run count then."""
    if not going:
        return []
    if ended.maxlen is None or len(ended) < ended.maxlen:
        return list(going.values())  # nothing forgotten yet
    since = ended[0].started_s
    return [t for t in going.values() if t >= since]


@dataclass(slots=True)
class _Going:
    """Runs in progress of one key, with nothing declared: how many, and their starts."""

    count: int = 0
    starts: float = 0.0

    def ages(self, now_s: float) -> float:
        return max(0.0, self.count * now_s - self.starts)


class Runtimes:
    """Expected runtimes: declared, learned per queue and user, limited, or the default."""

    def __init__(
        self, default_runtime_s: float, weight: float = EMA_WEIGHT, prior_jobs: float = PRIOR_JOBS
    ) -> None:
        self.default_runtime_s = default_runtime_s
        self.weight = weight
        self.prior_jobs = prior_jobs
        self._by_user: dict[tuple[str, str], _Ema] = {}
        self._by_queue: dict[str, _Ema] = {}
        self._going_user: dict[tuple[str, str], _Going] = {}
        self._going_queue: dict[str, _Going] = {}
        self._samples_user: dict[tuple[str, str], deque[_Ended]] = {}
        self._samples_queue: dict[str, deque[_Ended]] = {}
        self._starts_user: dict[tuple[str, str], dict[str, float]] = {}
        self._starts_queue: dict[str, dict[str, float]] = {}
        # The same per kind of job (``shape``), for the distributions only: (queue, shape) and
        # (queue, user, shape).
        self._samples_kind: dict[tuple[object, ...], deque[_Ended]] = {}
        self._starts_kind: dict[tuple[object, ...], dict[str, float]] = {}

    def started(self, job: Job, now_s: float, sign: int = 1) -> None:
        """A run began (``sign`` -1: a run that began at ``now_s`` stopped). Only runs of
        jobs that declare no duration are followed."""
        if job.duration_s is not None:
            return
        for g in (
            self._going_user.setdefault((str(job.queue), job.user), _Going()),
            self._going_queue.setdefault(str(job.queue), _Going()),
        ):
            g.count += sign
            g.starts += sign * now_s
        kind = shape(job)
        for d in (
            self._starts_user.setdefault((str(job.queue), job.user), {}),
            self._starts_queue.setdefault(str(job.queue), {}),
            self._starts_kind.setdefault((str(job.queue), kind), {}),
            self._starts_kind.setdefault((str(job.queue), job.user, kind), {}),
        ):
            if sign > 0:
                d[str(job.id)] = now_s
            else:
                d.pop(str(job.id), None)

    def stopped(self, job: Job, started_s: float) -> None:
        self.started(job, started_s, -1)

    def observe(self, job: Job, runtime_s: float, started_s: float | None = None) -> None:
        """A job ended by itself after ``runtime_s`` (its run began at ``started_s``, when
        known): learn from it. Jobs with a declared duration teach nothing (their runtime was
        known)."""
        if job.duration_s is not None or runtime_s < 0:
            return
        user_key = (str(job.queue), job.user)
        self._by_user[user_key] = self._step(self._by_user.get(user_key), runtime_s)
        self._by_queue[str(job.queue)] = self._step(self._by_queue.get(str(job.queue)), runtime_s)
        kind = shape(job)
        for d in (
            self._samples_user.setdefault(user_key, deque(maxlen=SAMPLES)),
            self._samples_queue.setdefault(str(job.queue), deque(maxlen=SAMPLES)),
            self._samples_kind.setdefault((str(job.queue), kind), deque(maxlen=SAMPLES)),
            self._samples_kind.setdefault((str(job.queue), job.user, kind), deque(maxlen=SAMPLES)),
        ):
            d.append(_Ended(runtime_s, -math.inf if started_s is None else started_s))

    def distribution(self, job: Job, now_s: float | None = None) -> Dist | None:
        """The job's runtime as a distribution, when it is learned (nothing declared) from
        ``MIN_SAMPLES`` ends or more: its queue and user's once ``OWN_SAMPLES`` of theirs
        ended, else its queue's; of its kind (``shape``) first: the user's of that kind from
        ``OWN_SAMPLES``, the queue's of that kind from ``MIN_SAMPLES``, then of any kind. The
        recent
        runtimes that ended and the runs of the same key still going (each at least its age)
        make a Kaplan-Meier estimate (``survival``): early on only the short runs have ended,
        and the runs going say how much longer the rest take. What is left past them is put
        at the run limit, else the default runtime (the prior), or at the longest seen."""
        if job.duration_s is not None:
            return None
        user_key = (str(job.queue), job.user)
        prior = job.run_limit_s if job.run_limit_s is not None else self.default_runtime_s
        kind_user = (str(job.queue), job.user, shape(job))
        kind_queue = (str(job.queue), shape(job))
        for least, ended, going in (
            (OWN_SAMPLES, self._samples_kind.get(kind_user), self._starts_kind.get(kind_user)),
            (MIN_SAMPLES, self._samples_kind.get(kind_queue), self._starts_kind.get(kind_queue)),
            (OWN_SAMPLES, self._samples_user.get(user_key), self._starts_user.get(user_key)),
            (
                MIN_SAMPLES,
                self._samples_queue.get(str(job.queue)),
                self._starts_queue.get(str(job.queue)),
            ),
        ):
            if ended is None or len(ended) < least:
                continue
            ages = [max(0.0, now_s - t) for t in _cohort(ended, going)] if now_s is not None else []
            return survival([e.runtime_s for e in ended], ages, prior)
        return None

    def from_first_end(
        self, job: Job, now_s: float, limit_s: float | None = None, at_limit: int = 1
    ) -> Dist | None:
        """The job's runtime distribution as ``distribution`` makes it, but from the first
        end of its queue on (its user's own from ``OWN_SAMPLES``): the ends and the runs still
        going (each at least its age, Kaplan-Meier), what is left past them at ``limit_s``,
        else the job's run limit, else the default runtime. A run limit is an upper bound,
        not a runtime: it gets only the weight of the runs that outlived every end, instead
        of the ``PRIOR_JOBS`` jobs' weight the learned mean gives it. None: nothing ended, or
        a declared duration. For forecasts that order a few long runs (``core.
        estimate_provisioning``); the cycle's charges keep ``expected``."""
        if job.duration_s is not None:
            return None
        user_key = (str(job.queue), job.user)
        own = self._samples_user.get(user_key)
        ended, going = own, self._starts_user.get(user_key)
        if own is None or len(own) < OWN_SAMPLES:
            ended, going = (
                self._samples_queue.get(str(job.queue)),
                self._starts_queue.get(str(job.queue)),
            )
        if not ended:
            return None
        if limit_s is None:
            limit_s = job.run_limit_s
        tail = limit_s if limit_s is not None else self.default_runtime_s
        ages = [max(0.0, now_s - t) for t in _cohort(ended, going)]
        return survival([*(e.runtime_s for e in ended), *[tail] * at_limit], ages, tail)

    def residuals(self, job: Job, age_s: float, now_s: float | None = None) -> Dist | None:
        """What is left of a learned run that has gone ``age_s``, as a distribution: the
        ``distribution`` past its age, less its age, cut at its run limit. None when its
        runtime is not learned, or nothing of it is left past the age (a run past all of it:
        ``remaining`` says)."""
        got = self.distribution(job, now_s)
        if got is None:
            return None
        left = [(t - age_s, p) for t, p in got if t > age_s]
        total = sum(p for _, p in left)
        if total <= 0:
            return None
        cap = job.run_limit_s - age_s if job.run_limit_s is not None else None
        return [(x if cap is None else min(cap, x), p / total) for x, p in left]

    def quantile(self, job: Job, u: float, now_s: float | None = None) -> float | None:
        """The ``u``-quantile (0..1) of the job's learned runtime ``distribution``, cut at its
        run limit; None when not learned."""
        got = self.distribution(job, now_s)
        if got is None:
            return None
        acc = 0.0
        x = got[-1][0]
        for t, p in got:
            acc += p
            if acc > u:
                x = t
                break
        return x if job.run_limit_s is None else min(job.run_limit_s, x)

    def _step(self, ema: _Ema | None, runtime_s: float) -> _Ema:
        if ema is None:
            return _Ema(runtime_s, 1, runtime_s**2)
        ema.value += self.weight * (runtime_s - ema.value)
        ema.square += self.weight * (runtime_s**2 - ema.square)
        ema.n += 1
        return ema

    def _ema(self, job: Job) -> _Ema | None:
        return self._by_user.get((str(job.queue), job.user)) or self._by_queue.get(str(job.queue))

    def remaining(self, job: Job, age_s: float, now_s: float | None = None) -> Expected:
        """How much longer a job that has run ``age_s`` is expected to run.

        Declared: what is left of it. Learned: the mean residual life of the runtimes seen,
        between two bounds set by their spread: runtimes that are always alike leave
        ``mean - age``; memoryless ones (as spread as an exponential) leave ``mean`` whatever
        the age; in between, a mix weighted by the squared coefficient of variation. A job
        past its expected end is given a tenth of it more. Never past the run limit."""
        exp = self.expected(job, now_s)
        left = exp.runtime_s - age_s
        basis = exp.basis
        ema = self._ema(job) if exp.basis.startswith("learned") else None
        if ema is not None:
            mix = min(1.0, ema.cv2())
            left = (1.0 - mix) * max(0.0, left) + mix * exp.runtime_s
        if left <= 0:
            left = 0.1 * exp.runtime_s
            basis = f"past its {exp.basis}"
        if job.run_limit_s is not None and job.run_limit_s - age_s < left:
            left, basis = max(0.0, job.run_limit_s - age_s), "run limit"
        return Expected(left, basis)

    def learned(self, job: Job, now_s: float | None = None) -> tuple[float, str] | None:
        """The learned runtime for the job's queue and user (else its queue), counting the
        runs still going as at least their age when ``now_s`` is given."""
        user_key = (str(job.queue), job.user)
        for ema, going, who in (
            (
                self._by_user.get(user_key),
                self._going_user.get(user_key),
                f"{job.queue}/{job.user}",
            ),
            (
                self._by_queue.get(str(job.queue)),
                self._going_queue.get(str(job.queue)),
                str(job.queue),
            ),
        ):
            if ema is None:
                continue
            # The first few ends are the short runs (the long ones are still going): until
            # there are many, the average leans on the runtime assumed before any ended.
            prior = job.run_limit_s if job.run_limit_s is not None else self.default_runtime_s
            value = (ema.n * ema.value + self.prior_jobs * prior) / (ema.n + self.prior_jobs)
            if now_s is not None and going is not None and going.count > 0:
                value = max(value, going.ages(now_s) / going.count)
            return value, f"learned runtime of {who} ({ema.n} jobs)"
        return None

    def expected(self, job: Job, now_s: float | None = None) -> Expected:
        limit = job.run_limit_s
        if job.duration_s is not None:
            if limit is not None and limit < job.duration_s:
                return Expected(limit, "run limit (before its declared duration)")
            return Expected(job.duration_s, "declared duration")
        got = self.learned(job, now_s)
        if got is not None:
            value, basis = got
            if limit is not None and limit < value:
                return Expected(limit, f"run limit (below the {basis})")
            return Expected(value, basis)
        if limit is not None:
            return Expected(limit, "run limit")
        return Expected(self.default_runtime_s, "default runtime")

    def at_most(self, job: Job) -> float:
        """How long the job can be counted on to run at most: its declared duration or run
        limit (the smaller), else the expected runtime. Reservations use it: room promised to
        a gang from a time on must be free then, so the time rests on what is declared."""
        known = [x for x in (job.duration_s, job.run_limit_s) if x is not None]
        return min(known) if known else self(job)

    def __call__(self, job: Job) -> float:
        return self.expected(job).runtime_s
