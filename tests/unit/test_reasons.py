"""Why a job waits, as data: the filters, admission and the cycle give ``Reason``s that say
who holds the job back and how many nodes; the sentence users read is rendered from them."""

from __future__ import annotations

from dataclasses import replace

from gpupool.core.cluster import ClusterState
from gpupool.core.placement.place import place_job
from gpupool.core.placement.registry import default_profile
from gpupool.core.reasons import Reason, Step, nodes_fit, plugins, sentence
from gpupool.core.scheduler import Scheduler
from tests.builders import job, node, queue_config, share, whole


def test_a_fit_error_says_each_filter_and_its_nodes() -> None:
    cordoned = replace(node("c", gpu=8), schedulable=False)
    state = ClusterState([node("a", gpu=2), node("b", gpu=2), cordoned])
    placements, status = place_job(job("j", gpu=whole(4)), state.snapshot(), default_profile())
    assert not placements
    assert [(r.plugin, r.nodes, r.of) for r in status.reasons] == [
        ("gpu-fit", 2, 3),
        ("node-schedulable", 1, 3),
    ]
    assert status.reasons[0].gpu == "whole" and status.reasons[0].resolvable
    assert not status.reasons[1].resolvable
    assert (
        status.message == "0/3 nodes fit: 2 fewer than 4 whole GPUs free, 1 cordoned or not ready"
    )


def test_a_gang_says_its_failing_task_before_the_filters() -> None:
    state = ClusterState([node("a", gpu=2)])
    _, status = place_job(job("g", tasks=2, gpu=whole(2)), state.snapshot(), default_profile())
    [r] = status.reasons
    assert r.plugin == "gpu-fit" and r.nodes == 1
    assert r.scope == ("gang g: 1/2 tasks fit; g/main-1",)
    assert (
        status.message == "gang g: 1/2 tasks fit; g/main-1: 0/1 nodes fit: 1 fewer than 2 "
        "whole GPUs free"
    )


def test_sentence_groups_one_attempts_nodes_and_joins_clauses() -> None:
    quota = Reason(Step.QUOTA, "queue a at quota for h100 GPUs (6/6 GPUs)", flavor="h100")
    fit = [
        r.within("a100", flavor="a100")
        for r in nodes_fit(
            12,
            [
                Reason("node-schedulable", "cordoned or not ready", 4, resolvable=False),
                Reason("gpu-fit", "no GPU with 50% of a card and 20Gi free", 8, gpu="slice"),
            ],
        )
    ]
    said = sentence([quota, *fit])
    assert said == (
        "queue a at quota for h100 GPUs (6/6 GPUs); a100: 0/12 nodes fit: 8 no "
        "GPU with 50% of a card and 20Gi free, 4 cordoned or not ready"
    )
    assert sentence(nodes_fit(0, [])) == "0/0 nodes fit"
    assert plugins([quota, *fit]) == ["quota", "gpu-fit", "node-schedulable"]


def test_admission_names_the_flavor_of_each_attempt() -> None:
    config = queue_config({"a": 1})
    s = Scheduler([node("n0", gpu=1)], config)
    s.submit(job("x", gpu=share(500), queue="a"), 0)
    s.submit(job("y", gpu=share(500), queue="a"), 0)
    s.submit(job("z", gpu=share(500), queue="a"), 0)
    r = s.cycle(0)
    assert len(r.binds) == 2
    [park] = r.parks
    [why] = park.status.reasons
    assert (why.plugin, why.flavor, why.of) == ("quota", "gpu", None)
    assert park.status.message.startswith("queue a at quota for gpu GPUs")


def test_pending_jobs_are_counted_by_the_plugin_holding_them_back() -> None:
    s = Scheduler([node("n0", gpu=2)], queue_config({"a": 2, "b": 4}, cohort=None))
    s.submit(job("a1", gpu=whole(2), queue="a"), 0)
    s.submit(job("a2", gpu=whole(1), queue="a"), 0)  # a at quota
    s.submit(job("b1", gpu=whole(2), queue="b"), 0)  # within quota, no cards left
    assert s.pending_reasons() == {}  # nothing tried yet: no reason
    s.cycle(0)
    assert s.pending_reasons() == {"quota": 1, "gpu-fit": 1}
