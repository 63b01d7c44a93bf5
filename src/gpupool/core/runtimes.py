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
nothing of how long the job needs). The scheduler uses the expectation for the usage it
charges at admission, for reservations, and for wait estimates.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpupool.core.model import Job

EMA_WEIGHT = 0.2
"""Weight of each new runtime in the average: about the last ten jobs count."""


@dataclass(frozen=True, slots=True)
class Expected:
    runtime_s: float
    basis: str  # "declared duration", "learned runtime of team-a/ann (12 jobs)", ...


@dataclass(slots=True)
class _Ema:
    value: float
    n: int


class Runtimes:
    """Expected runtimes: declared, learned per queue and user, limited, or the default."""

    def __init__(self, default_runtime_s: float, weight: float = EMA_WEIGHT) -> None:
        self.default_runtime_s = default_runtime_s
        self.weight = weight
        self._by_user: dict[tuple[str, str], _Ema] = {}
        self._by_queue: dict[str, _Ema] = {}

    def observe(self, job: Job, runtime_s: float) -> None:
        """A job ended by itself after ``runtime_s``: learn from it. Jobs with a declared
        duration teach nothing (their runtime was known)."""
        if job.duration_s is not None or runtime_s < 0:
            return
        user_key = (str(job.queue), job.user)
        self._by_user[user_key] = self._step(self._by_user.get(user_key), runtime_s)
        self._by_queue[str(job.queue)] = self._step(self._by_queue.get(str(job.queue)),
                                                    runtime_s)

    def _step(self, ema: _Ema | None, runtime_s: float) -> _Ema:
        if ema is None:
            return _Ema(runtime_s, 1)
        ema.value += self.weight * (runtime_s - ema.value)
        ema.n += 1
        return ema

    def learned(self, job: Job) -> tuple[float, str] | None:
        ema = self._by_user.get((str(job.queue), job.user))
        if ema is not None:
            return ema.value, f"learned runtime of {job.queue}/{job.user} ({ema.n} jobs)"
        ema = self._by_queue.get(str(job.queue))
        if ema is not None:
            return ema.value, f"learned runtime of {job.queue} ({ema.n} jobs)"
        return None

    def expected(self, job: Job) -> Expected:
        limit = job.run_limit_s
        if job.duration_s is not None:
            if limit is not None and limit < job.duration_s:
                return Expected(limit, "run limit (before its declared duration)")
            return Expected(job.duration_s, "declared duration")
        got = self.learned(job)
        if got is not None:
            value, basis = got
            if limit is not None and limit < value:
                return Expected(limit, f"run limit (below the {basis})")
            return Expected(value, basis)
        if limit is not None:
            return Expected(limit, "run limit")
        return Expected(self.default_runtime_s, "default runtime")

    def __call__(self, job: Job) -> float:
        return self.expected(job).runtime_s
