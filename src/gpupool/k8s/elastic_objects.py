"""Elastic GPU objects as Kubernetes custom resources (``elasticgpu.io/v1alpha1``): read into
the core's objects and written back, and what a pod says about the claims it consumes
(``elasticgpu.io/egpuc-<container>``) and the resources its containers get for them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpupool.config.elastic import (
    claim_from_json,
    claim_to_json,
    class_from_json,
    gpu_from_json,
    gpu_to_json,
)
from gpupool.core.elastic import (
    ElasticGPU,
    ElasticGPUClaim,
    ElasticGPUClass,
    Source,
)
from gpupool.core.model import WHOLE_GPU_MILLI
from gpupool.k8s.translate import ResourceNames

GROUP = "elasticgpu.io"
API = f"{GROUP}/v1alpha1"
PLURALS = {
    "ElasticGPUClass": "elasticgpuclasses",
    "ElasticGPUClaim": "elasticgpuclaims",
    "ElasticGPU": "elasticgpus",
}
CLAIM_PREFIX = f"{GROUP}/egpuc-"
"""``elasticgpu.io/egpuc-<container>: <claim>`` on a pod: the container consumes the claim."""
NODE_ANNOTATION = f"{GROUP}/node"
"""Written by the webhook: the node the pod's claims are bound on."""
HOSTNAME_LABEL = "kubernetes.io/hostname"


def _path(plural: str, namespace: str = "", name: str = "") -> str:
    base = f"/apis/{API}"
    if namespace:
        base += f"/namespaces/{namespace}"
    base += f"/{plural}"
    return f"{base}/{name}" if name else base


# -- objects <-> core ------------------------------------------------------------------------


def class_from_cr(obj: Mapping[str, Any]) -> ElasticGPUClass:
    """An ElasticGPUClass object as the core's class; ConfigError naming the field."""
    meta = obj.get("metadata") or {}
    return class_from_json(
        {
            "name": meta.get("name", ""),
            "provisioner": obj.get("provisioner", ""),
            "parameters": obj.get("parameters") or {},
            "reclaimPolicy": obj.get("reclaimPolicy") or "Delete",
            "bindingMode": obj.get("bindingMode") or "Immediate",
        }
    )


def claim_from_cr(obj: Mapping[str, Any], *, with_status: bool = False) -> ElasticGPUClaim:
    """An ElasticGPUClaim object as the core's claim (spec only, or with its recorded
    status for a restore); InvalidJobError naming the field."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    body = {
        "name": meta.get("name", ""),
        "namespace": meta.get("namespace") or "default",
        "requests": spec.get("requests"),
        "className": spec.get("className") or "",
    }
    if with_status:
        st = obj.get("status") or {}
        body |= {
            k: st[k]
            for k in ("phase", "elasticGPUs", "node", "servingModels", "message")
            if st.get(k) is not None
        }
    return claim_from_json(body, with_status=with_status)


def _clean(value: Any) -> Any:
    """``value`` without None and empty-string entries: a merge patch reads null as
    "delete", and kube-apiserver v1.20 reads an empty string of a CRD field as null and
    refuses it against a string schema."""
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items() if v is not None and v != ""}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def claim_status(c: ElasticGPUClaim) -> dict[str, Any]:
    d = claim_to_json(c)
    out: dict[str, Any] = _clean(
        {k: d[k] for k in ("phase", "elasticGPUs", "node", "servingModels", "message")}
    )
    return out


_GPU_SPEC = (
    "source",
    "model",
    "capacity",
    "node",
    "card",
    "uuid",
    "migProfile",
    "pool",
    "endpoint",
    "className",
    "reclaimPolicy",
    "claimRef",
)


def gpu_from_cr(obj: Mapping[str, Any]) -> ElasticGPU:
    """An ElasticGPU object as the core's; ConfigError naming the field."""
    meta = obj.get("metadata") or {}
    spec = {k: v for k, v in (obj.get("spec") or {}).items() if v is not None}
    st = obj.get("status") or {}
    phase = st.get("phase") or ("Bound" if spec.get("claimRef") else "Available")
    return gpu_from_json(
        {"name": meta.get("name", ""), **spec, "phase": phase, "message": st.get("message") or ""}
    )


def gpu_to_cr(g: ElasticGPU) -> dict[str, Any]:
    """The object for an ElasticGPU: spec (with the binding's claimRef) and status."""
    d = gpu_to_json(g)
    return {
        "apiVersion": API,
        "kind": "ElasticGPU",
        "metadata": {"name": g.name},
        "spec": _clean({k: d[k] for k in _GPU_SPEC}),
        "status": _clean({"phase": d["phase"], "message": d["message"]}),
    }


# -- pods ------------------------------------------------------------------------------------


def pod_claims(pod: Mapping[str, Any]) -> dict[str, str]:
    """Container name -> claim name, from ``elasticgpu.io/egpuc-<container>`` annotations."""
    ann = (pod.get("metadata") or {}).get("annotations") or {}
    return {
        k[len(CLAIM_PREFIX) :]: str(v) for k, v in ann.items() if k.startswith(CLAIM_PREFIX) and v
    }


def resources_for(gpus: list[ElasticGPU], names: ResourceNames) -> dict[str, str]:
    """A container's resource limits for the ElasticGPUs of one claim, in HAMi's names:
    whole cards as ``nvidia.com/gpu: n``; a slice as one card with ``gpumem`` (MiB) and
    ``gpucores`` (percent); a MIG instance as ``nvidia.com/mig-<profile>: 1``; remote GPUs
    need no node resource (empty)."""
    if not gpus or gpus[0].source is Source.REMOTE:
        return {}
    g = gpus[0]
    if g.source is Source.MIG:
        return {f"nvidia.com/mig-{g.mig_profile}": "1"}
    if g.source is Source.SLICE:
        return {
            names.count: "1",
            names.memory: str(g.capacity.memory_mib),
            names.cores: str(max(1, g.capacity.gpu_milli * 100 // WHOLE_GPU_MILLI)),
        }
    return {names.count: str(len(gpus))}


def _containers(pod: Mapping[str, Any]) -> list[tuple[str, int, Mapping[str, Any]]]:
    """(field, index, container), init containers first: HAMi's slot order."""
    spec = pod.get("spec") or {}
    return [("initContainers", i, c) for i, c in enumerate(spec.get("initContainers") or ())] + [
        ("containers", i, c) for i, c in enumerate(spec.get("containers") or ())
    ]


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")
