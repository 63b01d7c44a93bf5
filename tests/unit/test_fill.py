"""The eventual waste of a free gap (``fill.py``), and the card a gpupool slice takes by it."""

from __future__ import annotations

import numpy as np
import pytest

from gpupool.core import ClusterState, GpuShare, NodeName, Placement, TaskId, place_task
from gpupool.core.model import JobId
from gpupool.core.placement.plugins.fill import eventual_waste, fill_gain
from gpupool.core.placement.plugins.frag import PodShape, TypicalPods
from gpupool.core.placement.registry import openb_profile
from tests.builders import job, node, share, whole

BIG_AND_MID = TypicalPods((PodShape(0, 810, 1), PodShape(0, 470, 1)), (1, 1), 2)
"""Half the pods 810-milli slices, half 470: an 810 leaves 190 that neither fits."""


def test_eventual_waste_follows_the_draw_until_a_pod_does_not_fit() -> None:
    ew = eventual_waste(BIG_AND_MID)
    assert ew[0] == 0.0
    assert ew[190] == pytest.approx(190.0)  # nothing fits: wasted whole
    assert ew[469] == pytest.approx(469.0)
    # 530: an 810 ends it (530 wasted), a 470 leaves 60 that nothing fits
    assert ew[530] == pytest.approx(0.5 * 530 + 0.5 * 60)
    # a fresh card: an 810 leaves 190, a 470 leaves 530
    assert ew[1000] == pytest.approx(0.5 * 190 + 0.5 * ew[530])
    assert (ew <= np.arange(1001)).all()


def test_eventual_waste_is_fgds_per_card_term_when_nothing_refills() -> None:
    # whole cards only: a gap fits a pod only when free, and then nothing is left
    tp = TypicalPods((PodShape(0, 1000, 1), PodShape(0, 1000, 2)), (3, 1), 4)
    ew = eventual_waste(tp)
    assert ew[1000] == 0.0
    assert ew[999] == pytest.approx(999.0)


def test_eventual_waste_without_gpu_pods_wastes_every_gap() -> None:
    ew = eventual_waste(TypicalPods((PodShape(4000),), (1,), 1))
    assert np.array_equal(ew, np.arange(1001, dtype=np.float64))


def test_fill_gain_per_card() -> None:
    ew = eventual_waste(BIG_AND_MID)
    gain = fill_gain(ew, np.asarray([[1000, 600]]), 100)
    assert gain[0].tolist() == pytest.approx([ew[1000] - ew[900], ew[600] - ew[500]])
    assert gain[0, 1] > gain[0, 0]


MOSTLY_MID = TypicalPods((PodShape(0, 810, 1), PodShape(0, 470, 1)), (1, 3), 4)
BOUND_MID = TypicalPods((PodShape(0, 810, 1), PodShape(0, 470, 1, frozenset({"A100"}))), (1, 3), 4)
"""The same, the 470s bound to the node's model: scores take the path that caches the fall
of the measure and the fill gain per row and applies the scarcity charge on read."""


@pytest.mark.parametrize("workload", [MOSTLY_MID, BOUND_MID], ids=["free", "bound"])
def test_gpupool_slice_takes_the_card_it_fills_best_within_the_best_class(
    workload: TypicalPods,
) -> None:
    # card 0 fresh, card 1 with 600 free. A 100-milli slice on card 1 takes 100 of the milli
    # that 810s cannot use (a quarter of the pods): 25 milli of fragment, under one class of
    # the truncated score, so both cards score 50 and FGD takes the first, breaking the fresh
    # card. gpupool takes card 1, whose 600 would otherwise end as 130 beside a 470, and keeps
    # the fresh card whole for an 810.
    state = ClusterState([node("n", gpu=2, cpu=64_000)])
    state.assume(Placement(TaskId("u"), JobId("u"), NodeName("n"), 0, 0, (GpuShare(1, 400, 0),)))
    task = next(job("t", gpu=share(100), cpu=1000).tasks())
    for policy, card in (("fgd", 0), ("gpupool", 1)):
        prof = openb_profile(policy, typical_pods=workload)
        p, status = place_task(task, state.snapshot(), prof)
        assert p is not None, status.message
        assert [s.index for s in p.shares] == [card], policy


def test_gpupool_whole_cards_still_take_the_lowest_free_indices() -> None:
    state = ClusterState([node("n", gpu=3, cpu=64_000)])
    task = next(job("t", gpu=whole(2), cpu=1000).tasks())
    p, _ = place_task(task, state.snapshot(), openb_profile("gpupool", typical_pods=BIG_AND_MID))
    assert p is not None
    assert [s.index for s in p.shares] == [0, 1]
