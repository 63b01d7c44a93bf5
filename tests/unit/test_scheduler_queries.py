"""The questions an outside scheduler asks the core (kube-scheduler's extender: filter,
prioritize, bind) get the answers the core's own placement would give."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpupool.core import ConflictError, NodeName
from gpupool.core.placement.place import place_task
from gpupool.core.scheduler import Scheduler
from tests.builders import job, node, queue_config, share, whole


def sched() -> Scheduler:
    nodes = [node("full", gpu=8), node("half", gpu=8), node("empty", gpu=8), node("small", gpu=1)]
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
    chosen, _ = place_task(task, s._state.snapshot(), s.profile)
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


def test_node_use_values_cards_as_the_core_does() -> None:
    s = sched()
    uses = {u.node.name: u for u in s.nodes_use()}
    assert [u.node.name for u in s.nodes_use()] == ["full", "half", "empty", "small"]
    assert sum(u.gpu_milli_used for u in uses.values()) == s.totals()["gpu_milli_used"] == 10_000
    full = s.node_use(NodeName("full"))
    assert full is not None and full.cpu_used_milli > 0
    assert s.node_use(NodeName("gone")) is None
    free, fragmented = s.fragmentation()
    assert free == 25 * 1000 - 10_000 and fragmented == 0  # whole cards: none partly used


SRC = Path(__file__).resolve().parents[2] / "src" / "gpupool"
INSIDE = re.compile(r"\b(?:sched|scheduler|sched2)\.(tree|_state|_tree|_queues|_ctx)\b")


def test_adapters_ask_the_scheduler_and_do_not_reach_inside() -> None:
    """Outside the core, the Scheduler is used through its facts, decisions and queries:
    its cluster state, quota tree, queues and context are its own."""
    found = {}
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC).as_posix()
        if rel.startswith("core/"):
            continue
        hits = sorted({m.group(1) for m in INSIDE.finditer(path.read_text())})
        if hits:
            found[rel] = hits
    assert found == {}, found
