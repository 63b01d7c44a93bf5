"""Elastic GPU objects and Dynamic Resource Allocation (``resource.k8s.io/v1``), both ways.

Where a cluster serves DRA (Kubernetes 1.34 and later: ``resource.k8s.io/v1``), the Elastic
GPU objects map onto its kinds:

- **ElasticGPUClass <-> DeviceClass**: a CEL selector on the driver, the device ``type``
  (``gpu`` or ``mig``), the class's ``models`` (``productName in [...]``) and MIG
  ``profiles``; provisioner, parameters, reclaim policy and binding mode in annotations
  (``elasticgpu.io/...``), since DRA has no place for them.
- **ElasticGPUClaim <-> ResourceClaim**: one request ``gpu``. Cards are ``exactly.count``
  (``allocationMode: ExactCount``; a least memory per card as a CEL capacity selector); a
  slice is one device with ``capacity.requests`` ``cores`` and ``memory`` (consumable
  capacity); TFLOPS are ``firstAvailable`` subrequests, one per serving model, each what the
  claim takes on that model (the figure kept in an annotation). A Bound claim's ElasticGPUs
  are its ``status.allocation`` (results naming driver, pool = node, device; the node
  selector of its node).
- **A node's cards <-> ResourceSlice**: one slice per node, pool = node; a device
  ``gpu-<index>`` per whole card, or ``gpu-<index>-mig-<profile>-<k>`` per MIG instance of a
  partitioned card, with attributes ``type``, ``uuid``, ``productName``, ``index`` (and
  ``profile``, ``parentUUID``, ``parentIndex`` for MIG) and capacity ``memory`` and
  ``cores`` (percent of a card).

Attribute names follow NVIDIA's DRA driver (``gpu.nvidia.com``): ``productName``, ``uuid``,
``index``, ``type``, ``profile``, ``parentUUID``, ``parentIndex``, capacity ``memory``. The
``cores`` capacity is gpupool's (a card is 100), so a slice can be requested as consumable
capacity; slices read from a driver that does not publish it count as whole cards (100).
Devices are flat in v1 (``spec.devices[].attributes``, no ``basic`` wrapper as in v1beta1).

Everything here is pure: objects in, objects out; nothing is sent to an API server (the test
API server, v1.20, does not serve ``resource.k8s.io``).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from gpupool.core.elastic import (
    BindingMode,
    ClaimRequests,
    ElasticGPU,
    ElasticGPUClaim,
    ElasticGPUClass,
    Provisioner,
    ReclaimPolicy,
    Source,
)
from gpupool.core.errors import ConfigError, InvalidJobError
from gpupool.core.mig import profile_milli
from gpupool.core.model import Gpu, MigInstance, Node, NodeName

__all__ = [
    "API",
    "DRIVER",
    "claim_from_resource_claim",
    "class_from_device_class",
    "device_class",
    "gpus_from_resource_slice",
    "resource_claim",
    "resource_slice",
]

API = "resource.k8s.io/v1"
DRIVER = "gpu.nvidia.com"
REQUEST = "gpu"
ANN = "elasticgpu.io/"

_MIB = {
    "Ki": 1 / 1024,
    "Mi": 1,
    "Gi": 1024,
    "Ti": 1024**2,
    "K": 1000 / 1024**2,
    "k": 1000 / 1024**2,
    "M": 1000**2 / 1024**2,
    "G": 1000**3 / 1024**2,
    "T": 1000**4 / 1024**2,
    "": 1 / 1024**2,
}


def mib(quantity: object) -> int:
    """A memory quantity (``80Gi``, ``81920Mi``, ``85899345920``) in MiB, rounded down."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([KMGT]i?|k)?\s*", str(quantity))
    if m is None:
        raise ConfigError(f"quantity {quantity!r}: not a memory quantity")
    return math.floor(float(m.group(1)) * _MIB[m.group(2) or ""] + 1e-9)


def _value(attr: Mapping[str, Any]) -> Any:
    for k in ("string", "int", "bool", "version"):
        if k in attr:
            return attr[k]
    return None


def _attrs(device: Mapping[str, Any]) -> dict[str, Any]:
    """A device's attributes by short name (``gpu.nvidia.com/productName`` -> productName)."""
    out = {}
    for k, v in (device.get("attributes") or {}).items():
        out[k.rsplit("/", 1)[-1]] = _value(v)
    return out


def _capacity(device: Mapping[str, Any]) -> dict[str, str]:
    return {
        k.rsplit("/", 1)[-1]: str((v or {}).get("value"))
        for k, v in (device.get("capacity") or {}).items()
    }


def _label(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def _cel_list(items: Sequence[str]) -> str:
    return "[" + ", ".join("'" + i.replace("'", "\\'") + "'" for i in items) + "]"


# -- nodes <-> ResourceSlice -----------------------------------------------------------------


def resource_slice(node: Node, driver: str = DRIVER) -> dict[str, Any]:
    """The ResourceSlice of one node's cards (pool = node, one slice in the pool)."""
    devices = []
    for g in node.gpus:
        if not g.healthy:
            continue
        common = {"productName": {"string": g.model}}
        if not g.mig:
            devices.append(
                {
                    "name": f"gpu-{g.index}",
                    "attributes": {
                        "type": {"string": "gpu"},
                        "uuid": {"string": g.uuid},
                        "index": {"int": g.index},
                        **common,
                    },
                    "capacity": {
                        "memory": {"value": f"{g.memory_mib}Mi"},
                        "cores": {"value": "100"},
                    },
                }
            )
            continue
        for inst in g.mig:
            for k in range(inst.count):
                devices.append(
                    {
                        "name": f"gpu-{g.index}-mig-{_label(inst.profile)}-{k}",
                        "attributes": {
                            "type": {"string": "mig"},
                            "profile": {"string": inst.profile},
                            "parentUUID": {"string": g.uuid},
                            "parentIndex": {"int": g.index},
                            **common,
                        },
                        "capacity": {
                            "memory": {"value": f"{inst.memory_mib}Mi"},
                            "cores": {"value": str(inst.gpu_milli // 10)},
                        },
                    }
                )
    return {
        "apiVersion": API,
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node.name}-{_label(driver)}"},
        "spec": {
            "driver": driver,
            "nodeName": str(node.name),
            "pool": {"name": str(node.name), "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


def gpus_from_resource_slice(obj: Mapping[str, Any]) -> tuple[NodeName, tuple[Gpu, ...]]:
    """A node's cards from its ResourceSlice (whole cards and MIG instances; a card whose
    devices are MIG instances is partitioned). ConfigError for a slice without a node."""
    spec = obj.get("spec") or {}
    node = spec.get("nodeName")
    if not node:
        raise ConfigError(
            f"ResourceSlice {(obj.get('metadata') or {}).get('name')}: "
            "spec.nodeName: a node's cards come from a slice of that node"
        )
    whole: dict[int, Gpu] = {}
    mig: dict[int, dict[str, Any]] = {}
    for d in spec.get("devices") or ():
        at, cap = _attrs(d), _capacity(d)
        kind = str(at.get("type") or "gpu")
        memory = mib(cap.get("memory", "0"))
        if kind == "mig":
            parent = int(at.get("parentIndex", -1))
            entry = mig.setdefault(
                parent,
                {
                    "model": str(at.get("productName", "")),
                    "uuid": str(at.get("parentUUID", "")),
                    "profiles": {},
                },
            )
            prof = str(at.get("profile", ""))
            milli = int(cap.get("cores", "0") or 0) * 10 or profile_milli(prof)
            count, _, _ = entry["profiles"].get(prof, (0, milli, memory))
            entry["profiles"][prof] = (count + 1, milli, memory)
            continue
        index = int(at.get("index", len(whole)))
        whole[index] = Gpu(
            index, str(at.get("productName", "")), memory, uuid=str(at.get("uuid", ""))
        )
    for index, entry in mig.items():
        insts = tuple(
            MigInstance(p, c, m, mem) for p, (c, m, mem) in sorted(entry["profiles"].items())
        )
        total = sum(i.memory_mib * i.count for i in insts)
        whole[index] = Gpu(index, entry["model"], total, uuid=entry["uuid"], mig=insts)
    return NodeName(str(node)), tuple(whole[i] for i in sorted(whole))


# -- ElasticGPUClass <-> DeviceClass ---------------------------------------------------------


def device_class(cls: ElasticGPUClass, driver: str = DRIVER) -> dict[str, Any]:
    """The DeviceClass of an ElasticGPUClass. A remote class has no node devices: it maps to
    a class selecting the driver's devices of its pool (``pool`` attribute)."""
    attrs = f"device.attributes['{driver}']"
    terms = [f"device.driver == '{driver}'"]
    if cls.provisioner is Provisioner.MIG:
        terms.append(f"{attrs}.type == 'mig'")
        if cls.profiles:
            terms.append(f"{attrs}.profile in {_cel_list(sorted(cls.profiles))}")
    elif cls.provisioner is Provisioner.REMOTE:
        terms.append(f"{attrs}.pool == '{cls.parameters['pool']}'")
    else:
        terms.append(f"{attrs}.type == 'gpu'")
    if cls.models:
        terms.append(f"{attrs}.productName in {_cel_list(sorted(cls.models))}")
    ann = {
        f"{ANN}provisioner": cls.provisioner.value,
        f"{ANN}reclaim-policy": cls.reclaim_policy.value,
        f"{ANN}binding-mode": cls.binding_mode.value,
    }
    if cls.parameters:
        ann[f"{ANN}parameters"] = json.dumps(dict(sorted(cls.parameters.items())))
    return {
        "apiVersion": API,
        "kind": "DeviceClass",
        "metadata": {"name": cls.name, "annotations": ann},
        "spec": {"selectors": [{"cel": {"expression": " && ".join(terms)}}]},
    }


def class_from_device_class(obj: Mapping[str, Any]) -> ElasticGPUClass:
    """An ElasticGPUClass from a DeviceClass: gpupool's annotations when present; else read
    from the CEL selectors (``type == 'mig'`` makes a mig class, otherwise physical;
    ``productName in [...]`` the models, ``profile in [...]`` the profiles)."""
    meta = obj.get("metadata") or {}
    ann = meta.get("annotations") or {}
    name = str(meta.get("name", ""))
    if f"{ANN}provisioner" in ann:
        params = json.loads(ann.get(f"{ANN}parameters") or "{}")
        return ElasticGPUClass(
            name,
            ann[f"{ANN}provisioner"],
            params,
            ann.get(f"{ANN}reclaim-policy", ReclaimPolicy.DELETE),
            ann.get(f"{ANN}binding-mode", BindingMode.IMMEDIATE),
        )
    cel = " && ".join(
        str((s.get("cel") or {}).get("expression", ""))
        for s in (obj.get("spec") or {}).get("selectors") or ()
    )
    params = {}
    models = re.search(r"productName\s+in\s+\[([^\]]*)\]", cel)
    if models:
        params["models"] = ",".join(re.findall(r"'([^']*)'", models.group(1)))
    single = re.search(r"productName\s*==\s*'([^']*)'", cel)
    if single and "models" not in params:
        params["models"] = single.group(1)
    if re.search(r"type\s*==\s*'mig'", cel):
        profiles = re.search(r"profile\s+in\s+\[([^\]]*)\]", cel)
        if profiles:
            params["profiles"] = ",".join(re.findall(r"'([^']*)'", profiles.group(1)))
        return ElasticGPUClass(name, Provisioner.MIG, params)
    return ElasticGPUClass(name, Provisioner.PHYSICAL, params)


# -- ElasticGPUClaim <-> ResourceClaim -------------------------------------------------------


def resource_claim(
    claim: ElasticGPUClaim, gpus: Sequence[ElasticGPU] = (), driver: str = DRIVER
) -> dict[str, Any]:
    """The ResourceClaim of a claim; with its ElasticGPUs when Bound, the allocation."""
    r = claim.requests
    cls_name = claim.class_name
    selectors = []
    if r.models:
        selectors.append(
            {
                "cel": {
                    "expression": f"device.attributes['{driver}'].productName in "
                    f"{_cel_list(sorted(r.models))}"
                }
            }
        )
    request: dict[str, Any] = {"name": REQUEST}
    ann: dict[str, str] = {}
    if r.tflops:
        ann[f"{ANN}tflops"] = f"{r.tflops:g}"
        subs = []
        for m in claim.serving_models:
            sub: dict[str, Any] = {
                "name": _label(m.model) or "model",
                "deviceClassName": cls_name,
                "selectors": [
                    {
                        "cel": {
                            "expression": f"device.attributes['{driver}'].productName == "
                            f"'{m.model}'"
                        }
                    }
                ],
            }
            if m.cards:
                sub.update(allocationMode="ExactCount", count=m.cards)
            else:
                sub.update(
                    allocationMode="ExactCount",
                    count=1,
                    capacity={
                        "requests": {
                            "cores": str(math.ceil(m.gpu_milli / 10)),
                            **({"memory": f"{r.memory_mib}Mi"} if r.memory_mib else {}),
                        }
                    },
                )
            subs.append(sub)
        request["firstAvailable"] = subs or [
            {"name": "any", "deviceClassName": cls_name, "allocationMode": "ExactCount", "count": 1}
        ]
    else:
        exactly: dict[str, Any] = {
            "deviceClassName": cls_name,
            "allocationMode": "ExactCount",
            "count": r.cards or 1,
        }
        if selectors:
            exactly["selectors"] = selectors
        if not r.cards:
            reqs = {}
            if r.gpu_milli:
                reqs["cores"] = str(math.ceil(r.gpu_milli / 10))
            if r.memory_mib:
                reqs["memory"] = f"{r.memory_mib}Mi"
            exactly["capacity"] = {"requests": reqs}
        elif r.memory_mib:
            exactly.setdefault("selectors", []).append(
                {
                    "cel": {
                        "expression": (
                            f"device.capacity['{driver}'].memory.compareTo(quantity('{r.memory_mib}Mi'))"
                            " >= 0"
                        )
                    }
                }
            )
        request["exactly"] = exactly
    meta: dict[str, Any] = {"name": claim.name, "namespace": claim.namespace}
    if ann:
        meta["annotations"] = ann
    obj: dict[str, Any] = {
        "apiVersion": API,
        "kind": "ResourceClaim",
        "metadata": meta,
        "spec": {"devices": {"requests": [request]}},
    }
    if gpus and claim.node:
        sub_name = ""
        if r.tflops:
            model = gpus[0].model
            sub_name = "/" + (_label(model) or "model")
        results = []
        for g in gpus:
            device = (
                f"gpu-{g.card}"
                if g.source is not Source.MIG
                else f"gpu-{g.card}-mig-{_label(g.mig_profile or '')}-{_mig_index(g)}"
            )
            res: dict[str, Any] = {
                "request": REQUEST + sub_name,
                "driver": driver,
                "pool": claim.node,
                "device": device,
            }
            if g.source is Source.SLICE:
                res["consumedCapacity"] = {
                    "cores": str(g.capacity.gpu_milli // 10),
                    "memory": f"{g.capacity.memory_mib}Mi",
                }
            results.append(res)
        obj["status"] = {
            "allocation": {
                "devices": {"results": results},
                "nodeSelector": {
                    "nodeSelectorTerms": [
                        {
                            "matchFields": [
                                {"key": "metadata.name", "operator": "In", "values": [claim.node]}
                            ]
                        }
                    ]
                },
            }
        }
    return obj


def _mig_index(g: ElasticGPU) -> int:
    m = re.search(r"\.([0-9]+)$", g.name)
    return int(m.group(1)) if m else 0


def claim_from_resource_claim(obj: Mapping[str, Any]) -> ElasticGPUClaim:
    """An ElasticGPUClaim from a ResourceClaim of one request: ``count`` devices are cards;
    one device with ``capacity.requests`` a slice (``cores`` x 10 milli-GPU, ``memory``); a
    ``tflops`` annotation a TFLOPS claim (else ``firstAvailable`` takes its first
    subrequest). InvalidJobError naming the field for what a claim cannot say."""
    meta = obj.get("metadata") or {}
    ann = meta.get("annotations") or {}
    name, ns = str(meta.get("name", "")), str(meta.get("namespace") or "default")
    where = f"ResourceClaim {ns}/{name}"
    reqs = ((obj.get("spec") or {}).get("devices") or {}).get("requests") or []
    if len(reqs) != 1:
        raise InvalidJobError(
            "spec.devices.requests", len(reqs), "an ElasticGPUClaim is one request", job=where
        )
    req = reqs[0]
    exactly = req.get("exactly")
    if exactly is None and req.get("firstAvailable"):
        exactly = req["firstAvailable"][0]
    if exactly is None:
        raise InvalidJobError(
            "spec.devices.requests[0]", req, "needs exactly or firstAvailable", job=where
        )
    cel = " ".join(
        str((s.get("cel") or {}).get("expression", "")) for s in exactly.get("selectors") or ()
    )
    models = (
        frozenset(re.findall(r"'([^']*)'", m.group(1)))
        if (m := re.search(r"productName\s+in\s+\[([^\]]*)\]", cel))
        else frozenset()
    )
    cls = str(exactly.get("deviceClassName", ""))
    if exactly.get("allocationMode", "ExactCount") != "ExactCount":
        raise InvalidJobError(
            "spec.devices.requests[0].allocationMode",
            exactly.get("allocationMode"),
            "only ExactCount maps to a claim",
            job=where,
        )
    capacity = (exactly.get("capacity") or {}).get("requests") or {}
    memory = mib(capacity["memory"]) if "memory" in capacity else 0
    if f"{ANN}tflops" in ann:
        requests = ClaimRequests(
            tflops=float(ann[f"{ANN}tflops"]), memory_mib=memory, models=models
        )
    elif capacity:
        requests = ClaimRequests(
            gpu_milli=int(capacity.get("cores", "0")) * 10, memory_mib=memory, models=models
        )
    else:
        mem = re.search(r"quantity\('([^']*)'\)", cel)
        requests = ClaimRequests(
            cards=int(exactly.get("count", 1)),
            memory_mib=mib(mem.group(1)) if mem else 0,
            models=models,
        )
    return ElasticGPUClaim(name, requests, namespace=ns, class_name=cls)
