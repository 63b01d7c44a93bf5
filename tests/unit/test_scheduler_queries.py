"""The questions an outside scheduler asks the core (kube-scheduler's extender: filter,
prioritize, bind) get the answers the core's own placement would give."""

from __future__ import annotations

import pytest

from gpupool.core import ConflictError, NodeName
from gpupool.core.placement.place import place_task
from gpupool.core.scheduler import Scheduler
from tests.builders import job, node, queue_config, share, whole


def sched() -> Scheduler:
    nodes = [node("full", gpu=8), node("half", gpu=8), node("empty", gpu=8),
             node("small", gpu=1)]
    s = Scheduler(nodes, queue_config({"a": 32}, cohort=None))
    s.submit(job("x", tasks=6, gpu=whole(1), queue="a"), 0.0)
    s.submit(job("y", tasks=1, gpu=whole(4), queue="a"), 0.0)
    s.cycle(0.0)
    return s


def test_scores_rank_nodes_as_placement_does() -> None:
    s = sched()
    task = next(job("z", gpu=share(500, 1000), queue="a").tasks())
    fit, _ = s.feasible_nodes(task)
    scores = s.node_scores(task)
    assert set(scores) == set(fit) and all(0.0 <= v <= 100.0 for v in scores.values())
    chosen, _ = place_task(task, s.state.snapshot(), s.profile)
    assert chosen is not None and scores[chosen.node] == max(scores.values())
    placement = s.place_on(task, chosen.node)
    assert placement.node == chosen.node and placement.shares


def test_a_node_that_does_not_fit_is_filtered_and_refused() -> None:
    s = sched()
    task = next(job("big", gpu=whole(8), queue="a").tasks())
    fit, _ = s.feasible_nodes(task)
    assert NodeName("small") not in fit and NodeName("empty") in fit
    assert NodeName("small") not in s.node_scores(task)
    with pytest.raises(ConflictError, match="no longer fits on small"):
        s.place_on(task, NodeName("small"))
    nothing, why = s.feasible_nodes(next(job("huge", gpu=whole(16), queue="a").tasks()))
    assert nothing == [] and "0/4 nodes fit" in why.message
