"""Kubernetes objects -> core objects and back to HAMi's annotations, on recorded objects."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gpupool.core.errors import InvalidJobError
from gpupool.core.model import GpuRequest, GpuShare, JobId, NodeName, Placement, TaskId
from gpupool.k8s.translate import (
    DEVICES_ALLOCATED,
    DEVICES_TO_ALLOCATE,
    PLACEMENT_ANNOTATION,
    ResourceNames,
    TranslateError,
    hami_annotations,
    node_from_k8s,
    parse_hami_register,
    placement_annotation,
    placement_from_hami,
    pod_gang,
    pod_queue,
    pod_request,
    read_placement,
)

# As HAMi >= 2.8's device plugin registers two A100s (index 0 omitted: omitempty).
REGISTER_JSON = json.dumps(
    [
        {
            "id": "GPU-aaaa",
            "count": 10,
            "devmem": 40960,
            "devcore": 100,
            "type": "NVIDIA-A100-SXM4-40GB",
            "mode": "hami-core",
            "health": True,
        },
        {
            "id": "GPU-bbbb",
            "index": 1,
            "count": 10,
            "devmem": 40960,
            "devcore": 100,
            "type": "NVIDIA-A100-SXM4-40GB",
            "numa": 1,
            "mode": "hami-core",
        },
    ]
)
# The older colon-separated form: 7 fields, and 9 (index and mode) since 2.4.
REGISTER_COLON_7 = (
    "GPU-1111,10,16384,100,NVIDIA-Tesla T4,0,true:GPU-2222,10,16384,100,NVIDIA-Tesla T4,0,false:"
)
REGISTER_COLON_9 = (
    "GPU-9,10,81920,100,NVIDIA-H100,1,true,1,hami-core:"
    "GPU-8,10,81920,100,NVIDIA-H100,0,true,0,hami-core:"
)


def k8s_node(
    name: str = "n1",
    *,
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    gpus: int = 0,
    ready: bool = True,
    unschedulable: bool = False,
    taints: list[dict[str, str]] | None = None,
) -> dict[str, Any]:
    alloc: dict[str, str] = {"cpu": "64", "memory": "512Gi", "pods": "110"}
    if not gpus and "hami.io/node-nvidia-register" in (annotations or {}):
        gpus = 20  # HAMi's device plugin advertises count x cards
    if gpus:
        alloc["nvidia.com/gpu"] = str(gpus)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels or {}, "annotations": annotations or {}},
        "spec": {"unschedulable": unschedulable, "taints": taints or []},
        "status": {
            "allocatable": alloc,
            "capacity": alloc,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def k8s_pod(
    limits: dict[str, Any] | None = None,
    *,
    init: list[dict[str, Any]] | None = None,
    extra: list[dict[str, Any]] | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    cpu: str = "1",
    memory: str = "1Gi",
) -> dict[str, Any]:
    main = {
        "name": "main",
        "image": "x",
        "resources": {"requests": {"cpu": cpu, "memory": memory}, "limits": limits or {}},
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "p",
            "namespace": "team-a",
            "labels": labels or {},
            "annotations": annotations or {},
        },
        "spec": {
            "schedulerName": "gpupool",
            "initContainers": init or [],
            "containers": [main, *(extra or [])],
        },
    }


# -- nodes ------------------------------------------------------------------------------------


def test_register_json_reads_absent_fields_as_zero_and_false() -> None:
    devs = parse_hami_register(REGISTER_JSON)
    assert [(d.id, d.index, d.devmem, d.numa, d.health) for d in devs] == [
        ("GPU-aaaa", 0, 40960, 0, True),
        ("GPU-bbbb", 1, 40960, 1, False),
    ]


@pytest.mark.parametrize(
    ("text", "ids", "healthy"),
    [
        (REGISTER_COLON_7, ["GPU-1111", "GPU-2222"], [True, False]),
        (REGISTER_COLON_9, ["GPU-8", "GPU-9"], [True, True]),  # ordered by HAMi's index
    ],
)
def test_register_colon_form(text: str, ids: list[str], healthy: list[bool]) -> None:
    node = node_from_k8s(k8s_node(annotations={"hami.io/node-nvidia-register": text}))
    assert [g.uuid for g in node.gpus] == ids
    assert [g.index for g in node.gpus] == [0, 1]
    assert [g.healthy for g in node.gpus] == healthy


def test_node_from_hami_register() -> None:
    node = node_from_k8s(
        k8s_node(annotations={"hami.io/node-nvidia-register": REGISTER_JSON}, gpus=20)
    )
    assert node.name == "n1" and node.cpu_milli == 64_000 and node.memory_mib == 512 * 1024
    assert [(g.index, g.model, g.memory_mib) for g in node.gpus] == [
        (0, "NVIDIA-A100-SXM4-40GB", 40960),
        (1, "NVIDIA-A100-SXM4-40GB", 40960),
    ]
    assert node.schedulable


def test_node_from_feature_discovery_labels() -> None:
    node = node_from_k8s(
        k8s_node(
            gpus=8,
            labels={"nvidia.com/gpu.product": "NVIDIA-H100", "nvidia.com/gpu.memory": "81559"},
        )
    )
    assert len(node.gpus) == 8
    assert {(g.model, g.memory_mib, g.uuid) for g in node.gpus} == {("NVIDIA-H100", 81559, "")}


def test_node_not_ready_or_cordoned_is_unschedulable() -> None:
    assert not node_from_k8s(k8s_node(ready=False)).schedulable
    assert not node_from_k8s(k8s_node(unschedulable=True)).schedulable
    tainted = node_from_k8s(k8s_node(taints=[{"key": "gpu", "value": "x", "effect": "NoSchedule"}]))
    assert tainted.taints[0].key == "gpu"


@pytest.mark.parametrize("bad", ["garbage", '[{"id": 1, "devmem": "lots"}]', "GPU-1,10,16384:"])
def test_bad_register_is_an_error_naming_the_node(bad: str) -> None:
    with pytest.raises(TranslateError, match="node n1"):
        node_from_k8s(k8s_node(annotations={"hami.io/node-nvidia-register": bad}))


def test_bad_allocatable_is_an_error() -> None:
    obj = k8s_node()
    obj["status"]["allocatable"]["cpu"] = "lots"
    with pytest.raises(TranslateError, match=r"allocatable\.cpu"):
        node_from_k8s(obj)


# -- requests ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("limits", "expected"),
    [
        ({}, GpuRequest()),
        ({"nvidia.com/gpu": 2}, GpuRequest(count=2)),
        ({"nvidia.com/gpu": "1"}, GpuRequest(count=1)),
        (
            {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 10000, "nvidia.com/gpucores": 30},
            GpuRequest(gpu_milli=300, memory_mib=10000),
        ),
        ({"nvidia.com/gpu": 1, "nvidia.com/gpumem": 4096}, GpuRequest(memory_mib=4096)),
        (
            {"nvidia.com/gpu": 1, "nvidia.com/gpumem-percentage": 25, "nvidia.com/gpucores": 50},
            GpuRequest(gpu_milli=500, memory_percent=25),
        ),
        (
            {"nvidia.com/gpu": 1, "nvidia.com/gpucores": 20},
            GpuRequest(gpu_milli=200, memory_percent=100),
        ),
        ({"nvidia.com/gpu": 1, "nvidia.com/gpucores": 100}, GpuRequest(count=1)),
        # HAMi: n cards each holding the slice, not n whole cards
        ({"nvidia.com/gpu": 2, "nvidia.com/gpumem": 20000}, GpuRequest(memory_mib=20000, cards=2)),
        # HAMi's defaults: one card when only memory or cores are named
        ({"nvidia.com/gpumem": 3000}, GpuRequest(memory_mib=3000)),
        ({"nvidia.com/gpucores": 30}, GpuRequest(gpu_milli=300, memory_percent=100)),
        # a percentage of 100 and no cores: the webhook gives the card's whole compute
        ({"nvidia.com/gpu": 1, "nvidia.com/gpumem-percentage": 100}, GpuRequest(count=1)),
        ({"nvidia.com/gpu": 1, "nvidia.com/gpumem-percentage": 50}, GpuRequest(memory_percent=50)),
        # a percentage of 0 is ignored (HAMi: the whole memory, cores 0)
        ({"nvidia.com/gpu": 1, "nvidia.com/gpumem-percentage": 0}, GpuRequest(memory_percent=100)),
        # cores 100 with some memory: the card to itself, on a card with that much memory
        (
            {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 4000, "nvidia.com/gpucores": 100},
            GpuRequest(count=1, memory_mib=4000),
        ),
    ],
)
def test_pod_request(limits: dict[str, Any], expected: GpuRequest) -> None:
    req = pod_request(k8s_pod(limits), card_memory_mib=40960)
    assert req.gpu == expected
    assert (req.cpu_milli, req.memory_mib) == (1000, 1024)


def test_configurable_resource_names() -> None:
    names = ResourceNames(
        count="example.com/vgpu",
        memory="example.com/vmem",
        memory_percentage="example.com/vmem-pct",
        cores="example.com/vcores",
    )
    req = pod_request(
        k8s_pod({"example.com/vgpu": 1, "example.com/vcores": 40, "example.com/vmem": 2000}), names
    )
    assert req.gpu == GpuRequest(gpu_milli=400, memory_mib=2000)
    assert pod_request(k8s_pod({"nvidia.com/gpu": 1}), names).gpu == GpuRequest()


def test_effective_cpu_counts_init_containers() -> None:
    init = [{"name": "setup", "resources": {"requests": {"cpu": "8", "memory": "100Mi"}}}]
    req = pod_request(k8s_pod({}, init=init, cpu="2"))
    assert req.cpu_milli == 8000 and req.memory_mib == 1024 and req.slots == 2


@pytest.mark.parametrize(
    ("limits", "field"),
    [
        ({"nvidia.com/gpu": 1, "nvidia.com/gpucores": 150}, "0..100"),
        ({"nvidia.com/gpu": 1, "nvidia.com/gpumem-percentage": 150}, "0..100"),
        ({"nvidia.com/gpu": "1.5"}, "whole number"),
    ],
)
def test_bad_requests_are_rejected_with_the_reason(limits: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidJobError, match=field):
        pod_request(k8s_pod(limits))


def test_slices_in_two_containers_hold_a_card_each() -> None:
    extra = [
        {
            "name": "side",
            "resources": {
                "limits": {
                    "nvidia.com/gpu": 1,
                    "nvidia.com/gpumem-percentage": 10,
                    "nvidia.com/gpucores": 30,
                }
            },
        }
    ]
    pod = k8s_pod(
        {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 2000, "nvidia.com/gpucores": 20}, extra=extra
    )
    req = pod_request(pod)
    assert req.gpu == GpuRequest(gpu_milli=300, memory_mib=2000, memory_percent=10, cards=2)
    node = node_from_k8s(k8s_node(annotations={"hami.io/node-nvidia-register": REGISTER_JSON}))
    ann = hami_annotations(
        req, _placement(GpuShare(0, 300, 4096), GpuShare(1, 300, 4096)), node, 5.0
    )
    # each container its own card, each with its own limits
    assert ann[DEVICES_TO_ALLOCATE] == "GPU-aaaa,NVIDIA,2000,20:;GPU-bbbb,NVIDIA,4096,30:;"


def test_init_container_gpus_are_collapsed_not_summed() -> None:
    init = [{"name": "warm", "resources": {"limits": {"nvidia.com/gpu": 2}}}]
    req = pod_request(k8s_pod({"nvidia.com/gpu": 1}, init=init))
    assert req.gpu == GpuRequest(count=2)  # max(2, 1), not 3
    node = node_from_k8s(k8s_node(annotations={"hami.io/node-nvidia-register": REGISTER_JSON}))
    ann = hami_annotations(
        req, _placement(GpuShare(0, 1000, 40960), GpuShare(1, 1000, 40960)), node, 5.0
    )
    # the init container's cards are reused by the app container, as the kubelet does
    assert ann[DEVICES_TO_ALLOCATE] == (
        "GPU-aaaa,NVIDIA,40960,100:GPU-bbbb,NVIDIA,40960,100:;GPU-aaaa,NVIDIA,40960,100:;"
    )


def test_whole_cards_add_up_over_containers() -> None:
    extra = [{"name": "side", "resources": {"limits": {"nvidia.com/gpu": 2}}}]
    assert pod_request(k8s_pod({"nvidia.com/gpu": 1}, extra=extra)).gpu == GpuRequest(count=3)


def test_gpu_type_annotations_become_allowed_models() -> None:
    models = ["NVIDIA-A100-SXM4-40GB", "NVIDIA-H100", "NVIDIA-Tesla T4"]
    pod = k8s_pod({"nvidia.com/gpu": 1}, annotations={"nvidia.com/use-gputype": "a100,h100"})
    assert pod_request(pod, models=models).gpu.models == {"NVIDIA-A100-SXM4-40GB", "NVIDIA-H100"}
    pod = k8s_pod({"nvidia.com/gpu": 1}, annotations={"nvidia.com/nouse-gputype": "T4"})
    assert pod_request(pod, models=models).gpu.models == {"NVIDIA-A100-SXM4-40GB", "NVIDIA-H100"}
    pod = k8s_pod({"nvidia.com/gpu": 1}, annotations={"nvidia.com/use-gputype": "V100"})
    with pytest.raises(InvalidJobError, match="matches no GPU model"):
        pod_request(pod, models=models)


def test_queue_from_label() -> None:
    assert pod_queue(k8s_pod(labels={"gpupool.io/queue": "llm"})) == "llm"
    assert pod_queue(k8s_pod(labels={"kueue.x-k8s.io/queue-name": "vision"})) == "vision"
    assert pod_queue(k8s_pod(), default="default") == "default"


def test_gang_from_annotation_or_owning_job() -> None:
    g = pod_gang(k8s_pod(annotations={"gpupool.io/gang": "train", "gpupool.io/gang-size": "4"}))
    assert g is not None and (g.name, g.size, g.job_id) == ("train", 4, "team-a/gang:train")
    pod = k8s_pod(annotations={"gpupool.io/gang": "job"})
    pod["metadata"]["ownerReferences"] = [{"kind": "Job", "name": "train", "controller": True}]
    g = pod_gang(pod)
    assert g is not None and (g.name, g.size, g.job_owner) == ("job-train", 0, "train")
    assert pod_gang(k8s_pod()) is None
    with pytest.raises(InvalidJobError, match="gang-size"):
        pod_gang(k8s_pod(annotations={"gpupool.io/gang": "alone"}))


# -- annotations ------------------------------------------------------------------------------


def _placement(*shares: GpuShare) -> Placement:
    return Placement(
        task=TaskId("team-a/p/pod-0"),
        job=JobId("team-a/p"),
        node=NodeName("n1"),
        cpu_milli=1000,
        memory_mib=1024,
        shares=shares,
    )


def test_hami_annotations_for_a_slice_keep_empty_slots_init_first() -> None:
    node = node_from_k8s(k8s_node(annotations={"hami.io/node-nvidia-register": REGISTER_JSON}))
    init = [{"name": "setup", "resources": {}}]
    extra = [{"name": "side", "resources": {}}]
    pod = k8s_pod(
        {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 10000, "nvidia.com/gpucores": 30},
        init=init,
        extra=extra,
    )
    req = pod_request(pod, card_memory_mib=40960)
    ann = hami_annotations(req, _placement(GpuShare(1, 300, 10000)), node, 1_700_000_000.7)
    assert ann == {
        "hami.io/vgpu-node": "n1",
        "hami.io/vgpu-time": "1700000000",
        "hami.io/vgpu-devices-to-allocate": ";GPU-bbbb,NVIDIA,10000,30:;;",
        "hami.io/vgpu-devices-allocated": ";GPU-bbbb,NVIDIA,10000,30:;;",
        "hami.io/bind-phase": "allocating",
        "hami.io/bind-time": "1700000000",
    }


def test_hami_annotations_for_whole_cards_over_two_containers() -> None:
    node = node_from_k8s(k8s_node(annotations={"hami.io/node-nvidia-register": REGISTER_JSON}))
    extra = [{"name": "side", "resources": {"limits": {"nvidia.com/gpu": 1}}}]
    req = pod_request(k8s_pod({"nvidia.com/gpu": 1}, extra=extra))
    ann = hami_annotations(
        req, _placement(GpuShare(0, 1000, 40960), GpuShare(1, 1000, 40960)), node, 5.0
    )
    # a whole card asked as nvidia.com/gpu alone carries gpucores 100, as HAMi's webhook sets
    assert ann[DEVICES_TO_ALLOCATE] == "GPU-aaaa,NVIDIA,40960,100:;GPU-bbbb,NVIDIA,40960,100:;"
    assert ann[DEVICES_ALLOCATED] == ann[DEVICES_TO_ALLOCATE]


def test_no_hami_annotations_without_uuids_or_gpus() -> None:
    node = node_from_k8s(k8s_node(gpus=2))
    req = pod_request(k8s_pod({"nvidia.com/gpu": 1}))
    assert hami_annotations(req, _placement(GpuShare(0, 1000, 0)), node, 0.0) == {}
    assert hami_annotations(pod_request(k8s_pod()), _placement(), node, 0.0) == {}


def test_placement_annotation_round_trip() -> None:
    p = _placement(GpuShare(1, 300, 10000), GpuShare(0, 1000, 40960))
    pod = k8s_pod(
        annotations={PLACEMENT_ANNOTATION: placement_annotation(p, "llm", "a100", 12.5, 3)}
    )
    rec = read_placement(pod)
    assert rec is not None
    assert rec.placement() == p
    assert (rec.queue, rec.flavor, rec.start_s, rec.gang_size) == ("llm", "a100", 12.5, 3)
    assert read_placement(k8s_pod()) is None
    with pytest.raises(TranslateError, match="cannot be read"):
        read_placement(k8s_pod(annotations={PLACEMENT_ANNOTATION: "{]"}))


def test_placement_from_hami_annotation_alone() -> None:
    node = node_from_k8s(k8s_node(annotations={"hami.io/node-nvidia-register": REGISTER_JSON}))
    pod = k8s_pod(
        annotations={
            "hami.io/vgpu-devices-allocated": (
                ";GPU-bbbb,NVIDIA,10000,30:;GPU-bbbb,NVIDIA,2000,0:GPU-aaaa,NVIDIA,40960,0:;"
            )
        }
    )
    pod["spec"]["nodeName"] = "n1"
    rec = placement_from_hami(pod, node, "default", 1000, 1024)
    assert rec is not None
    # two containers' slices of GPU-bbbb add up; GPU-aaaa is held whole
    assert rec.shares == (GpuShare(0, 1000, 40960), GpuShare(1, 300, 12000))
    assert (rec.job, rec.task, rec.node) == ("team-a/p", "team-a/p/ps0-0", "n1")
    assert placement_from_hami(k8s_pod(), node, "default", 0, 0) is None
    # an init container's card is counted at its peak beside the app's sum, not added
    init = k8s_pod(
        annotations={
            "hami.io/vgpu-devices-allocated": "GPU-aaaa,NVIDIA,8000,50:;GPU-aaaa,NVIDIA,3000,20:;"
        },
        init=[{"name": "warm", "resources": {}}],
    )
    rec = placement_from_hami(init, node, "default", 0, 0)
    assert rec is not None and rec.shares == (GpuShare(0, 500, 8000),)
    bad = k8s_pod(annotations={"hami.io/vgpu-devices-allocated": "GPU-zzzz,NVIDIA,1,1:;"})
    with pytest.raises(TranslateError, match="not on node n1"):
        placement_from_hami(bad, node, "default", 0, 0)
