"""HAMi's node and pod protocol on recorded objects, through the core's placement.

The register annotations are as HAMi v2.10's device plugin writes them (``MarshalNodeDevices``:
``omitempty`` JSON, index 0 and false health left out; the older colon form with 9 fields);
the pods are those a tenant writes, in every request shape HAMi reads.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from gpupool.core import ClusterState, Job, JobId, PodSet, default_profile, place_task
from gpupool.core.errors import ConflictError, InvalidJobError
from gpupool.core.model import GpuRequest, GpuShare, Node, NodeName, Placement, TaskId
from gpupool.k8s.hami.mig import (
    MigAllocation,
    MigCard,
    choose_placement,
    decode_mig_allocations,
    instances,
    mig_request,
)
from gpupool.k8s.translate import (
    DEVICES_TO_ALLOCATE,
    VGPU_NODE,
    PodRequest,
    TranslateError,
    gpu_refusals,
    hami_annotations,
    hami_labels,
    node_from_k8s,
    parse_hami_register,
    placement_from_hami,
    pod_request,
)

H100 = "NVIDIA H100 80GB HBM3"
A10 = "NVIDIA A10"

# HAMi v2.10, deviceSplitCount 10 on two H100s, one A10 cordoned-able.
REGISTER_V210 = json.dumps(
    [
        {
            "id": "GPU-h100-0",
            "count": 10,
            "devmem": 81559,
            "devcore": 100,
            "type": H100,
            "mode": "hami-core",
            "health": True,
        },
        {
            "id": "GPU-h100-1",
            "index": 1,
            "count": 10,
            "devmem": 81559,
            "devcore": 100,
            "type": H100,
            "numa": 1,
            "mode": "hami-core",
            "health": True,
        },
    ],
    separators=(",", ":"),
)
REGISTER_COLON = (
    "GPU-a10-0,3,23028,100,NVIDIA A10,0,true,0,hami-core:"
    "GPU-a10-1,3,23028,100,NVIDIA A10,0,true,1,hami-core:"
)
# A MIG-mode A100 as 2.10 registers it: the count is the largest instance count, the
# placements of the profiles overlap (1g at 0..6, 2g at 0, 2, 4, 3g at 0 and 4).
REGISTER_MIG = json.dumps(
    [
        {
            "id": "GPU-mig-0",
            "count": 7,
            "devmem": 40960,
            "devcore": 100,
            "type": "NVIDIA A100-SXM4-40GB",
            "mode": "mig",
            "health": True,
            "migProfiles": [
                {
                    "name": "1g.5gb",
                    "memoryMB": 4864,
                    "core": 15,
                    "sliceCount": 1,
                    "placements": [{"start": i, "size": 1} for i in range(7)],
                },
                {
                    "name": "2g.10gb",
                    "memoryMB": 9856,
                    "core": 29,
                    "sliceCount": 2,
                    "placements": [
                        {"start": 0, "size": 2},
                        {"start": 2, "size": 2},
                        {"start": 4, "size": 2},
                    ],
                },
                {
                    "name": "3g.20gb",
                    "memoryMB": 19968,
                    "core": 43,
                    "sliceCount": 3,
                    "placements": [{"size": 4}, {"start": 4, "size": 4}],
                },
            ],
        },
        {
            "id": "GPU-core-1",
            "index": 1,
            "count": 10,
            "devmem": 40960,
            "devcore": 100,
            "type": "NVIDIA A100-SXM4-40GB",
            "mode": "hami-core",
            "health": True,
        },
    ]
)


def hami_node(
    name: str,
    register: str,
    *,
    advertised: int | None = 20,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    alloc = {"cpu": "64", "memory": "512Gi", "pods": "110"}
    if advertised is not None:
        alloc["nvidia.com/gpu"] = str(advertised)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {},
            "annotations": {"hami.io/node-nvidia-register": register, **(annotations or {})},
        },
        "spec": {},
        "status": {
            "allocatable": alloc,
            "capacity": alloc,
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def pod(
    *containers: dict[str, Any],
    init: list[dict[str, Any]] | None = None,
    annotations: dict[str, str] | None = None,
    name: str = "p",
) -> dict[str, Any]:
    def ctr(i: int, limits: dict[str, Any]) -> dict[str, Any]:
        return {
            "name": f"c{i}",
            "image": "x",
            "resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": limits},
        }

    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "t", "annotations": annotations or {}},
        "spec": {
            "schedulerName": "gpupool",
            "initContainers": [ctr(100 + i, c) for i, c in enumerate(init or [])],
            "containers": [ctr(i, c) for i, c in enumerate(containers)],
        },
    }


def mig_cards(node: Node, register: str = REGISTER_MIG) -> list[MigCard]:
    """The node's MIG-mode cards with the profiles ``register`` gives them, empty."""
    profiles = {d.id: d.mig_profiles for d in parse_hami_register(register)}
    return [MigCard(g, profiles[g.uuid]) for g in node.gpus if g.mig]


def place(state: ClusterState, req: PodRequest, name: str) -> Placement | None:
    job = Job(JobId(name), (PodSet("main", 1, req.cpu_milli, req.memory_mib, req.gpu),))
    p, _ = place_task(next(job.tasks()), state.snapshot(), default_profile())
    if p is not None:
        state.assume(p)
    return p


def devices(req: PodRequest, p: Placement, node: Node) -> list[list[tuple[str, int, int]]]:
    """The device annotation decoded: per slot, (uuid, usedmem, usedcores)."""
    text = hami_annotations(req, p, node, 0.0)[DEVICES_TO_ALLOCATE]
    assert text.endswith(";")
    return [
        [
            (e.split(",")[0], int(e.split(",")[2]), int(e.split(",")[3]))
            for e in slot.split(":")
            if e
        ]
        for slot in text.split(";")[:-1]
    ]


# -- the register annotation and node health --------------------------------------------------


def test_split_count_is_each_cards_holder_limit() -> None:
    node = node_from_k8s(hami_node("a10", REGISTER_COLON))
    assert [(g.uuid, g.max_holders, g.healthy) for g in node.gpus] == [
        ("GPU-a10-0", 3, True),
        ("GPU-a10-1", 3, True),
    ]
    state = ClusterState([node])
    req = pod_request(
        pod({"nvidia.com/gpu": 1, "nvidia.com/gpumem": 1000, "nvidia.com/gpucores": 5})
    )
    placed = [place(state, req, f"p{i}") for i in range(8)]
    assert sum(p is not None for p in placed) == 6  # 2 cards x count 3, memory to spare
    assert all(h <= 3 for h in state.table.holders[0, :2])


def test_absent_count_is_a_card_that_takes_nothing() -> None:
    register = json.dumps([{"id": "GPU-x", "devmem": 16384, "type": "T4", "health": True}])
    node = node_from_k8s(hami_node("n", register))
    assert not node.gpus[0].healthy
    assert "split count 0" in gpu_refusals(hami_node("n", register))["GPU-x"]


def test_mig_mode_cards_offer_what_fits_beside_the_instances_on_them() -> None:
    devs = parse_hami_register(REGISTER_MIG)
    assert [p.placements for p in devs[0].mig_profiles][2] == ((0, 4), (4, 4))
    node = node_from_k8s(hami_node("mig", REGISTER_MIG))
    mig, core = node.gpus
    assert mig.healthy and not core.mig
    assert [(m.profile, m.count, m.gpu_milli, m.memory_mib) for m in mig.mig] == [
        ("1g.5gb", 7, 150, 4864),
        ("2g.10gb", 3, 290, 9856),
        ("3g.20gb", 2, 430, 19968),
    ]
    profiles = devs[0].mig_profiles
    # a 3g at slices 4..7 leaves 1g at 0..3, 2g at 0 and 2, 3g at 0; the core's own
    # instances of a profile count on top of what is left
    left = instances(profiles, [(4, 4)], {"3g.20gb": 1})
    assert [(m.profile, m.count) for m in left] == [("1g.5gb", 4), ("2g.10gb", 2), ("3g.20gb", 2)]
    # HAMi's order: 1g and 3g from the highest free start, the others from the lowest
    assert choose_placement(profiles[0], [(4, 4)]) == (3, 1)
    assert choose_placement(profiles[1], [(0, 2)]) == (2, 2)
    assert choose_placement(profiles[2], [(3, 1)]) == (4, 4)
    assert choose_placement(profiles[2], [(3, 1), (5, 1)]) is None  # both 3g blocked
    bare = REGISTER_MIG.replace(
        '"mode": "mig", "health": true, "migProfiles"', '"mode": "mig", "health": true, "x"'
    )
    assert "no migProfiles" in gpu_refusals(hami_node("mig", bare))["GPU-mig-0"]
    # a pod that does not ask for MIG uses the hami-core card beside it, and only it
    state = ClusterState([node])
    req = pod_request(pod({"nvidia.com/gpu": 1, "nvidia.com/gpumem": 4000}))
    p = place(state, req, "x")
    assert p is not None and p.shares[0].index == 1


def test_a_mig_pod_gets_the_smallest_profile_and_hamis_annotations() -> None:
    node = node_from_k8s(hami_node("mig", REGISTER_MIG))
    mig_pod = pod(
        {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 8000},
        annotations={"nvidia.com/vgpu-mode": "mig"},
    )
    req = mig_request(pod_request(mig_pod), mig_pod["metadata"]["annotations"], mig_cards(node))
    assert req.gpu.mig_profile == "2g.10gb"
    placement = Placement(
        TaskId("t"), JobId("j"), NodeName("mig"), 1000, 1024, (GpuShare(0, 290, 9856, "2g.10gb"),)
    )
    chosen = [MigAllocation(0, 0, "GPU-mig-0", "2g.10gb", 2, 2)]
    ann = hami_annotations(req, placement, node, 0.0, chosen)
    assert ann["hami.io/vgpu-devices-to-allocate"] == "GPU-mig-0,NVIDIA,9856,29:;"
    assert json.loads(ann["hami.io/vgpu-mig-allocations"]) == [
        {
            "containerIndex": 0,
            "deviceIndex": 0,
            "gpuUUID": "GPU-mig-0",
            "profile": "2g.10gb",
            "placement": {"start": 2, "size": 2},
        }
    ]
    assert decode_mig_allocations(ann["hami.io/vgpu-mig-allocations"]) == chosen
    # no profile holds 30000 MiB; two devices are not given
    big = pod(
        {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 30000},
        annotations={"nvidia.com/vgpu-mode": "mig"},
    )
    with pytest.raises(InvalidJobError, match="largest holds 19968 MiB"):
        mig_request(pod_request(big), big["metadata"]["annotations"], mig_cards(node))


def test_a_mig_container_asking_two_gpus_gets_two_instances_in_hamis_format() -> None:
    """HAMi gives a container ``nvidia.com/gpu: 2`` two MIG devices, on one card while it
    has room: the core places two instances on the MIG-mode card, each at its own
    placement, written as two devices of the container."""
    node = node_from_k8s(hami_node("mig", REGISTER_MIG))
    state = ClusterState([node])
    two = pod(
        {"nvidia.com/gpu": 2, "nvidia.com/gpumem": 15000},
        annotations={"nvidia.com/vgpu-mode": "mig"},
    )
    req = mig_request(pod_request(two), two["metadata"]["annotations"], mig_cards(node))
    assert (req.gpu.mig_profile, req.gpu.mig_instances) == ("3g.20gb", 2)
    p = place(state, req, "a")
    assert p is not None and [(s.index, s.mig_profile) for s in p.shares] == [
        (0, "3g.20gb"),
        (0, "3g.20gb"),
    ]
    chosen = [
        MigAllocation(0, 0, "GPU-mig-0", "3g.20gb", 4, 4),
        MigAllocation(0, 1, "GPU-mig-0", "3g.20gb", 0, 4),
    ]
    ann = hami_annotations(req, p, node, 0.0, chosen)
    assert ann["hami.io/vgpu-devices-to-allocate"] == (
        "GPU-mig-0,NVIDIA,19968,43:GPU-mig-0,NVIDIA,19968,43:;"
    )
    assert place(state, req, "b") is None  # both 3g instances are held
    one = replace(req, gpu=replace(req.gpu, mig_instances=1))
    assert place(state, one, "c") is None
    three = replace(req, gpu=replace(req.gpu, mig_profile="1g.5gb", mig_instances=8))
    assert place(ClusterState([node]), three, "d") is None  # seven 1g on the card
    # the card's room is checked for each instance a placement puts on it
    over = replace(p, task=TaskId("e"), job=JobId("e"), shares=p.shares * 2)
    with pytest.raises(ConflictError, match=r"fewer than 4 free 3g\.20gb"):
        ClusterState([node]).assume(over)


def test_the_core_follows_a_mig_cards_counts_as_instances_land_on_it() -> None:
    """The controller gives the core new counts after each instance; the core keeps what
    it holds and frees the difference (a 3g taking slices 4..7 leaves one 3g, held or
    not)."""
    devs = parse_hami_register(REGISTER_MIG)
    node = node_from_k8s(hami_node("mig", REGISTER_MIG))
    state = ClusterState([node])
    mig_pod = pod(
        {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 15000},
        annotations={"nvidia.com/vgpu-mode": "mig"},
    )
    req = mig_request(pod_request(mig_pod), mig_pod["metadata"]["annotations"], mig_cards(node))
    first = place(state, req, "a")
    assert first is not None and first.shares[0].mig_profile == "3g.20gb"
    # the 3g went to slices 4..7, and a 1g another scheduler placed sits at slice 0
    counted = instances(devs[0].mig_profiles, [(4, 4), (0, 1)], {"3g.20gb": 1})
    state.update_node(replace(node, gpus=(replace(node.gpus[0], mig=counted), node.gpus[1])))
    assert place(state, req, "b") is None  # the 1g blocks the other 3g placement
    small = replace(req, gpu=replace(req.gpu, mig_profile="1g.5gb"))
    assert place(state, small, "c") is not None


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ('[{"gpuUUID": "G", "profile": "1g", "placement": {"start": 0, "size": 0}}]', "incomplete"),
        (
            '[{"gpuUUID": "G", "profile": "1g", "placement": {"size": 1}, "migUUID": "MIG-x"}]',
            "partial runtime identity",
        ),
        (
            '[{"gpuUUID": "G", "profile": "1g", "placement": {"size": 1}},'
            ' {"gpuUUID": "G", "profile": "1g", "placement": {"start": 1, "size": 1}}]',
            "a second allocation for container 0 device 0",
        ),
        ('{"gpuUUID": "G"}', "expected a JSON list"),
    ],
)
def test_bad_mig_allocations_are_named(text: str, error: str) -> None:
    with pytest.raises(TranslateError, match=error):
        decode_mig_allocations(text)


def test_device_cordon_and_health_keep_new_work_off_a_card() -> None:
    node = node_from_k8s(
        hami_node("n", REGISTER_V210, annotations={"hami.io/device-cordon": " GPU-h100-0 ,"})
    )
    assert [g.healthy for g in node.gpus] == [False, True]
    unhealthy = REGISTER_V210.replace(',"health":true}]', "}]")  # 2nd card: health omitted
    assert [g.healthy for g in node_from_k8s(hami_node("n", unhealthy)).gpus] == [True, False]


@pytest.mark.parametrize(
    ("advertised", "handshake", "now", "usable"),
    [
        (20, "Reported_2026-11-24 10:00:00", None, True),
        (20, "Requesting_2026-11-24 10:00:00", 1_800_000_000.0, True),  # plugin still advertises
        (0, "", None, False),  # the device plugin stopped advertising
        (0, "Requesting_2026-11-24 10:00:00", 1_795_000_000.0, False),  # asked, never answered
        (20, "Deleted_2026-11-24 10:00:00", None, False),  # HAMi < 2.5 removed the devices
        # counted under another resource name than gpupool's: not judged by allocatable
        (None, "", None, True),
    ],
)
def test_node_handshake_and_allocatable(
    advertised: int | None, handshake: str, now: float | None, usable: bool
) -> None:
    obj = hami_node(
        "n",
        REGISTER_V210,
        advertised=advertised,
        annotations={"hami.io/node-handshake": handshake} if handshake else None,
    )
    node = node_from_k8s(obj, now_s=now)
    assert all(g.healthy == usable for g in node.gpus)
    assert bool(gpu_refusals(obj, now_s=now)) != usable


# -- pods, placed and annotated ---------------------------------------------------------------


def two_node_cluster() -> tuple[ClusterState, dict[str, Node]]:
    nodes = {
        "h100": node_from_k8s(hami_node("h100", REGISTER_V210)),
        "a10": node_from_k8s(hami_node("a10", REGISTER_COLON)),
    }
    return ClusterState(list(nodes.values())), nodes


def test_memory_percentage_is_of_the_card_chosen() -> None:
    state, nodes = two_node_cluster()
    req = pod_request(
        pod(
            {"nvidia.com/gpu": 1, "nvidia.com/gpumem-percentage": 50, "nvidia.com/gpucores": 30},
        ),
        models=[H100, A10],
    )
    shares_by_node = {}
    for model in ("H100", "A10"):
        narrowed = pod_request(
            pod(
                {
                    "nvidia.com/gpu": 1,
                    "nvidia.com/gpumem-percentage": 50,
                    "nvidia.com/gpucores": 30,
                },
                annotations={"nvidia.com/use-gputype": model},
            ),
            models=[H100, A10],
        )
        p = place(state, narrowed, model)
        assert p is not None
        shares_by_node[p.node] = (p, narrowed)
    h_p, h_req = shares_by_node["h100"]
    a_p, a_req = shares_by_node["a10"]
    assert h_p.shares[0].memory_mib == 81559 // 2 and a_p.shares[0].memory_mib == 23028 // 2
    assert devices(h_req, h_p, nodes["h100"])[0][0][1:] == (81559 // 2, 30)
    assert devices(a_req, a_p, nodes["a10"])[0][0][1:] == (23028 // 2, 30)
    assert req.gpu.memory_percent == 50


def test_n_cards_with_memory_are_n_slices_on_distinct_cards() -> None:
    state, nodes = two_node_cluster()
    req = pod_request(
        pod({"nvidia.com/gpu": 2, "nvidia.com/gpumem": 8000, "nvidia.com/gpucores": 25})
    )
    p = place(state, req, "x")
    assert p is not None and len({s.index for s in p.shares}) == 2
    assert all(s.gpu_milli == 250 and s.memory_mib == 8000 for s in p.shares)
    slots = devices(req, p, nodes[p.node])
    assert len(slots) == 1 and [(m, c) for _, m, c in slots[0]] == [(8000, 25), (8000, 25)]
    # the cards stay shared: a second such pod lands beside the first
    q = place(state, req, "y")
    assert q is not None and q.node == p.node


def test_every_container_gets_its_own_cards() -> None:
    state, nodes = two_node_cluster()
    req = pod_request(
        pod(
            {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 3000},
            {},
            {"nvidia.com/gpu": 2, "nvidia.com/gpumem-percentage": 10, "nvidia.com/gpucores": 10},
            annotations={"nvidia.com/use-gputype": "A10"},
        ),
        models=[H100, A10],
    )
    assert req.gpu.cards == 3
    # the A10 node has two cards: three containers' cards cannot fit there
    assert place(state, req, "x") is None
    req = pod_request(
        pod({"nvidia.com/gpu": 1, "nvidia.com/gpumem": 3000}, {}, {"nvidia.com/gpucores": 10})
    )
    p = place(state, req, "y")
    assert p is not None
    slots = devices(req, p, nodes[p.node])
    card = nodes[p.node].gpus[0].memory_mib
    assert [len(s) for s in slots] == [1, 0, 1]
    assert slots[0][0][0] != slots[2][0][0]
    assert slots[0][0][1:] == (3000, 0) and slots[2][0][1:] == (card, 10)


def test_init_container_cards_are_reused_and_counted_once() -> None:
    state, nodes = two_node_cluster()
    req = pod_request(
        pod(
            {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 2000, "nvidia.com/gpucores": 20},
            init=[{"nvidia.com/gpu": 1, "nvidia.com/gpumem": 6000, "nvidia.com/gpucores": 50}],
        )
    )
    assert req.gpu == GpuRequest(gpu_milli=500, memory_mib=6000)
    p = place(state, req, "x")
    assert p is not None
    init_slot, app_slot = devices(req, p, nodes[p.node])
    assert init_slot[0][0] == app_slot[0][0]
    assert init_slot[0][1:] == (6000, 50) and app_slot[0][1:] == (2000, 20)


def test_gpu_uuid_annotations_choose_and_exclude_cards() -> None:
    state, nodes = two_node_cluster()
    req = pod_request(
        pod(
            {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 1000},
            annotations={"nvidia.com/use-gpuuuid": "GPU-h100-1, GPU-nowhere"},
        )
    )
    p = place(state, req, "x")
    assert p is not None and devices(req, p, nodes["h100"])[0][0][0] == "GPU-h100-1"
    state, nodes = two_node_cluster()
    req = pod_request(
        pod({"nvidia.com/gpu": 2}, annotations={"nvidia.com/nouse-gpuuuid": "GPU-h100-0"})
    )
    p = place(state, req, "y")
    assert p is not None and p.node == "a10"  # the H100 node has one card left to it
    assert place(state, req, "z") is None
    with pytest.raises(InvalidJobError, match="nouse-gpuuuid"):
        pod_request(
            pod(
                {"nvidia.com/gpu": 1},
                annotations={
                    "nvidia.com/use-gpuuuid": "GPU-a",
                    "nvidia.com/nouse-gpuuuid": "GPU-a",
                },
            )
        )


def test_a_whole_card_carries_gpucores_100_and_its_memory() -> None:
    state, nodes = two_node_cluster()
    req = pod_request(
        pod({"nvidia.com/gpu": 1}, annotations={"nvidia.com/use-gputype": "H100"}),
        models=[H100, A10],
    )
    p = place(state, req, "x")
    assert p is not None
    assert devices(req, p, nodes["h100"]) == [[("GPU-h100-0", 81559, 100)]]


def test_the_vgpu_node_label_goes_with_the_annotations() -> None:
    state, nodes = two_node_cluster()
    req = pod_request(pod({"nvidia.com/gpu": 1, "nvidia.com/gpumem": 1000}))
    p = place(state, req, "x")
    assert p is not None
    ann = hami_annotations(req, p, nodes[p.node], 0.0)
    assert hami_labels(ann) == {VGPU_NODE: p.node}
    assert hami_labels({}) == {}


@pytest.mark.parametrize(
    ("register", "message"),
    [
        ('[{"id": "GPU-x", "count": -1}]', r"count=-1 must be 0 or more"),
        ('[{"id": "GPU-x", "migProfiles": {"name": "1g"}}]', r"migProfiles=.*expected a list"),
        ('[{"id": "GPU-x", "migProfiles": [{"placements": [3]}]}]', r"placements\[0\]=3"),
        ('[{"id": "GPU-x", "health": "maybe"}]', r"health='maybe' is not a boolean"),
        ("GPU-x,ten,16384,100,T4,0,true:", r"count='ten' is not an integer"),
    ],
)
def test_bad_register_names_the_field(register: str, message: str) -> None:
    with pytest.raises(TranslateError, match=message) as info:
        node_from_k8s(hami_node("bad", register))
    assert "node bad" in str(info.value)


def test_a_hami_bound_pod_is_read_back_as_hami_counts_it() -> None:
    node = node_from_k8s(hami_node("h100", REGISTER_V210))
    bound = pod({}, {}, init=[{}])
    bound["metadata"]["annotations"] = {
        "hami.io/vgpu-devices-allocated": (
            "GPU-h100-0,NVIDIA,30000,60:;"  # init container: its peak
            "GPU-h100-0,NVIDIA,10000,20:GPU-h100-1,NVIDIA,4000,100:;"  # app: whole h100-1
            "GPU-h100-0,NVIDIA,10000,20:;"
        )
    }  # a second app container on h100-0: summed
    rec = placement_from_hami(bound, node, "default", 0, 0)
    assert rec is not None
    assert [(s.index, s.gpu_milli, s.memory_mib) for s in rec.shares] == [
        (0, 600, 30000),
        (1, 1000, 81559),
    ]
