"""How much of a card a MIG instance counts for has one rule (``core.mig``), read by the
simulator's accounting, the demo's card view, the DRA reader and serve's views alike; the
client shows the server's figure."""

from __future__ import annotations

from gpupool.core.mig import (
    instance_milli,
    profile_milli,
    request_milli,
    share_mib,
    share_milli,
    taken_milli,
)
from gpupool.core.model import Gpu, GpuRequest, GpuShare, MigInstance


def mixed() -> Gpu:
    return Gpu(
        0,
        "A100-80GB",
        81920,
        mig=(MigInstance("1g.10gb", 2, 140, 10240), MigInstance("3g.40gb", 1, 420, 40960)),
    )


def test_an_instance_counts_for_the_share_its_card_declares() -> None:
    g = mixed()
    assert instance_milli(g, "3g.40gb") == 420 and instance_milli(g, "7g.80gb") == 0
    assert share_milli(GpuShare(0, 0, 40960, "3g.40gb"), g) == 420
    assert share_milli(GpuShare(0, 250, 1024), g) == 250  # a slice: its own milli
    assert request_milli(GpuRequest(mig_profile="1g.10gb"), [Gpu(1, "T4", 15360), g]) == 140
    assert request_milli(GpuRequest(count=2), []) == 2000


def test_a_profile_name_gives_the_share_when_nothing_is_declared() -> None:
    assert [profile_milli(p) for p in ("1g.10gb", "3g.40gb", "7g.80gb", "odd")] == [
        143,
        429,
        1000,
        0,
    ]


def test_a_cards_taken_instances_count_for_their_declared_shares() -> None:
    g = mixed()
    assert taken_milli(g, {"1g.10gb": 1}) == 140
    assert taken_milli(g, {"1g.10gb": 2, "3g.40gb": 1}) == 700
    assert share_mib(GpuShare(0, 0, 0, "3g.40gb"), g) == 40960
    assert share_mib(GpuShare(0, 250, 1024), g) == 1024
    full = Gpu(0, "A100-40GB", 40960, mig=(MigInstance("1g.5gb", 7, 143, 5120),))
    assert taken_milli(full, {"1g.5gb": 7}) == 1000  # never more than a whole card
