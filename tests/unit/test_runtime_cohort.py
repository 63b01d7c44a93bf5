"""The runs still going that the learned runtime distribution counts (``core/runtimes.py``):
only those of the era the kept runtimes cover."""

from __future__ import annotations

from dataclasses import replace

from gpupool.core import JobId
from gpupool.core.runtimes import SAMPLES, Runtimes
from tests.builders import job


def _stream(r: Runtimes, now_s: float) -> None:
    """One run starts every 100 s from t=0 in queue q; every tenth runs 20,000 s, the others
    1,000 s. Each run that ended by ``now_s`` is learned, the others are still going."""
    base = job("base", queue="q")
    for i in range(int(now_s // 100)):
        start = 100.0 * i
        runtime = 20_000.0 if i % 10 == 0 else 1_000.0
        j = replace(base, id=JobId(f"r{i}"))
        r.started(j, start)
        if start + runtime <= now_s:
            r.stopped(j, start)
            r.observe(j, runtime, start)


def _tail(r: Runtimes, now_s: float) -> float:
    got = r.distribution(job("next", queue="q"), now_s)
    assert got is not None
    return sum(p for t, p in got if t > 1_000.0)


def test_runs_going_since_before_the_kept_runtimes_do_not_weigh_the_tail() -> None:
    """At t=15,000 s, 126 short runs have ended and only the last 64 are kept (started from
    t=7,600 s on); none of the 15 long runs has ended. A tenth of the runs are long. Counted
    with every long run still going (those since t=0 too, whose short peers are forgotten),
    the distribution put 15 of 79 (19 %) past 1,000 s; only the runs that began since the
    oldest kept run began (7 long ones) make it 7 of 71 (9.9 %)."""
    r = Runtimes(3600.0)
    _stream(r, 15_000.0)
    assert 0.08 <= _tail(r, 15_000.0) <= 0.12


def test_every_run_going_counts_while_nothing_was_forgotten() -> None:
    """Before the kept runtimes are full, no era is missing: every run still going counts
    (the early runs are then all that says how long the long ones take)."""
    r = Runtimes(3600.0)
    _stream(r, 4_000.0)  # 27 short runs ended, fewer than SAMPLES
    ended = 27
    assert ended < SAMPLES
    # 4 long runs going (started 0, 1000, 2000, 3000; ages 4000..1000), all at risk at 1,000 s.
    assert _tail(r, 4_000.0) == 4 / (ended + 4)
