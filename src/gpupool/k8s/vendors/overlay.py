"""A pod's alternatives on Kubernetes, and the patch that turns the pod into the one chosen.

A pod's resources cannot change once it exists, so the form a pod runs in is chosen when it
is created: the admission webhook asks the scheduler which form its queue would admit now
(:func:`gpupool.core.admission.try_admit` over the current snapshot, flavors in the queue's
order), and patches the pod into that form before it is stored. The pod then waits and binds
like any other. A pod none of whose forms fits now keeps its own form.

The annotation ``gpupool.io/alternatives`` holds a JSON list, each item
``{"name", "limits": {resource: quantity}, "image", "env": {NAME: value}}`` (``image`` and
``env`` optional). ``limits`` replace the accelerator resources (NVIDIA's and every vendor's
of ``k8s/vendors/protocols.py``) of each container that names any; ``image`` and ``env`` go
to those containers. The chosen form is recorded in ``gpupool.io/alternative``, and those
containers as written (``resources``, ``image``, ``env``) in
``gpupool.io/original-containers`` (a JSON list of ``{"kind", "index", ...}``), so that the pod
can be made again in its own form (``k8s/vendors/switch.py``).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpupool.core.errors import InvalidJobError
from gpupool.k8s.hami.requests import ResourceNames
from gpupool.k8s.vendors.protocols import PROTOCOLS

__all__ = [
    "ALTERNATIVE",
    "ALTERNATIVES",
    "ORIGINAL",
    "PodAlternative",
    "overlay_patch",
    "pod_alternatives",
    "pod_in_form",
]

ALTERNATIVES = "gpupool.io/alternatives"
ALTERNATIVE = "gpupool.io/alternative"
ORIGINAL = "gpupool.io/original-containers"
NVIDIA_NAMES = ResourceNames()


@dataclass(frozen=True, slots=True)
class PodAlternative:
    name: str
    limits: Mapping[str, str]
    image: str = ""
    env: Mapping[str, str] = field(default_factory=dict)


def _accelerator_names(names: ResourceNames) -> frozenset[str]:
    return frozenset((*names.all(), *(r for p in PROTOCOLS for r in p.resources())))


def pod_alternatives(pod: Mapping[str, Any]) -> list[PodAlternative]:
    """The pod's alternatives; InvalidJobError naming the annotation for a bad one."""
    raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(ALTERNATIVES)
    if not raw:
        return []
    at = f"metadata.annotations[{ALTERNATIVES}]"
    try:
        items = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise InvalidJobError(at, raw, f"is not JSON ({exc.msg} at {exc.pos})") from None
    if not isinstance(items, list):
        raise InvalidJobError(at, raw, "must be a JSON list of alternatives")
    out: list[PodAlternative] = []
    for i, item in enumerate(items):
        where = f"{at}[{i}]"
        if not isinstance(item, Mapping):
            raise InvalidJobError(where, item, "must be an object with name and limits")
        name, limits = item.get("name"), item.get("limits")
        if not isinstance(name, str) or not name or any(a.name == name for a in out):
            raise InvalidJobError(f"{where}.name", name, "must be a name used once")
        if not isinstance(limits, Mapping) or not limits:
            raise InvalidJobError(
                f"{where}.limits", limits, "must map accelerator resource names to quantities"
            )
        env = item.get("env") or {}
        image = item.get("image") or ""
        if not isinstance(env, Mapping) or not all(
            isinstance(k, str) and k and "=" not in k and isinstance(v, str) for k, v in env.items()
        ):
            raise InvalidJobError(f"{where}.env", env, "must map variable names to strings")
        if not isinstance(image, str):
            raise InvalidJobError(f"{where}.image", image, "must be an image name")
        out.append(
            PodAlternative(name, {str(k): str(v) for k, v in limits.items()}, image, dict(env))
        )
    return out


def _gpu_containers(pod: Mapping[str, Any], accel: frozenset[str]) -> list[tuple[str, int]]:
    spec = pod.get("spec") or {}
    out = []
    for kind in ("initContainers", "containers"):
        for i, c in enumerate(spec.get(kind) or ()):
            res = c.get("resources") or {}
            if accel.intersection({*(res.get("limits") or {}), *(res.get("requests") or {})}):
                out.append((kind, i))
    return out


def _resources(c: Mapping[str, Any], alt: PodAlternative, accel: frozenset[str]) -> dict[str, Any]:
    res = c.get("resources") or {}
    limits = {k: v for k, v in (res.get("limits") or {}).items() if k not in accel}
    requests = {k: v for k, v in (res.get("requests") or {}).items() if k not in accel}
    limits.update(alt.limits)
    out: dict[str, Any] = {"limits": limits}
    if requests:
        out["requests"] = requests
    return out


def _env(c: Mapping[str, Any], alt: PodAlternative) -> list[dict[str, Any]]:
    env = [e for e in (c.get("env") or ()) if e.get("name") not in alt.env]
    return env + [{"name": k, "value": v} for k, v in sorted(alt.env.items())]


def _original(pod: Mapping[str, Any], accel: frozenset[str]) -> str:
    """The accelerator containers of ``pod`` as written: the ``gpupool.io/original-containers``
    annotation's value (kept when the pod has one already)."""
    kept = ((pod.get("metadata") or {}).get("annotations") or {}).get(ORIGINAL)
    if kept:
        return str(kept)
    spec = pod.get("spec") or {}
    return json.dumps(
        [
            {
                "kind": kind,
                "index": i,
                **{k: spec[kind][i].get(k) for k in ("resources", "image", "env")},
            }
            for kind, i in _gpu_containers(pod, accel)
        ],
        sort_keys=True,
    )


def pod_in_form(
    pod: Mapping[str, Any], alt: PodAlternative, names: ResourceNames = NVIDIA_NAMES
) -> dict[str, Any]:
    """A copy of ``pod`` as it would be in the form ``alt``."""
    accel = _accelerator_names(names)
    original = _original(pod, accel)
    out = copy.deepcopy(dict(pod))
    for kind, i in _gpu_containers(pod, accel):
        c = out["spec"][kind][i]
        c["resources"] = _resources(c, alt, accel)
        if alt.image:
            c["image"] = alt.image
        if alt.env:
            c["env"] = _env(c, alt)
    notes = out.setdefault("metadata", {}).setdefault("annotations", {})
    notes[ALTERNATIVE] = alt.name
    notes[ORIGINAL] = original
    return out


def overlay_patch(
    pod: Mapping[str, Any], alt: PodAlternative, names: ResourceNames = NVIDIA_NAMES
) -> list[dict[str, Any]]:
    """JSON Patch operations turning ``pod`` into its form ``alt`` (admission's patch)."""
    accel = _accelerator_names(names)
    ops: list[dict[str, Any]] = []
    for kind, i in _gpu_containers(pod, accel):
        c = (pod.get("spec") or {})[kind][i]
        base = f"/spec/{kind}/{i}"
        ops.append(
            {"op": "replace", "path": f"{base}/resources", "value": _resources(c, alt, accel)}
        )
        if alt.image:
            ops.append({"op": "replace", "path": f"{base}/image", "value": alt.image})
        if alt.env:
            ops.append(
                {
                    "op": "replace" if "env" in c else "add",
                    "path": f"{base}/env",
                    "value": _env(c, alt),
                }
            )
    annotations = (pod.get("metadata") or {}).get("annotations")
    notes = {ALTERNATIVE: alt.name, ORIGINAL: _original(pod, accel)}
    if annotations is None:
        ops.append({"op": "add", "path": "/metadata/annotations", "value": notes})
    else:
        ops.extend(
            {"op": "add", "path": f"/metadata/annotations/{k.replace('/', '~1')}", "value": v}
            for k, v in notes.items()
        )
    return ops
