"""The Kubernetes objects of queued provisioning, written and read back: cluster-autoscaler's
``autoscaling.x-k8s.io/v1`` ProvisioningRequest and the PodTemplates its pod sets point to.

A request holds one entry in ``spec.podSets`` per pod set of the job (1 to 32, the API's
``maxItems``), each a ``podTemplateRef`` and a ``count``. The PodTemplate of a pod set is what
the autoscaler simulates to choose and size a node group, so it must describe the pods as a
node sees them, as Kueue's provisioning admission check builds it:

- the spec of the pod set's first pod as created, without what a scheduler fills in
  (``nodeName``, ``schedulerName``, ``priority``, ``preemptionPolicy``);
- the flavor's node labels in ``nodeSelector`` and the pod set's tolerations (the pool's
  taints), so the node group the flavor names is the one that scales;
- only resources nodes advertise: HAMi's slice resources (``nvidia.com/gpumem``,
  ``nvidia.com/gpumem-percentage``, ``nvidia.com/gpucores``, or the names configured) are
  removed, no node group's template has them and the autoscaler would find no group for the
  pods; a slice keeps ``nvidia.com/gpu: 1`` (one card, as the device plugin counts it);
- limits copied to missing requests (the autoscaler fits requests; the API server does that
  for pods, not for templates).

gpupool's own marks on a request (read back after a restart): the label
``app.kubernetes.io/managed-by: gpupool`` and the annotations ``gpupool.io/job``,
``gpupool.io/queue``, ``gpupool.io/flavor``, ``gpupool.io/attempt``; and, once it is
Provisioned, ``gpupool.io/nodes``: the nodes gpupool counts as its booking
(``k8s/provisioning_nodes.py``).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gpupool.core.model import JobId, PodSet, Toleration
from gpupool.core.provisioning import (
    MAX_RUN_PARAMETER,
    REQUEST_LABEL,
    Condition,
    ConditionType,
    ProvisioningRequest,
    request_name,
)
from gpupool.k8s.translate import ResourceNames

__all__ = [
    "API",
    "MANAGED_BY",
    "NODES_ANNOTATION",
    "PR_PATH",
    "Marks",
    "attempt_of",
    "class_details",
    "conditions_of",
    "marks_of",
    "nodes_annotation",
    "ns_path",
    "pod_template",
    "request_from_object",
    "request_object",
    "template_name",
    "template_names",
    "wall_s",
]

API = "autoscaling.x-k8s.io/v1"
PR_PATH = f"/apis/{API}/provisioningrequests"
TEMPLATE_PREFIX = "ppt-"
MANAGED_BY = ("app.kubernetes.io/managed-by", "gpupool")
JOB_ANNOTATION = "gpupool.io/job"
QUEUE_ANNOTATION = "gpupool.io/queue"
FLAVOR_ANNOTATION = "gpupool.io/flavor"
ATTEMPT_ANNOTATION = "gpupool.io/attempt"
NODES_ANNOTATION = "gpupool.io/nodes"
_SCHEDULER_FIELDS = ("nodeName", "schedulerName", "priority", "preemptionPolicy")


def ns_path(ns: str, plural: str, name: str = "") -> str:
    """The API path of a namespaced ``autoscaling.x-k8s.io`` object (or its collection)."""
    base = f"/apis/{API}/namespaces/{ns}/{plural}"
    return f"{base}/{name}" if name else base


def template_name(req: ProvisioningRequest, index: int = 0) -> str:
    """The PodTemplate of pod set ``index``: ``ppt-<request>-<pod set>``."""
    ps = re.sub(r"[^a-z0-9-]+", "-", req.pod_sets[index].name.lower()).strip("-") or str(index)
    return f"{TEMPLATE_PREFIX}{req.name[: 240 - len(ps)]}-{ps}"


def template_names(obj: Mapping[str, Any]) -> list[str]:
    """The PodTemplates a ProvisioningRequest object points to."""
    return [
        str((ps.get("podTemplateRef") or {}).get("name"))
        for ps in (obj.get("spec") or {}).get("podSets") or ()
        if (ps.get("podTemplateRef") or {}).get("name")
    ]


def _synthetic_spec(ps: PodSet) -> dict[str, Any]:
    """A pod spec from the core's pod set, when the job's pods cannot be read."""
    limits: dict[str, str] = {}
    g = ps.gpu
    if g.mig_profile:
        limits[f"nvidia.com/mig-{g.mig_profile}"] = "1"
    elif g.count:
        limits["nvidia.com/gpu"] = str(g.count)
    elif g.gpu_milli or g.memory_mib:
        limits["nvidia.com/gpu"] = "1"
    requests = {"cpu": f"{ps.cpu_milli}m", "memory": f"{ps.memory_mib}Mi"}
    return {
        "containers": [
            {
                "name": "main",
                "image": "registry.k8s.io/pause:3.9",
                "resources": {"requests": requests, "limits": limits},
            }
        ]
    }


def _advertised(container: dict[str, Any], hami_only: frozenset[str]) -> None:
    """Resources a node advertises, with limits as the missing requests, in place."""
    res = container.get("resources")
    if not isinstance(res, dict):
        return
    limits = {k: v for k, v in (res.get("limits") or {}).items() if k not in hami_only}
    requests = {k: v for k, v in (res.get("requests") or {}).items() if k not in hami_only}
    for k, v in limits.items():
        requests.setdefault(k, v)
    res.pop("limits", None)
    res.pop("requests", None)
    if limits:
        res["limits"] = limits
    if requests:
        res["requests"] = requests


def _toleration_dict(t: Toleration) -> dict[str, str]:
    out = {"key": t.key, "operator": t.operator}
    if t.operator != "Exists" and t.value:
        out["value"] = t.value
    if t.effect is not None:
        out["effect"] = t.effect.value
    return out


def pod_template(
    req: ProvisioningRequest,
    pod: Mapping[str, Any] | None,
    index: int = 0,
    names: ResourceNames | None = None,
) -> dict[str, Any]:
    """The PodTemplate pod set ``index`` of ``req`` points to: ``pod``'s spec (the pod set's
    first pod), or one made from the pod set when ``pod`` is None; see the module's doc."""
    ps = req.pod_sets[index]
    if pod is not None:
        spec = copy.deepcopy(dict(pod.get("spec") or {}))
        for k in _SCHEDULER_FIELDS:
            spec.pop(k, None)
        labels = dict((pod.get("metadata") or {}).get("labels") or {})
    else:
        spec, labels = _synthetic_spec(ps), {}
    hami_only = frozenset((names or ResourceNames()).all()[1:])
    for kind in ("initContainers", "containers"):
        for c in spec.get(kind) or ():
            _advertised(c, hami_only)
    selector = {**(spec.get("nodeSelector") or {}), **ps.node_selector}
    selector.pop(REQUEST_LABEL, None)
    if selector:
        spec["nodeSelector"] = selector
    tolerations = [t for t in spec.get("tolerations") or () if t.get("key") != REQUEST_LABEL]
    for t in ps.tolerations:
        d = _toleration_dict(t)
        if t.key != REQUEST_LABEL and d not in tolerations:
            tolerations.append(d)
    if tolerations:
        spec["tolerations"] = tolerations
    return {
        "apiVersion": "v1",
        "kind": "PodTemplate",
        "metadata": {
            "name": template_name(req, index),
            "namespace": req.namespace,
            "labels": {"gpupool.io/provisioning-request": req.name, MANAGED_BY[0]: MANAGED_BY[1]},
        },
        "template": {"metadata": {"labels": labels}, "spec": spec},
    }


def request_object(
    req: ProvisioningRequest, parameters: Mapping[str, str], flavor: str = "", attempt: int = 0
) -> dict[str, Any]:
    """The ``autoscaling.x-k8s.io/v1`` ProvisioningRequest for the core's request, one
    ``podSets`` entry per pod set: ``parameters`` are the ProvisioningRequestConfig's
    (strings), with the request's ``maxRunDurationSeconds``. A request made for a job names
    it, its ClusterQueue, the flavor its quota was reserved in and its attempt (what a
    restart reads back)."""
    params = {str(k): str(v) for k, v in parameters.items()}
    if req.max_run_duration_s is not None:
        params[MAX_RUN_PARAMETER] = str(int(req.max_run_duration_s))
    meta: dict[str, Any] = {
        "name": req.name,
        "namespace": req.namespace,
        "labels": {MANAGED_BY[0]: MANAGED_BY[1]},
    }
    if req.job:
        meta["annotations"] = {
            JOB_ANNOTATION: req.job,
            QUEUE_ANNOTATION: req.queue,
            FLAVOR_ANNOTATION: flavor,
            ATTEMPT_ANNOTATION: str(attempt),
        }
    body: dict[str, Any] = {
        "apiVersion": API,
        "kind": "ProvisioningRequest",
        "metadata": meta,
        "spec": {
            "provisioningClassName": req.provisioning_class_name,
            "podSets": [
                {"podTemplateRef": {"name": template_name(req, i)}, "count": ps.count}
                for i, ps in enumerate(req.pod_sets)
            ],
        },
    }
    if params:
        body["spec"]["parameters"] = params
    return body


def conditions_of(obj: Mapping[str, Any]) -> dict[str, tuple[bool, str, str]]:
    """Condition type -> (status is True, reason, message) of a ProvisioningRequest."""
    out: dict[str, tuple[bool, str, str]] = {}
    for c in (obj.get("status") or {}).get("conditions") or ():
        out[str(c.get("type"))] = (
            str(c.get("status")) == "True",
            str(c.get("reason") or ""),
            str(c.get("message") or ""),
        )
    return out


def class_details(obj: Mapping[str, Any]) -> dict[str, str]:
    """``status.provisioningClassDetails`` of a ProvisioningRequest, as strings."""
    raw = (obj.get("status") or {}).get("provisioningClassDetails") or {}
    return {str(k): str(v) for k, v in raw.items()} if isinstance(raw, Mapping) else {}


def nodes_annotation(obj: Mapping[str, Any]) -> list[str]:
    """The nodes gpupool recorded as a request's booking (``gpupool.io/nodes``)."""
    raw = ((obj.get("metadata") or {}).get("annotations") or {}).get(NODES_ANNOTATION) or ""
    return sorted({n for n in str(raw).split(",") if n})


# -- reading gpupool's requests back -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Marks:
    """What gpupool wrote on a request it made for a job (``attempt`` 0 when not written)."""

    job: JobId
    queue: str
    flavor: str | None
    attempt: int


def marks_of(obj: Mapping[str, Any]) -> Marks | None:
    """gpupool's marks on a ProvisioningRequest object; None for one gpupool did not make for
    a job (no ``managed-by: gpupool`` label or no ``gpupool.io/job`` annotation)."""
    meta = obj.get("metadata") or {}
    if (meta.get("labels") or {}).get(MANAGED_BY[0]) != MANAGED_BY[1]:
        return None
    ann = meta.get("annotations") or {}
    job = str(ann.get(JOB_ANNOTATION) or "")
    if not job:
        return None
    raw = str(ann.get(ATTEMPT_ANNOTATION) or "")
    flavor = ann.get(FLAVOR_ANNOTATION)
    return Marks(
        JobId(job),
        str(ann.get(QUEUE_ANNOTATION) or ""),
        None if flavor is None else str(flavor),
        int(raw) if raw.isdigit() else 0,
    )


def attempt_of(name: str, job: str) -> int:
    """n when ``name`` is ``request_name(job, n)`` (the job's n-th request), else 0."""
    m = re.fullmatch(r".*-([0-9]{1,9})", name)
    if m is None:
        return 0
    n = int(m.group(1))
    return n if request_name(job, n) == name else 0


def wall_s(stamp: object) -> float | None:
    """Seconds since the epoch of an RFC 3339 time (``lastTransitionTime``), None if absent
    or not one."""
    if not stamp:
        return None
    try:
        return datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def request_from_object(
    obj: Mapping[str, Any],
    pod_sets: Sequence[PodSet] | None,
    nodes: Iterable[str],
    at: Callable[[float | None], float],
    consumed_s: float | None = None,
) -> ProvisioningRequest:
    """The core's request for a ProvisioningRequest object gpupool made, as it stands:
    conditions (their times through ``at``, wall seconds -> the controller's clock), ``nodes``
    and ``consumed_s``. ``pod_sets`` are the job's (None, or counts that differ from the
    object's: pod sets of the object's counts alone). InvalidJobError when the object cannot
    be one (no pod set, a bad count)."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    marks = marks_of(obj)
    counts = [int((ps or {}).get("count") or 0) for ps in spec.get("podSets") or ()]
    if pod_sets is None or [ps.count for ps in pod_sets] != counts:
        pod_sets = [PodSet(f"ps{i}", n) for i, n in enumerate(counts)]
    params = spec.get("parameters") or {}
    raw = params.get(MAX_RUN_PARAMETER)
    try:
        max_run = float(raw) if raw is not None else None
    except ValueError:
        max_run = None
    known = {k.value: k for k in ConditionType}
    conds: list[Condition] = []
    for c in (obj.get("status") or {}).get("conditions") or ():
        kind = known.get(str(c.get("type")))
        if kind is not None and all(x.type is not kind for x in conds):
            conds.append(
                Condition(
                    kind,
                    str(c.get("status")) == "True",
                    str(c.get("reason") or ""),
                    str(c.get("message") or ""),
                    at(wall_s(c.get("lastTransitionTime"))),
                )
            )
    order = list(ConditionType)
    conds.sort(key=lambda c: order.index(c.type))
    return ProvisioningRequest(
        name=str(meta.get("name") or ""),
        pod_sets=tuple(pod_sets),
        namespace=str(meta.get("namespace") or "default"),
        provisioning_class_name=str(spec.get("provisioningClassName") or ""),
        max_run_duration_s=max_run,
        job=str(marks.job) if marks else "",
        queue=marks.queue if marks else "",
        created_s=at(wall_s(meta.get("creationTimestamp"))),
        conditions=tuple(conds),
        nodes=tuple(nodes),
        consumed_s=consumed_s,
    )
