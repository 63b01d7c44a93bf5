"""A job no flavor of its ClusterQueue could ever admit is refused when it is submitted, by the
core, so every mode (serve, k8s, sim) refuses the same job instead of queueing it forever."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpupool.core import InvalidJobError, JobId
from gpupool.core.scheduler import Scheduler
from gpupool.sim.scenario import simulate
from tests.builders import job, node, queue_config, whole
from tests.sim.test_scenario import explicit


def test_a_job_over_its_cohorts_whole_quota_is_refused() -> None:
    s = Scheduler([node("n0", gpu=8), node("n1", gpu=8)], queue_config({"a": 2, "b": 2}))
    with pytest.raises(InvalidJobError) as info:
        s.submit(job("big", tasks=5, gpu=whole(1), queue="a"), 0.0)
    assert info.value.field == "pod_sets"
    assert (
        "can never be admitted by ClusterQueue a, even with every other queue idle"
        in info.value.rule
    )
    assert s.pending() == []
    s.submit(job("fits", tasks=4, gpu=whole(1), queue="a"), 0.0)  # borrowing b's 2: fine
    assert [str(b.job) for b in s.cycle(0.0).binds] == ["fits"]


def test_the_ceiling_follows_a_new_configuration() -> None:
    s = Scheduler([node("n0", gpu=8)], queue_config({"a": 1}, cohort=None))
    with pytest.raises(InvalidJobError):
        s.submit(job("x", tasks=2, gpu=whole(1), queue="a"), 0.0)
    s.update_config(queue_config({"a": 2}, cohort=None))
    s.submit(job("x", tasks=2, gpu=whole(1), queue="a"), 0.0)


def test_the_simulator_marks_such_a_job_rejected(tmp_path: Path) -> None:
    # queues a and b hold 4 GPUs each in one cohort: 12 GPUs can never be admitted
    s = explicit(
        tmp_path,
        """\
  - name: team-a
    queue: team-a/jobs
    streams:
    - name: x
      jobs: [{at: 3s}]
      gpus: 4
      tasks: 3
      duration: 5m
""",
    )
    r = simulate(s, 1)
    run = r.jobs[JobId("team-a-x-00000")]
    assert "can never be admitted by ClusterQueue a" in run.rejected
    assert run.start_s is None
