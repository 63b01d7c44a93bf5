"""The vendor-neutral device model: each division rule shapes slices as its vendor's device
plugin can enforce them, placement respects it, and NVIDIA's cards behave as before."""

from __future__ import annotations

import dataclasses

import pytest

from gpupool.config.loader import load_cluster
from gpupool.core import ClusterState, ConfigError, ConflictError, default_profile, place_task
from gpupool.core.devices import NVIDIA, DeviceClass, Division, Template
from gpupool.core.model import GpuShare, NodeName, Placement, TaskId
from gpupool.core.vendors import VENDOR_CLASSES
from tests.builders import gpus, job, node, share, whole

ASCEND = VENDOR_CLASSES["ascend"]


def cards(device: DeviceClass, count: int = 2, mib: int = 65536, model: str = "X") -> tuple:
    return tuple(dataclasses.replace(g, device=device) for g in gpus(count, model, mib))


def place(state: ClusterState, name: str, req):  # type: ignore[no-untyped-def]
    p, status = place_task(next(job(name, gpu=req).tasks()), state.snapshot(), default_profile())
    if p is not None:
        state.assume(p)
    return p, status


@pytest.mark.parametrize(
    ("device", "ask", "card_mib", "shape"),
    [
        (NVIDIA, (333, 1001), 40960, (333, 1001)),  # as asked
        (VENDOR_CLASSES["hygon"], (333, 1001), 16384, (340, 1001)),  # 1 % cores
        (VENDOR_CLASSES["cambricon"], (55, 300), 16384, (60, 512)),  # 256 MiB units
        (VENDOR_CLASSES["mthreads"], (100, 600), 16384, (125, 1024)),  # 16 core groups, 512 MiB
        (VENDOR_CLASSES["metax"], (10, 1), 65536, (10, 1024)),  # 1 GiB units
        (ASCEND, (100, 4000), 65536, (250, 16384)),  # smallest template
        (ASCEND, (300, 4000), 65536, (500, 32768)),  # compute decides
        (ASCEND, (600, 4000), 65536, None),  # no template holds it
        (VENDOR_CLASSES["kunlunxin"], (100, 20000), 98304, (250, 24576)),  # a quarter
        (VENDOR_CLASSES["kunlunxin"], (100, 30000), 98304, (500, 49152)),  # memory decides
        (DeviceClass("x", Division.WHOLE), (1, 1), 16384, None),  # whole cards only
        (VENDOR_CLASSES["hygon"], (999, 10), 16384, None),  # rounds to a whole card
    ],
)
def test_a_slice_takes_the_shape_its_rule_gives(device, ask, card_mib, shape) -> None:  # type: ignore[no-untyped-def]
    assert device.slice_shape(*ask, card_mib) == shape
    if shape is not None:
        assert device.allows(*shape, card_mib)
        assert shape[0] >= ask[0] and shape[1] >= ask[1]  # never less than asked


@pytest.mark.parametrize(
    "device",
    [
        VENDOR_CLASSES["mthreads"],
        VENDOR_CLASSES["hygon"],
        DeviceClass("x", Division.FREE, compute_steps=7),
    ],
)
def test_a_shape_once_given_is_given_again(device: DeviceClass) -> None:
    # 16 core groups: a step is 62.5 milli, held as 63; asking 63 again must give 63, not 125
    for milli in range(1, 1000):
        shape = device.slice_shape(milli, 0, 16384)
        if shape is not None:
            assert shape[0] >= milli and device.slice_shape(*shape, 16384) == shape
            assert device.allows(*shape, 16384)


def test_every_vendor_default_is_valid() -> None:
    for vendor, device in VENDOR_CLASSES.items():
        assert device.vendor == vendor
        assert device.problems() == []
    assert NVIDIA.is_plain and not ASCEND.is_plain


def test_nvidia_cards_keep_the_slice_as_asked_and_the_table_stays_plain() -> None:
    state = ClusterState([node("a", gpu=2)])
    p, _ = place(state, "j", share(333, 1001))
    assert p is not None and p.shares[0].gpu_milli == 333 and p.shares[0].memory_mib == 1001
    assert state.table.plain


def test_a_whole_only_card_never_gets_a_slice_but_takes_whole_requests() -> None:
    state = ClusterState([node("w", cards=cards(DeviceClass("acme", Division.WHOLE)))])
    p, status = place(state, "slice", share(100, 1000))
    assert p is None and "no GPU with 10% of a card" in status.message
    p, _ = place(state, "card", whole(1))
    assert p is not None and p.shares[0].gpu_milli == 1000


def test_template_cards_hold_templates_until_their_compute_is_used() -> None:
    state = ClusterState([node("npu", cards=cards(ASCEND, count=1))])
    placed = []
    for i in range(5):
        p, _ = place(state, f"j{i}", share(100, 1000))
        if p is None:
            break
        placed.append(p)
        assert (p.shares[0].gpu_milli, p.shares[0].memory_mib) == (250, 16384)
    assert len(placed) == 4  # 4 x vir05_1c_16g fill the 64 GiB, 20-core card
    i = state.table.row(NodeName("npu"))
    assert state.table.used_milli[i, 0] == 1000 and state.table.used_mib[i, 0] == 65536


def test_the_table_refuses_a_free_slice_on_a_template_card() -> None:
    state = ClusterState([node("npu", cards=cards(ASCEND, count=1))])
    bad = Placement(TaskId("t"), job("t").id, NodeName("npu"), 0, 0, (GpuShare(0, 100, 1000),))
    with pytest.raises(ConflictError, match=r"division templates\) cannot give a share of 100"):
        state.assume(bad)


def test_a_slice_without_models_lands_only_where_its_shape_fits() -> None:
    # 600 milli fits no Ascend template: only the NVIDIA node can take it.
    state = ClusterState([node("npu", cards=cards(ASCEND, count=8)), node("gpu", gpu=1)])
    p, _ = place(state, "big", share(600, 1000))
    assert p is not None and p.node == "gpu"


def test_granularity_rounds_up_and_keeps_the_card_from_overcommit() -> None:
    cam = VENDOR_CLASSES["cambricon"]
    state = ClusterState([node("mlu", cards=cards(cam, count=1, mib=1024))])
    assert place(state, "a", share(10, 300))[0] is not None  # takes 512 MiB
    assert place(state, "b", share(10, 300))[0] is not None  # the other 512 MiB
    assert place(state, "c", share(10, 1))[0] is None


def test_cluster_file_names_a_vendor_and_overrides_its_rule() -> None:
    nodes = load_cluster(
        [
            {
                "nodePools": [
                    {
                        "name": "npu",
                        "cpu": 64,
                        "memory": "256Gi",
                        "gpus": {
                            "model": "Ascend910B3",
                            "vendor": "ascend",
                            "count": 8,
                            "memory": "64Gi",
                            "relativeCapacity": 0.5,
                        },
                    },
                    {
                        "name": "dcu",
                        "cpu": 64,
                        "memory": "256Gi",
                        "gpus": {
                            "model": "K100",
                            "vendor": "hygon",
                            "count": 8,
                            "memory": "64Gi",
                            "memoryStep": 256,
                            "relativeCapacity": 0.5,
                        },
                    },
                    {
                        "name": "h100",
                        "cpu": 64,
                        "memory": "256Gi",
                        "gpus": {"model": "H100", "count": 8, "memory": "80Gi"},
                    },
                ]
            }
        ]
    )
    npu, dcu, h100 = nodes[0], nodes[1], nodes[2]
    assert npu.gpus[0].device.division is Division.TEMPLATES
    assert npu.gpus[0].device.relative_capacity == 0.5
    assert npu.labels["gpupool.io/accelerator.vendor"] == "ascend"
    assert "nvidia.com/gpu.product" not in npu.labels
    assert dcu.gpus[0].device.memory_step_mib == 256 and dcu.gpus[0].vendor == "hygon"
    assert h100.gpus[0].device == NVIDIA and h100.labels["nvidia.com/gpu.product"] == "H100"


@pytest.mark.parametrize(
    ("gpus_spec", "field", "words"),
    [
        ({"vendor": "acme"}, "nodePools[0].gpus.vendor", "is not a known vendor"),
        (
            {"vendor": "ascend", "templates": []},
            "nodePools[0].gpus.templates",
            "must list at least one template",
        ),
        ({"division": "fractions"}, "nodePools[0].gpus.fractions", "must list at least one"),
        ({"vendor": "kunlunxin", "fractions": [1200]}, "nodePools[0].gpus.fractions", "1200"),
    ],
)
def test_bad_device_fields_name_the_field_value_and_rule(gpus_spec, field, words) -> None:  # type: ignore[no-untyped-def]
    spec = {"model": "M", "count": 1, "memory": "16Gi", **gpus_spec}
    with pytest.raises(ConfigError) as err:
        load_cluster([{"nodePools": [{"name": "p", "cpu": 8, "memory": "64Gi", "gpus": spec}]}])
    assert field in str(err.value) and words in str(err.value)


def test_template_rule_from_a_cluster_file() -> None:
    nodes = load_cluster(
        [
            {
                "nodePools": [
                    {
                        "name": "gcu",
                        "cpu": 8,
                        "memory": "64Gi",
                        "gpus": {
                            "model": "S60",
                            "vendor": "enflame",
                            "count": 1,
                            "memory": "48Gi",
                            "templates": [{"name": "1q", "compute": 250, "memory": "12Gi"}],
                        },
                    }
                ]
            }
        ]
    )
    assert nodes[0].gpus[0].device.templates == (Template("1q", 250, 12288),)


@pytest.mark.parametrize(
    "policy",
    [
        "bestfit",
        "binpack",
        "dotprod",
        "fgd",
        "gpuclustering",
        "gpupacking",
        "gpupool",
        "random",
        "spread",
    ],
)
def test_every_policy_places_slices_by_the_division_rule(policy: str) -> None:
    from gpupool.core.placement.plugins.frag import PodShape, TypicalPods
    from gpupool.core.placement.registry import openb_profile

    typical = TypicalPods((PodShape(1000, 100, 1), PodShape(4000, 1000, 1)), (3, 1), 4)
    prof = (
        openb_profile(policy, typical_pods=typical)
        if policy != "spread"
        else default_profile(scores={"spread": 1.0})
    )
    state = ClusterState(
        [
            node("npu", cards=cards(ASCEND, count=2)),
            node("mlu", cards=cards(VENDOR_CLASSES["cambricon"], count=2, mib=16384)),
        ]
    )
    placed = 0
    for i in range(12):
        p, _ = place_task(next(job(f"s{i}", gpu=share(100, 1000)).tasks()), state.snapshot(), prof)
        if p is None:
            break
        state.assume(p)
        placed += 1
        (s,) = p.shares
        card = state.node(p.node).gpus[s.index]
        assert card.device.allows(s.gpu_milli, s.memory_mib, card.memory_mib)
    # 4 templates on each Ascend card, 10 slices of 100 milli on each MLU card: 12 fit
    assert placed == 12


def test_fragmentation_scores_see_the_shaped_slice() -> None:
    import numpy as np

    from gpupool.core.placement.plugins.frag import slice_milli

    state = ClusterState([node("npu", cards=cards(ASCEND, count=2)), node("gpu", gpu=2)])
    t = state.table
    rows = t.live()
    milli = slice_milli(t, rows, share(100, 1000))
    assert isinstance(milli, np.ndarray)
    assert milli[t.row(NodeName("npu")), :2].tolist() == [250, 250]  # vir05_1c_16g
    assert milli[t.row(NodeName("gpu")), :2].tolist() == [100, 100]  # as asked
    plain = ClusterState([node("gpu", gpu=2)]).table
    assert slice_milli(plain, plain.live(), share(100, 1000)) == 100
