"""Every vendor's HAMi protocol against objects as the API server returns them: the node
inventory each device plugin registers, the resources a pod names, and the allocation
annotations written for the cards gpupool chose (``k8s/vendors``)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gpupool.core import ClusterState, default_profile, place_task
from gpupool.core.devices import Division
from gpupool.core.model import GpuKind, Job, JobId, PodSet
from gpupool.k8s.hami.requests import pod_request
from gpupool.k8s.translate import node_from_k8s
from gpupool.k8s.vendors import vendor_annotations, vendor_gpus, vendor_pod_request
from gpupool.k8s.vendors.protocols import PROTOCOLS


def node_obj(
    name: str, annotations: dict[str, str] | None = None, capacity: dict[str, str] | None = None
) -> dict[str, Any]:
    cap = {"cpu": "64", "memory": "256Gi", "pods": "110", **(capacity or {})}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": annotations or {},
            "labels": {"kubernetes.io/hostname": name},
        },
        "status": {
            "capacity": cap,
            "allocatable": cap,
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def pod_obj(resources: dict[str, str], init: dict[str, str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulerName": "gpupool",
        "containers": [
            {"name": "sidecar", "image": "busybox"},
            {"name": "main", "image": "app", "resources": {"limits": resources}},
        ],
    }
    if init is not None:
        spec["initContainers"] = [{"name": "warm", "image": "app", "resources": {"limits": init}}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "team", "uid": "u-1"},
        "spec": spec,
    }


# Register annotations in HAMi's two node-device encodings. Colon form (DecodeNodeDevices):
# id,count,devmem,devcore,type,numa,health[,index,mode]: per card.
HYGON = (
    "DCU-0a1b,4,65536,100,DCU-K100,0,true,0,hami-core:"
    "DCU-2c3d,4,65536,100,DCU-K100,1,true,1,hami-core:"
)
ILUVATAR = "ILU-77,8,32768,100,BI-V150,0,true:ILU-78,8,32768,100,BI-V150,0,false:"
ASCEND = json.dumps(
    [
        {
            "id": "NPU-910B3-0",
            "index": 0,
            "count": 4,
            "devmem": 65536,
            "devcore": 20,
            "type": "Ascend910B3",
            "numa": 0,
            "health": True,
        },
        {
            "id": "NPU-910B3-1",
            "index": 1,
            "count": 4,
            "devmem": 65536,
            "devcore": 20,
            "type": "Ascend910B3",
            "numa": 0,
            "health": True,
        },
    ]
)
KUNLUN = json.dumps(
    [
        {
            "id": "XPU-0",
            "index": 0,
            "count": 4,
            "devmem": 98304,
            "devcore": 100,
            "type": "P800",
            "numa": 0,
            "health": True,
        }
    ]
)
METAX = json.dumps(
    [
        {
            "uuid": "GPU-mx-0",
            "model": "MXC500",
            "totalDevCount": 16,
            "totalCompute": 100,
            "totalVRam": 65536,
            "healthy": True,
        }
    ]
)

NODES = {
    "hygon": node_obj("dcu-0", {"hami.io/node-dcu-register": HYGON}),
    "ascend": node_obj("npu-0", {"hami.io/node-register-Ascend910B3": ASCEND}),
    "cambricon": node_obj(
        "mlu-0",
        capacity={"cambricon.com/mlu.smlu.vcore": "400", "cambricon.com/mlu.smlu.vmemory": "384"},
    ),
    "iluvatar": node_obj("ilu-0", {"hami.io/node-BI-V150-register": ILUVATAR}),
    "mthreads": node_obj(
        "mt-0", capacity={"mthreads.com/sgpu-core": "64", "mthreads.com/sgpu-memory": "128"}
    ),
    "metax": node_obj("mx-0", {"metax-tech.com/node-gpu-devices": METAX}),
    "enflame": node_obj("gcu-0", capacity={"enflame.com/gcu": "8"}),
    "kunlunxin": node_obj("xpu-0", {"hami.io/node-register-xpu": KUNLUN}),
}

# vendor: (cards, memory per card MiB, first UUID, model, healthy cards)
INVENTORY = {
    "hygon": (2, 65536, "DCU-0a1b", "DCU-K100", 2),
    "ascend": (2, 65536, "NPU-910B3-0", "Ascend910B3", 2),
    "cambricon": (4, 24576, "mlu-0-cambricon-mlu-0", "MLU", 4),  # 384 x 256 MiB over 4
    "iluvatar": (2, 32768, "ILU-77", "BI-V150", 1),
    "mthreads": (4, 16384, "mt-0-mthreads-0", "Mthreads", 4),  # 128 x 512 MiB over 4
    "metax": (1, 65536, "GPU-mx-0", "MXC500", 1),
    "enflame": (8, 0, "gcu-0-GCU-0", "GCU", 8),
    "kunlunxin": (1, 98304, "XPU-0", "P800", 1),
}


def test_every_vendor_in_the_table_has_recorded_objects() -> None:
    assert {p.vendor for p in PROTOCOLS} == set(NODES) == set(INVENTORY)


@pytest.mark.parametrize("vendor", sorted(NODES))
def test_inventory_as_each_vendors_plugin_registers_it(vendor: str) -> None:
    cards, mib, uuid, model, healthy = INVENTORY[vendor]
    gpus = vendor_gpus(NODES[vendor])
    assert len(gpus) == cards
    assert gpus[0].memory_mib == mib and gpus[0].uuid == uuid and gpus[0].model == model
    assert sum(g.healthy for g in gpus) == healthy
    assert {g.vendor for g in gpus} == {vendor}
    node = node_from_k8s(NODES[vendor])  # the adapter's own reading of the node
    assert node.gpus == gpus


def test_a_node_with_no_vendor_inventory_has_no_vendor_cards() -> None:
    assert vendor_gpus(node_obj("cpu-0")) == ()
    assert node_from_k8s(node_obj("cpu-0")).gpus == ()


# vendor: (pod limits, the allocation annotation key, the expected value)
ALLOCATIONS = {
    "hygon": (
        {"hygon.com/dcunum": "1", "hygon.com/dcumem": "8000", "hygon.com/dcucores": "30"},
        "hami.io/dcu-devices-to-allocate",
        ";DCU-0a1b,DCU,8000,30:;",
    ),
    "ascend": (
        {"huawei.com/Ascend910B3": "1", "huawei.com/Ascend910B3-memory": "12000"},
        "hami.io/Ascend910B3-devices-to-allocate",
        ";NPU-910B3-0,Ascend910B3,16384,5:;",
    ),  # trimmed up to vir05_1c_16g
    "cambricon": (
        {
            "cambricon.com/vmlu": "1",
            "cambricon.com/mlu.smlu.vmemory": "10",
            "cambricon.com/mlu.smlu.vcore": "25",
        },
        "hami.io/cambricon-mlu-devices-to-allocate",
        ";mlu-0-cambricon-mlu-0,MLU,2560,25:;",
    ),
    "iluvatar": (
        {
            "iluvatar.ai/BI-V150-vgpu": "1",
            "iluvatar.ai/BI-V150.vMem": "4000",
            "iluvatar.ai/BI-V150.vCore": "50",
        },
        "hami.io/BI-V150-devices-to-allocate",
        ";ILU-77,BI-V150,4096,50:;",
    ),
    "mthreads": (
        {"mthreads.com/vgpu": "1", "mthreads.com/sgpu-memory": "4", "mthreads.com/sgpu-core": "4"},
        "hami.io/mthreads-vgpu-devices-allocated",
        ";mt-0-mthreads-0,Mthreads,2048,4:;",
    ),
    "metax": (
        {
            "metax-tech.com/sgpu": "1",
            "metax-tech.com/vmemory": "5000",
            "metax-tech.com/vcore": "20",
        },
        "hami.io/metax-sgpu-devices-to-allocate",
        ";GPU-mx-0,Metax-SGPU,5120,20:;",
    ),
    "enflame": (
        {"enflame.com/gcu": "2"},
        "hami.io/enflame-gcu-devices-to-allocate",
        ";gcu-0-GCU-0,GCU,0,100:gcu-0-GCU-1,GCU,0,100:;",
    ),
    "kunlunxin": (
        {"kunlunxin.com/vxpu": "1", "kunlunxin.com/vxpu-memory": "20000"},
        "hami.io/xpu-devices-to-allocate",
        ";XPU-0,XPU,24576,25:;",
    ),  # a quarter
}


@pytest.mark.parametrize("vendor", sorted(ALLOCATIONS))
def test_request_placement_and_allocation_annotations(vendor: str) -> None:
    limits, key, expected = ALLOCATIONS[vendor]
    node = node_from_k8s(NODES[vendor])
    pod = pod_obj(limits)
    base = pod_request(pod)
    assert base.gpu.kind is GpuKind.NONE  # no NVIDIA resource named
    req = vendor_pod_request(pod, base, {vendor: frozenset(g.model for g in node.gpus)})
    assert req is not None and req.gpu.kind is not GpuKind.NONE
    state = ClusterState([node])
    job = Job(JobId("team/p"), (PodSet("p", cpu_milli=0, memory_mib=0, gpu=req.gpu),))
    p, status = place_task(next(job.tasks()), state.snapshot(), default_profile())
    assert p is not None, status.message
    out = vendor_annotations(req, p, node, now_s=1_700_000_000)
    assert out[key] == expected
    assert out["hami.io/vgpu-node"] == node.name and out["hami.io/bind-phase"] == "allocating"
    assert out["hami.io/bind-time"] == "1700000000"


def test_ascend_writes_the_runtime_annotation_with_the_template_name() -> None:
    limits, _, _ = ALLOCATIONS["ascend"]
    node = node_from_k8s(NODES["ascend"])
    pod = pod_obj(limits)
    req = vendor_pod_request(pod, pod_request(pod), {"ascend": frozenset({"Ascend910B3"})})
    assert req is not None
    job = Job(JobId("team/p"), (PodSet("p", gpu=req.gpu),))
    p, _ = place_task(next(job.tasks()), ClusterState([node]).snapshot(), default_profile())
    assert p is not None
    out = vendor_annotations(req, p, node, now_s=0)
    assert json.loads(out["huawei.com/Ascend910B3"]) == [
        {"UUID": "NPU-910B3-0", "memory": 16384, "temp": "vir05_1c_16g", "core": 5}
    ]
    assert node.gpus[0].device.division is Division.TEMPLATES


def test_mthreads_names_the_card_indices() -> None:
    limits, _, _ = ALLOCATIONS["mthreads"]
    node = node_from_k8s(NODES["mthreads"])
    pod = pod_obj(limits)
    req = vendor_pod_request(pod, pod_request(pod), {"mthreads": frozenset({"Mthreads"})})
    assert req is not None
    job = Job(JobId("team/p"), (PodSet("p", gpu=req.gpu),))
    p, _ = place_task(next(job.tasks()), ClusterState([node]).snapshot(), default_profile())
    assert p is not None
    assert vendor_annotations(req, p, node, 0)["mthreads.com/gpu-index"] == "0"


def test_a_vendor_pod_never_lands_on_another_vendors_cards() -> None:
    limits, _, _ = ALLOCATIONS["hygon"]
    pod = pod_obj(limits)
    dcu, npu = node_from_k8s(NODES["hygon"]), node_from_k8s(NODES["ascend"])
    models = {
        "hygon": frozenset(g.model for g in dcu.gpus),
        "ascend": frozenset(g.model for g in npu.gpus),
    }
    req = vendor_pod_request(pod, pod_request(pod), models)
    assert req is not None and req.gpu.models == frozenset({"DCU-K100"})
    job = Job(JobId("team/p"), (PodSet("p", gpu=req.gpu),))
    p, _ = place_task(next(job.tasks()), ClusterState([npu, dcu]).snapshot(), default_profile())
    assert p is not None and p.node == "dcu-0"


def test_a_whole_card_request_and_bad_cores() -> None:
    pod = pod_obj({"hygon.com/dcunum": "2"})  # no memory, no cores: two whole cards
    req = vendor_pod_request(pod, pod_request(pod), {})
    assert req is not None and req.gpu.kind is GpuKind.WHOLE and req.gpu.count == 2
    from gpupool.core.errors import InvalidJobError

    with pytest.raises(InvalidJobError, match=r"mthreads.com/sgpu-core.*must be 0..16"):
        pod = pod_obj({"mthreads.com/vgpu": "1", "mthreads.com/sgpu-core": "20"})
        vendor_pod_request(pod, pod_request(pod), {})


def test_a_register_annotation_that_cannot_be_read_names_the_node_and_key() -> None:
    from gpupool.k8s.hami.errors import TranslateError

    bad = node_obj("dcu-9", {"hami.io/node-dcu-register": "DCU-x,4,notanumber,100,DCU,0,true:"})
    with pytest.raises(TranslateError, match=r"node dcu-9: hami.io/node-dcu-register"):
        vendor_gpus(bad)


# -- alternatives on Kubernetes: the pod made in the chosen form ------------------------------


def alt_pod() -> dict[str, Any]:
    """A pod written for NVIDIA (HAMi's examples/nvidia/default_use.yaml limits, and CPU) with
    HAMi's Hygon example (examples/hygon/default_use.yaml) as its alternative."""
    from gpupool.k8s.vendors.overlay import ALTERNATIVES
    from tests.k8s.hami_examples import HYGON_DEFAULT, NVIDIA_DEFAULT, alternative

    pod = pod_obj({**NVIDIA_DEFAULT["limits"], "cpu": "2"})
    pod["spec"]["containers"][1]["env"] = [
        {"name": "KEEP", "value": "1"},
        {"name": "VISIBLE", "value": "old"},
    ]
    pod["metadata"]["annotations"] = {
        ALTERNATIVES: json.dumps([alternative("dcu", HYGON_DEFAULT, env={"VISIBLE": "new"})])
    }
    return pod


def test_a_pod_in_an_alternative_form_keeps_everything_but_its_accelerator() -> None:
    from gpupool.k8s.vendors.overlay import ALTERNATIVE, pod_alternatives, pod_in_form
    from tests.k8s.hami_examples import HYGON_DEFAULT

    pod = alt_pod()
    (alt,) = pod_alternatives(pod)
    out = pod_in_form(pod, alt)
    main = out["spec"]["containers"][1]
    assert main["resources"]["limits"] == {"cpu": "2", **HYGON_DEFAULT["limits"]}
    assert main["image"] == HYGON_DEFAULT["image"]
    assert main["env"] == [{"name": "KEEP", "value": "1"}, {"name": "VISIBLE", "value": "new"}]
    assert out["spec"]["containers"][0] == pod["spec"]["containers"][0]  # no accelerator
    assert out["metadata"]["annotations"][ALTERNATIVE] == "dcu"
    assert pod["spec"]["containers"][1]["image"] == "app"  # the original is not changed


def test_the_admission_patch_makes_the_same_pod_as_the_overlay() -> None:
    from gpupool.k8s.vendors.overlay import overlay_patch, pod_alternatives, pod_in_form

    pod = alt_pod()
    (alt,) = pod_alternatives(pod)
    patched = json.loads(json.dumps(pod))
    for op in overlay_patch(pod, alt):  # apply the JSON Patch as the API server does
        parts = [p.replace("~1", "/") for p in op["path"].strip("/").split("/")]
        target = patched
        for key in parts[:-1]:
            target = target[int(key)] if isinstance(target, list) else target[key]
        target[parts[-1]] = op["value"]
    assert patched == pod_in_form(pod, alt)


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        ("not json", "is not JSON"),
        ('{"name": "a"}', "must be a JSON list"),
        ('[{"name": "a", "limits": {}}]', "must map accelerator resource names"),
        (
            '[{"name": "a", "limits": {"x": "1"}}, {"name": "a", "limits": {"x": "1"}}]',
            "must be a name used once",
        ),
    ],
)
def test_bad_alternatives_annotations_name_the_annotation(raw: str, words: str) -> None:
    from gpupool.core.errors import InvalidJobError
    from gpupool.k8s.vendors.overlay import ALTERNATIVES, pod_alternatives

    pod = pod_obj({})
    pod["metadata"]["annotations"] = {ALTERNATIVES: raw}
    with pytest.raises(InvalidJobError, match=words) as err:
        pod_alternatives(pod)
    assert ALTERNATIVES in err.value.field
