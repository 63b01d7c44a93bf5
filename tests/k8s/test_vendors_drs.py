"""Enflame's DRS partitions as HAMi's ``pkg/device/enflame`` has them: the node's
``enflame.com/gcu-drs-capacity``, a pod's ``drs-gcu`` slices or ``gcu-memory``/``gcu-core``,
the profile chosen, and the annotations written (``k8s/vendors/drs.py``)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gpupool.core import ClusterState, default_profile, place_task
from gpupool.core.devices import Division
from gpupool.core.errors import InvalidJobError
from gpupool.core.model import Job, JobId, Node, PodSet
from gpupool.k8s.hami.errors import TranslateError
from gpupool.k8s.hami.requests import PodRequest, pod_request
from gpupool.k8s.translate import node_from_k8s
from gpupool.k8s.vendors import card_memory, vendor_annotations, vendor_gpus, vendor_pod_request
from tests.k8s.test_vendors import node_obj, pod_obj

# HAMi's DRS card: 6 slices, three profiles (its drsCard of drs_reconstruction_test.go)
DRS = json.dumps(
    {
        "devices": [
            {"index": "0", "minor": "0", "capacity": 6},
            {"index": "1", "minor": "1", "capacity": 6},
        ],
        "profiles": {"1g.6gb": "0", "3g.20gb": "1", "6g.40gb": "2"},
    }
)


def drs_node(name: str = "drs-0", text: str = DRS) -> dict[str, Any]:
    return node_obj(name, {"enflame.com/gcu-drs-capacity": text}, {"enflame.com/drs-gcu": "12"})


def models(*nodes: Node) -> dict[str, frozenset[str]]:
    out: dict[str, set[str]] = {}
    for n in nodes:
        for g in n.gpus:
            out.setdefault(g.vendor, set()).add(g.model)
    return {v: frozenset(m) for v, m in out.items()}


def request(limits: dict[str, str], *nodes: Node) -> PodRequest:
    pod = pod_obj(limits)
    req = vendor_pod_request(pod, pod_request(pod), models(*nodes), card_memory(nodes))
    assert req is not None
    return req


def test_the_cards_and_profiles_of_the_capacity_annotation() -> None:
    cards = vendor_gpus(drs_node())
    assert [(g.uuid, g.index, g.model, g.memory_mib, g.max_holders) for g in cards] == [
        ("drs-0-enflame-drs-0", 0, "Enflame-DRS-6", 40960, 6),
        ("drs-0-enflame-drs-1", 1, "Enflame-DRS-6", 40960, 6),
    ]
    device = cards[0].device
    assert device.vendor == "enflame" and device.division is Division.TEMPLATES
    # compute: HAMi's core percent of a profile, ceil(slices * 100 / 6)
    assert [(t.name, t.gpu_milli, t.memory_mib, t.ref) for t in device.templates] == [
        ("1g.6gb", 170, 6144, "0"),
        ("3g.20gb", 500, 20480, "1"),
    ]


@pytest.mark.parametrize(
    ("limits", "shape"),
    [
        ({"enflame.com/drs-gcu": "1"}, (170, 6144)),
        ({"enflame.com/drs-gcu": "3"}, (500, 20480)),
        ({"enflame.com/gcu-memory": "10"}, (500, 20480)),  # GB: the smallest holding 10
        ({"enflame.com/gcu-memory": "6"}, (170, 6144)),
        ({"enflame.com/gcu-core": "20"}, (500, 20480)),  # 1g.6gb is 17 %
        ({"enflame.com/gcu-memory": "4", "enflame.com/gcu-core": "10"}, (170, 6144)),
        # over twice the largest profile's 40 GB: MiB, rounded up to GB (normalizeMemoryRequestToGB)
        ({"enflame.com/gcu-memory": "81"}, (170, 6144)),  # 81 MiB: 1 GB
        # HAMi's own example (examples/enflame/vgcu_use.yaml, "drs-pod-by-spec"): 20480 MiB, 40 %
        ({"enflame.com/gcu-memory": "20480", "enflame.com/gcu-core": "40"}, (500, 20480)),
        ({"enflame.com/gcu-memory": "6145"}, (500, 20480)),  # 7 GB: past 1g.6gb
        ({"enflame.com/gcu-memory": "80"}, None),  # twice 40 exactly: still GB, over any profile
    ],
)
def test_a_request_takes_the_profile_hami_selects(
    limits: dict[str, str], shape: tuple[int, int] | None
) -> None:
    node = node_from_k8s(drs_node())
    req = request(limits, node)
    state = ClusterState([node])
    job = Job(JobId("team/p"), (PodSet("p", cpu_milli=0, memory_mib=0, gpu=req.gpu),))
    p, status = place_task(next(job.tasks()), state.snapshot(), default_profile())
    if shape is None:
        assert p is None
        return
    assert p is not None, status.message
    ((share),) = p.shares
    assert (share.gpu_milli, share.memory_mib) == shape


def place(node: Node, limits: dict[str, str], n: int) -> list[Any]:
    state = ClusterState([node])
    req = request(limits, node)
    out = []
    for i in range(n):
        job = Job(JobId(f"team/p{i}"), (PodSet("p", cpu_milli=0, memory_mib=0, gpu=req.gpu),))
        snap = state.snapshot()
        p, _ = place_task(next(job.tasks()), snap, default_profile())
        if p is None:
            break
        state.assume(p)
        out.append(p)
    return out


def test_a_card_holds_what_hamis_core_check_lets_it() -> None:
    one = node_obj(
        "one",
        {
            "enflame.com/gcu-drs-capacity": json.dumps(
                {
                    "devices": [{"index": "0", "capacity": 6}],
                    "profiles": json.loads(DRS)["profiles"],
                }
            )
        },
    )
    node = node_from_k8s(one)
    assert len(place(node, {"enflame.com/drs-gcu": "1"}, 10)) == 5  # 6 x 17 % > 100 %
    assert len(place(node, {"enflame.com/drs-gcu": "3"}, 10)) == 2
    assert len(place(node, {"enflame.com/drs-gcu": "6"}, 10)) == 1  # the whole card


def test_the_annotations_hami_writes_for_a_drs_profile() -> None:
    node = node_from_k8s(drs_node())
    pod = pod_obj({"enflame.com/drs-gcu": "3"})
    req = request({"enflame.com/drs-gcu": "3"}, node)
    state = ClusterState([node])
    job = Job(JobId("team/p"), (PodSet("p", cpu_milli=0, memory_mib=0, gpu=req.gpu),))
    p, _ = place_task(next(job.tasks()), state.snapshot(), default_profile())
    assert p is not None
    out = vendor_annotations(req, p, node, now_s=1_700_000_000, pod=pod)
    card = node.gpus[p.shares[0].index]
    assert out["hami.io/enflame-vgpu-devices-allocated"] == f";{card.uuid},Enflame,20480,50:;"
    assert not [k for k in out if k.endswith("-devices-to-allocate")]  # HAMi writes none
    assert out["enflame.com/gcu-assigned"] == "false"
    assert out["enflame.com/gcu-assigned-time"] == "1700000000000000000"
    assert out["enflame.com/gcu-request-size"] == "3"
    assert (
        out["enflame.com/gcu-assigned-index"]
        == out["enflame.com/gcu-assigned-id"]
        == str(card.index)
    )
    assert json.loads(out["assigned-containers"]) == {
        "main": {"allocated": False, "request": 3, "profileID": "1", "profileName": "3g.20gb"}
    }
    assert out["hami.io/vgpu-node"] == "drs-0" and out["hami.io/bind-phase"] == "allocating"


def test_a_whole_card_is_its_largest_profile() -> None:
    node = node_from_k8s(drs_node())
    pod = pod_obj({"enflame.com/drs-gcu": "6"})
    req = request({"enflame.com/drs-gcu": "6"}, node)
    state = ClusterState([node])
    job = Job(JobId("team/p"), (PodSet("p", cpu_milli=0, memory_mib=0, gpu=req.gpu),))
    p, _ = place_task(next(job.tasks()), state.snapshot(), default_profile())
    assert p is not None and p.shares[0].gpu_milli == 1000
    out = vendor_annotations(req, p, node, now_s=1.0, pod=pod)
    card = node.gpus[p.shares[0].index]
    assert out["hami.io/enflame-vgpu-devices-allocated"] == f";{card.uuid},Enflame,40960,100:;"
    assert json.loads(out["assigned-containers"])["main"] == {
        "allocated": False,
        "request": 6,
        "profileID": "2",
        "profileName": "6g.40gb",
    }


def test_drs_pods_and_whole_gcu_pods_keep_to_their_own_cards() -> None:
    drs, gcu = (
        node_from_k8s(drs_node()),
        node_from_k8s(node_obj("gcu-0", capacity={"enflame.com/gcu": "2"})),
    )
    assert request({"enflame.com/drs-gcu": "1"}, drs, gcu).gpu.models == {"Enflame-DRS-6"}
    assert request({"enflame.com/gcu": "1"}, drs, gcu).gpu.models == {"GCU"}


@pytest.mark.parametrize(
    ("limits", "nodes", "field", "words"),
    [
        ({"enflame.com/drs-gcu": "7"}, True, "limits[enflame.com/drs-gcu]", "must be 1..6"),
        (
            {"enflame.com/drs-gcu": "1"},
            False,
            "limits[enflame.com/drs-gcu]",
            "no node registers enflame.com/gcu-drs-capacity",
        ),
    ],
)
def test_a_bad_drs_request_names_the_field(
    limits: dict[str, str], nodes: bool, field: str, words: str
) -> None:
    with pytest.raises(InvalidJobError, match=words) as err:
        request(limits, *([node_from_k8s(drs_node())] if nodes else []))
    assert err.value.field.endswith(field)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("nope", "not JSON"),
        (
            json.dumps({"devices": [{"index": "0", "capacity": 6}], "profiles": {"big": "0"}}),
            "no profile named <slices>g.<GB>gb",
        ),
        (
            json.dumps({"devices": [{"index": "0", "capacity": 0}], "profiles": {"1g.6gb": "0"}}),
            "devices[0].capacity=0",
        ),
    ],
)
def test_a_capacity_annotation_that_cannot_be_read_names_node_and_key(
    text: str, words: str
) -> None:
    with pytest.raises(TranslateError) as e:
        vendor_gpus(drs_node(text=text))
    assert "node drs-0: enflame.com/gcu-drs-capacity" in str(e.value) and words in str(e.value)


def test_the_minor_written_is_the_cards_own_from_the_capacity_annotation() -> None:
    """HAMi's ``GetNodeDevices`` keeps each device's ``minor`` (its index when empty) and
    ``PatchAnnotations`` writes it as ``enflame.com/gcu-assigned-minor``."""
    text = json.dumps(
        {
            "devices": [
                {"index": "0", "minor": "4", "capacity": 6},
                {"index": "1", "minor": "", "capacity": 6},
            ],
            "profiles": json.loads(DRS)["profiles"],
        }
    )
    node = node_from_k8s(drs_node(text=text))
    assert [g.device.card_ref for g in node.gpus] == ["4", "1"]
    pod = pod_obj({"enflame.com/drs-gcu": "3"})
    req = request({"enflame.com/drs-gcu": "3"}, node)
    state = ClusterState([node])
    minors = {}
    for i in range(4):  # two 3-slice profiles per card: both cards used
        job = Job(JobId(f"team/p{i}"), (PodSet("p", cpu_milli=0, memory_mib=0, gpu=req.gpu),))
        p, _ = place_task(next(job.tasks()), state.snapshot(), default_profile())
        assert p is not None
        state.assume(p)
        out = vendor_annotations(req, p, node, now_s=1.0, pod=pod)
        minors[out["enflame.com/gcu-assigned-index"]] = out["enflame.com/gcu-assigned-minor"]
    assert minors == {"0": "4", "1": "1"}


def test_drs_binds_on_a_node_are_made_in_order_each_stamped_at_its_own_bind() -> None:
    """Enflame's plugin serves the oldest ``enflame.com/gcu-assigned-time`` first, so on one
    node the Bindings must be made in the order of those times: one after another, each
    stamped when it is made (a slow first Binding must not let the second overtake it)."""
    import asyncio

    from gpupool.k8s.binding import BindItem, PodBinder
    from gpupool.k8s.vendors import BIND_ORDER_STAMP
    from tests.k8s.kit import RecordingHost

    class SlowFirstKube:
        def __init__(self) -> None:
            self.bound: list[tuple[str, str]] = []  # (pod, stamp) in the order made

        async def request(
            self, method: str, path: str, body: Any = None, **_: Any
        ) -> dict[str, Any]:
            if path.endswith("/binding"):
                name = body["metadata"]["name"]
                await asyncio.sleep(0.05 if name == "p0" else 0)
                self.bound.append((name, body["metadata"]["annotations"][BIND_ORDER_STAMP]))
            return {}

    async def body() -> None:
        kube = SlowFirstKube()
        binder = PodBinder(kube, None, RecordingHost())  # type: ignore[arg-type]
        for i in range(3):
            binder.submit(
                BindItem(
                    f"team/p{i}",
                    f"u{i}",
                    "drs-0",
                    {BIND_ORDER_STAMP: "1"},
                    lock=False,
                    ordered=True,
                    stamp=BIND_ORDER_STAMP,
                )
            )
        for _ in range(50):
            await asyncio.sleep(0.01)
            if len(kube.bound) == 3:
                break
        await binder.close()
        assert [n for n, _ in kube.bound] == ["p0", "p1", "p2"]
        stamps = [int(s) for _, s in kube.bound]
        assert stamps == sorted(stamps) and len(set(stamps)) == 3 and stamps[0] > 1

    asyncio.run(body())
