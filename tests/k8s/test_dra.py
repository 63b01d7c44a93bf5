"""The DRA mapping (``resource.k8s.io/v1``) on recorded objects and both ways: DeviceClass,
ResourceClaim, ResourceSlice. No API server: the test one (v1.20) does not serve DRA."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpupool.core.cluster import ClusterState
from gpupool.core.elastic import Binder, ClaimRequests, ElasticGPUClaim, ElasticGPUClass
from gpupool.core.errors import InvalidJobError
from gpupool.core.model import Gpu, MigInstance, Node, NodeName
from gpupool.k8s.dra import (
    claim_from_resource_claim,
    class_from_device_class,
    device_class,
    gpus_from_resource_slice,
    mib,
    resource_claim,
    resource_slice,
)

DATA = Path(__file__).parent / "data" / "dra"


def recorded(name: str) -> dict[str, Any]:
    obj: dict[str, Any] = json.loads((DATA / name).read_text())
    assert obj["apiVersion"] == "resource.k8s.io/v1"
    return obj


A100 = "NVIDIA A100-SXM4-80GB"


def node() -> Node:
    mig = (MigInstance("1g.10gb", 2, 140, 9856), MigInstance("3g.40gb", 1, 420, 39424))
    return Node(
        NodeName("gpu-node-1"),
        64000,
        512 * 1024,
        gpus=(
            Gpu(0, A100, 81920, uuid="GPU-0000"),
            Gpu(1, A100, 59136, uuid="GPU-1111", mig=mig),
            Gpu(2, A100, 81920, uuid="GPU-2222", healthy=False),
        ),
    )


def test_quantities() -> None:
    assert mib("80Gi") == 81920 and mib("9856Mi") == 9856
    assert mib(str(80 * 1024**3)) == 81920 and mib("1G") == 953


def test_recorded_slice_read() -> None:
    name, gpus = gpus_from_resource_slice(recorded("resourceslice-nvidia.json"))
    assert name == "gpu-node-1"
    whole, part = gpus
    assert whole == Gpu(0, A100, 81920, uuid="GPU-4cf8db2d-06c0-7d70-1a51-e59b25b2c16c")
    assert part.index == 1 and part.uuid == "GPU-a9f3e7c1-52d4-8e06-b7c3-0d1e2f3a4b5c"
    assert [(i.profile, i.count, i.memory_mib) for i in part.mig] == [
        ("1g.10gb", 2, 9856),
        ("3g.40gb", 1, 39424),
    ]
    # the driver publishes no compute share: taken from the profile (g of 7 slices)
    assert [i.gpu_milli for i in part.mig] == [143, 429]


def test_slice_both_ways() -> None:
    n = node()
    obj = resource_slice(n)
    spec = obj["spec"]
    assert spec["nodeName"] == "gpu-node-1" and spec["driver"] == "gpu.nvidia.com"
    assert spec["pool"] == {"name": "gpu-node-1", "generation": 1, "resourceSliceCount": 1}
    names = [d["name"] for d in spec["devices"]]
    assert names == [
        "gpu-0",
        "gpu-1-mig-1g-10gb-0",
        "gpu-1-mig-1g-10gb-1",
        "gpu-1-mig-3g-40gb-0",
    ]  # the unhealthy card is not offered
    first = spec["devices"][0]
    assert "basic" not in first  # v1 devices are flat
    assert first["attributes"]["productName"] == {"string": A100}
    assert first["capacity"] == {"memory": {"value": "81920Mi"}, "cores": {"value": "100"}}
    mig = spec["devices"][1]
    assert mig["attributes"]["profile"] == {"string": "1g.10gb"}
    assert mig["attributes"]["parentIndex"] == {"int": 1}
    assert mig["capacity"]["cores"] == {"value": "14"}
    _, gpus = gpus_from_resource_slice(obj)
    assert gpus == tuple(g for g in n.gpus if g.healthy)


CLASSES = [
    ElasticGPUClass("cards", "physical", {"models": "A100,H100"}),
    ElasticGPUClass("slices", "hami-core", reclaim_policy="Retain"),
    ElasticGPUClass(
        "mig", "mig", {"profiles": "1g.10gb,3g.40gb"}, binding_mode="WaitForFirstConsumer"
    ),
    ElasticGPUClass(
        "pool",
        "remote",
        {
            "pool": "p1",
            "model": "H100",
            "memoryMib": "81920",
            "count": "16",
            "endpoint": "grpc://gpus:9000",
        },
    ),
]


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.name)
def test_class_both_ways(cls: ElasticGPUClass) -> None:
    obj = device_class(cls)
    assert obj["kind"] == "DeviceClass"
    (sel,) = obj["spec"]["selectors"]
    assert sel["cel"]["expression"].startswith("device.driver == 'gpu.nvidia.com'")
    assert class_from_device_class(obj) == cls
    # without gpupool's annotations the CEL selector still says what it can
    bare = {**obj, "metadata": {"name": cls.name}}
    if cls.provisioner.value in ("physical", "mig"):
        back = class_from_device_class(bare)
        assert back.provisioner == cls.provisioner and back.parameters == cls.parameters


def test_recorded_classes_read() -> None:
    mig = class_from_device_class(recorded("deviceclass-mig.json"))
    assert mig == ElasticGPUClass("mig.nvidia.com", "mig")
    cards = class_from_device_class(recorded("deviceclass-a100.json"))
    assert cards.provisioner.value == "physical"
    assert cards.models == {"NVIDIA A100-SXM4-80GB", "NVIDIA A100-PCIE-40GB"}


def test_recorded_claims_read() -> None:
    two = claim_from_resource_claim(recorded("resourceclaim-two-cards.json"))
    assert two.key == "team-a/trainer-gpus" and two.class_name == "a100-cards"
    assert two.requests == ClaimRequests(cards=2)
    part = claim_from_resource_claim(recorded("resourceclaim-slice.json"))
    assert part.requests == ClaimRequests(
        gpu_milli=300, memory_mib=12288, models=frozenset({"NVIDIA L4"})
    )
    bad = recorded("resourceclaim-two-cards.json")
    bad["spec"]["devices"]["requests"] *= 2
    with pytest.raises(InvalidJobError, match="one request"):
        claim_from_resource_claim(bad)


def binder() -> Binder:
    nodes = [
        Node(
            NodeName(f"n{i}"),
            64000,
            512 * 1024,
            gpus=tuple(Gpu(j, "A100", 81920, uuid=f"GPU-{i}{j}") for j in range(4)),
        )
        for i in range(2)
    ]
    return Binder(
        ClusterState(nodes),
        classes=[ElasticGPUClass("cards", "physical", {"models": "A100"}), CLASSES[1], CLASSES[2]],
    )


@pytest.mark.parametrize(
    "requests,cls",
    [
        (ClaimRequests(cards=2), "cards"),
        (ClaimRequests(cards=1, memory_mib=40000), "cards"),
        (ClaimRequests(gpu_milli=250, memory_mib=8000), "slices"),
        (ClaimRequests(tflops=100.0), "slices"),
        (ClaimRequests(tflops=700.0), "cards"),
    ],
)
def test_claim_both_ways(requests: ClaimRequests, cls: str) -> None:
    b = binder()
    c = b.submit(ElasticGPUClaim("c", requests, namespace="ns", class_name=cls))
    assert c.phase.value == "Bound"
    gpus = b.bound_to(c.key)
    obj = resource_claim(c, gpus)
    (req,) = obj["spec"]["devices"]["requests"]
    assert req["name"] == "gpu"
    back = claim_from_resource_claim(obj)
    assert back.key == c.key and back.class_name == cls
    if requests.tflops:
        assert back.requests.tflops == requests.tflops
        assert [s["name"] for s in req["firstAvailable"]] == ["a100"]
    else:
        assert back.requests == requests
    alloc = obj["status"]["allocation"]
    results = alloc["devices"]["results"]
    assert [r["device"] for r in results] == [f"gpu-{g.card}" for g in gpus]
    assert {r["pool"] for r in results} == {c.node}
    assert alloc["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]["values"] == [c.node]
    if requests.gpu_milli:
        assert req["exactly"]["capacity"]["requests"] == {"cores": "25", "memory": "8000Mi"}
        assert results[0]["consumedCapacity"] == {"cores": "25", "memory": "8000Mi"}
