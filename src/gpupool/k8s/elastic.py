"""Elastic GPU objects on Kubernetes: CRDs (``elasticgpu.io/v1alpha1``), the binder, the webhook.

The three kinds (``deploy/crds/elasticgpu*.yaml``) are read into the core's objects
(``gpupool.core.elastic``) and the core :class:`~gpupool.core.elastic.Binder` runs on the
scheduler's own ClusterState, so ElasticGPUs and pods see each other's cards taken:

- **ElasticGPUClass** (cluster-scoped; ``provisioner``, ``parameters``, ``reclaimPolicy``,
  ``bindingMode`` at the top level, as a StorageClass);
- **ElasticGPUClaim** (namespaced; spec ``{requests, className}``; status ``{phase,
  elasticGPUs, node, servingModels, message}`` written here);
- **ElasticGPU** (cluster-scoped; spec ``{source, model, capacity, node, card, uuid,
  migProfile, pool, endpoint, className, reclaimPolicy, claimRef}``, status ``{phase,
  message}``). The binder's ElasticGPUs are created here; the binding is recorded in
  ``spec.claimRef`` and ``status.phase``, as a PersistentVolume records it.

:class:`ElasticController` keeps the cluster's objects and the binder in step while this
replica leads: new claims are submitted (bound at once when their class is ``Immediate``),
deleted claims released by the reclaim policy (their ElasticGPUs deleted or kept
``Released``), operators' ElasticGPUs added, pending claims retried. When the scheduler is
rebuilt (a restart, a new leader) the binder is rebuilt from the objects alone
(``Binder.restore``): every ElasticGPU that is not Failed takes its card, slice or MIG
instance back before any pod is scheduled, so the card view comes from them.

Pods name a claim per container with the annotation ``elasticgpu.io/egpuc-<container>:
<claim>``. The webhook (:meth:`ElasticController.admit_pod`) resolves it into the
container's resources in HAMi's names (``nvidia.com/gpu``, ``nvidia.com/gpumem``,
``nvidia.com/gpucores``, or ``nvidia.com/mig-<profile>`` for a MIG instance), pins the pod
to the claim's node (``nodeSelector`` ``kubernetes.io/hostname``), and refuses a pod that
names a claim that does not exist or is not bound, with the reason. The scheduler then asks
for no GPU of its own for that pod (the ElasticGPUs hold the cards) and binds it with HAMi's
device annotations naming the ElasticGPUs' cards.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from gpupool.core.cluster import ClusterState
from gpupool.core.elastic import (
    Binder,
    ClaimPhase,
    ElasticGPU,
    ElasticGPUClaim,
    GpuPhase,
    Source,
    recover,
)
from gpupool.core.errors import (
    ConfigError,
    ConflictError,
    GpupoolError,
    InvalidJobError,
    NotFoundError,
)
from gpupool.core.model import WHOLE_GPU_MILLI, GpuRequest
from gpupool.k8s.elastic_objects import (
    API,
    CLAIM_PREFIX,
    HOSTNAME_LABEL,
    NODE_ANNOTATION,
    PLURALS,
    _containers,
    _escape,
    _path,
    claim_from_cr,
    claim_status,
    class_from_cr,
    gpu_from_cr,
    gpu_to_cr,
    pod_claims,
    resources_for,
)
from gpupool.k8s.informer import Informer, object_key
from gpupool.k8s.kube import MERGE_PATCH, Kube, KubeError
from gpupool.k8s.translate import (
    BIND_PHASE,
    BIND_TIME,
    DEVICES_ALLOCATED,
    DEVICES_TO_ALLOCATE,
    HAMI_DEVICE_TYPE,
    VGPU_NODE,
    VGPU_TIME,
    PodRequest,
    ResourceNames,
)
from gpupool.k8s.wakeup import wait_event

if TYPE_CHECKING:
    from gpupool.core.scheduler import Scheduler
    from gpupool.k8s.controller import Controller

__all__ = [
    "API",
    "CLAIM_PREFIX",
    "HOSTNAME_LABEL",
    "PLURALS",
    "ElasticController",
    "claim_from_cr",
    "claim_status",
    "class_from_cr",
    "gpu_from_cr",
    "gpu_to_cr",
    "pod_claims",
    "resources_for",
]

log = logging.getLogger("gpupool.k8s.elastic")


# -- the controller --------------------------------------------------------------------------


class ElasticController:
    """The Elastic GPU objects of one cluster and the binder that binds them.

    Attach it to a :class:`~gpupool.k8s.controller.Controller` (``controller.attach``) so
    the scheduler rebuilds the binder with itself, reads claim-consuming pods as asking for
    no GPU of their own, and binds them with the ElasticGPUs' devices.
    """

    def __init__(self, kube: Kube, controller: Controller, *, interval_s: float = 1.0) -> None:
        self.kube = kube
        self.controller = controller
        self.interval_s = interval_s
        self.binder: Binder | None = None
        self.errors: dict[str, str] = {}  # object key -> why it is not taken
        self._written: dict[str, Any] = {}  # path -> last body written
        self._dirty = asyncio.Event()
        self.informers = {
            kind: Informer(kube, _path(plural), self._changed, name=plural)
            for kind, plural in PLURALS.items()
        }

    # -- caches ----------------------------------------------------------------------------

    def _objects(self, kind: str) -> dict[str, dict[str, Any]]:
        return self.informers[kind].cache

    def _changed(self, event: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        self._dirty.set()

    @property
    def synced(self) -> bool:
        return all(i.synced.is_set() for i in self.informers.values())

    # -- the binder's life -----------------------------------------------------------------

    def rebuilt(self, sched: Scheduler) -> None:
        """The scheduler was rebuilt: a new binder on its state, from the objects alone.
        Called by the controller before pods are scheduled."""
        binder = sched.new_binder()
        self.errors.clear()
        for key, obj in sorted(self._objects("ElasticGPUClass").items()):
            try:
                binder.add_class(class_from_cr(obj))
            except GpupoolError as exc:
                self.errors[f"class/{key}"] = str(exc)
        gpus: list[ElasticGPU] = []
        for key, obj in sorted(self._objects("ElasticGPU").items()):
            try:
                gpus.append(gpu_from_cr(obj))
            except GpupoolError as exc:
                self.errors[f"gpu/{key}"] = str(exc)
        names = {g.name for g in gpus}
        claims: list[ElasticGPUClaim] = []
        for key, obj in sorted(self._objects("ElasticGPUClaim").items()):
            try:
                c = claim_from_cr(obj, with_status=True)
            except GpupoolError as exc:
                self.errors[f"claim/{key}"] = str(exc)
                continue
            if c.phase is not ClaimPhase.PENDING and all(n in names for n in c.elastic_gpus):
                claims.append(c)
        try:  # the one recovery policy: what cannot hold its card fails alone
            recover(binder, gpus, claims)
        except (ConflictError, NotFoundError, ConfigError) as exc:
            log.error("ElasticGPUs cannot be taken back as recorded: %s", exc)
            self.errors["restore"] = str(exc)
            binder = sched.new_binder(binder.classes())
        self.binder = binder
        self._dirty.set()

    def ready(self) -> Binder:
        sched = self.controller.sched
        if sched is None:
            raise NotFoundError("gpupool is not leading: no ElasticGPU view")
        if self.binder is None or not sched.holds(self.binder):
            self.rebuilt(sched)
        assert self.binder is not None
        return self.binder

    # -- reconciling -----------------------------------------------------------------------

    def reconcile(self) -> list[tuple[str, str, Any]]:
        """Brings the binder in step with the objects; returns the writes to make as
        (method, path, body) in order. Pure bookkeeping; :meth:`write` sends them."""
        binder = self.ready()
        before = {g.name for g in binder.gpus() if g.phase is not GpuPhase.FAILED}
        writes: list[tuple[str, str, Any]] = []
        # classes: new ones added (classes do not change: a changed one keeps the old)
        for key, obj in self._objects("ElasticGPUClass").items():
            try:
                binder.add_class(class_from_cr(obj))
                self.errors.pop(f"class/{key}", None)
            except GpupoolError as exc:
                self.errors[f"class/{key}"] = str(exc)
        for cls in binder.classes():
            if cls.name not in self._objects("ElasticGPUClass"):
                binder.delete_class(cls.name)
        # nodes that left fail their ElasticGPUs
        here = self.controller.nodes_by_name
        for node in {
            g.node
            for g in binder.gpus()
            if g.node and g.phase is not GpuPhase.FAILED and g.node not in here
        }:
            binder.node_removed(node)
        # claims deleted: released by policy
        cached = self._objects("ElasticGPUClaim")
        for c in binder.claims():
            if c.key not in cached:
                binder.delete_claim(c.key)
        # ElasticGPUs an operator deleted (not bound): freed; made by an operator: added
        gpu_objs = self._objects("ElasticGPU")
        known = {g.name for g in binder.gpus()}
        for obj_name, obj in gpu_objs.items():
            if obj_name in known or (obj.get("metadata") or {}).get("deletionTimestamp"):
                continue
            try:
                g = gpu_from_cr(obj)
                if g.class_name or g.claim_ref is not None:
                    continue  # one of the binder's, deleted meanwhile: recreated below
                binder.add_gpu(g)
                self.errors.pop(f"gpu/{obj_name}", None)
            except GpupoolError as exc:
                self.errors[f"gpu/{obj_name}"] = str(exc)
        for g in binder.gpus():
            if g.name not in gpu_objs and not g.class_name and g.phase is not GpuPhase.BOUND:
                binder.delete_gpu(g.name)  # an operator deleted it
        # new claims
        for key, obj in sorted(
            cached.items(),
            key=lambda kv: str((kv[1].get("metadata") or {}).get("creationTimestamp", "")),
        ):
            if key in {c.key for c in binder.claims()}:
                continue
            try:
                binder.submit(claim_from_cr(obj))
                self.errors.pop(f"claim/{key}", None)
            except GpupoolError as exc:
                self.errors[f"claim/{key}"] = str(exc)
        binder.reconcile()
        after = {g.name for g in binder.gpus() if g.phase is not GpuPhase.FAILED}
        sched = self.controller.sched
        if before - after and sched is not None:
            # capacity was given back: parked pods may fit now (the binder does not tell
            # the scheduler's queues itself)
            sched.wake()
            self.controller.wake()
        # writes: ElasticGPUs first (a claim's status names them), then claims
        mine = {g.name: g for g in binder.gpus()}
        for name, g in mine.items():
            body = gpu_to_cr(g)
            if name not in gpu_objs:
                writes.append(("POST", _path("elasticgpus"), body))
                writes.append(
                    (
                        "PATCH",
                        _path("elasticgpus", name=name) + "/status",
                        {"status": body["status"]},
                    )
                )
                continue
            obj = gpu_objs[name]
            spec = obj.get("spec") or {}
            if spec != body["spec"]:
                # claimRef cleared (Retain made Available again): null deletes it
                patch = {**body["spec"], **{k: None for k in spec if k not in body["spec"]}}
                writes.append(("PATCH", _path("elasticgpus", name=name), {"spec": patch}))
            if (obj.get("status") or {}) != body["status"]:
                writes.append(
                    (
                        "PATCH",
                        _path("elasticgpus", name=name) + "/status",
                        {"status": body["status"]},
                    )
                )
        for name, obj in gpu_objs.items():
            if name not in mine and _made_by_binder(obj):
                writes.append(("DELETE", _path("elasticgpus", name=name), None))
        claims = {c.key: c for c in binder.claims()}
        for key, obj in cached.items():
            ns, name = key.split("/", 1)
            found = claims.get(key)
            status = (
                claim_status(found)
                if found is not None
                else {
                    "phase": "Pending",
                    "elasticGPUs": [],
                    "servingModels": [],
                    "message": "rejected: " + self.errors.get(f"claim/{key}", "not taken"),
                }
            )
            if (obj.get("status") or {}) != status:
                writes.append(
                    ("PATCH", _path("elasticgpuclaims", ns, name) + "/status", {"status": status})
                )
        return writes

    async def write(self, writes: list[tuple[str, str, Any]]) -> None:
        for method, path, body in writes:
            try:
                await self.kube.request(
                    method,
                    path,
                    body,
                    content_type=MERGE_PATCH if method == "PATCH" else "application/json",
                )
            except KubeError as exc:
                if not (exc.status == 404 and method in ("DELETE", "PATCH")) and exc.status != 409:
                    log.warning("%s %s: %s", method, path, exc)

    async def step(self) -> None:
        """One reconcile and its writes (when leading)."""
        if self.controller.sched is None or not self.controller.is_leader() or not self.synced:
            return
        await self.write(self.reconcile())

    async def run(self) -> None:
        """The reconcile loop. The informers are run by the controller (attached), which
        waits for them before it first builds its scheduler."""
        while True:
            await wait_event(self._dirty, self.interval_s)
            self._dirty.clear()
            try:
                await self.step()
            except GpupoolError:
                log.exception("ElasticGPU reconcile failed")

    # -- the scheduler's side --------------------------------------------------------------

    def _bound(self, pod: Mapping[str, Any]) -> dict[str, tuple[ElasticGPUClaim, list[ElasticGPU]]]:
        """Container -> (claim, its ElasticGPUs) for each claim the pod names; NotFoundError
        for a missing claim, InvalidJobError for one not bound or bound on another node than
        the pod's other claims."""
        binder = self.ready()
        ns = str((pod.get("metadata") or {}).get("namespace") or "default")
        names = {str(c.get("name")) for _, _, c in _containers(pod)}
        out: dict[str, tuple[ElasticGPUClaim, list[ElasticGPU]]] = {}
        node = ""
        for container, claim in sorted(pod_claims(pod).items()):
            where = f"metadata.annotations[{CLAIM_PREFIX}{container}]"
            if container not in names:
                raise InvalidJobError(where, claim, "the pod has no container of that name")
            try:
                c = binder.claim(f"{ns}/{claim}")
            except NotFoundError:
                raise NotFoundError(
                    f"{where}: ElasticGPUClaim {ns}/{claim} does not exist"
                ) from None
            if c.phase is not ClaimPhase.BOUND:
                raise InvalidJobError(
                    where,
                    claim,
                    f"ElasticGPUClaim {ns}/{claim} is "
                    f"{c.phase.value}, not Bound" + (f": {c.message}" if c.message else ""),
                )
            gpus = binder.bound_to(c.key)
            if c.node and node and c.node != node:
                raise InvalidJobError(
                    where, claim, f"bound on node {c.node}; the pod's other claims are on {node}"
                )
            node = node or c.node
            out[container] = (c, gpus)
        return out

    def admit_pod(self, pod: Mapping[str, Any], names: ResourceNames) -> list[dict[str, Any]]:
        """The webhook's JSON patch for a pod naming claims (empty when it names none):
        each consuming container's resources, the node selector of the claims' node and
        the node annotation. Raises (NotFoundError, InvalidJobError) with the reason for a
        missing or unbound claim."""
        if not pod_claims(pod):
            return []
        bound = self._bound(pod)
        patch: list[dict[str, Any]] = []
        for kind, i, c in _containers(pod):
            name = str(c.get("name"))
            if name not in bound:
                continue
            res = resources_for(bound[name][1], names)
            if not res:
                continue
            base = f"/spec/{kind}/{i}/resources"
            resources = c.get("resources")
            if resources is None:
                patch.append({"op": "add", "path": base, "value": {"limits": res}})
                continue
            if resources.get("limits") is None:
                patch.append({"op": "add", "path": f"{base}/limits", "value": res})
                continue
            for k, v in res.items():
                patch.append({"op": "add", "path": f"{base}/limits/{_escape(k)}", "value": v})
        node = next((c.node for c, _ in bound.values() if c.node), "")
        if node:
            spec = pod.get("spec") or {}
            if spec.get("nodeSelector") is None:
                patch.append(
                    {"op": "add", "path": "/spec/nodeSelector", "value": {HOSTNAME_LABEL: node}}
                )
            else:
                patch.append(
                    {
                        "op": "add",
                        "path": f"/spec/nodeSelector/{_escape(HOSTNAME_LABEL)}",
                        "value": node,
                    }
                )
            if (pod.get("metadata") or {}).get("annotations") is None:
                patch.append(
                    {"op": "add", "path": "/metadata/annotations", "value": {NODE_ANNOTATION: node}}
                )
            else:
                patch.append(
                    {
                        "op": "add",
                        "path": f"/metadata/annotations/{_escape(NODE_ANNOTATION)}",
                        "value": node,
                    }
                )
        return patch

    def admit_claim(self, obj: Mapping[str, Any]) -> None:
        """The webhook's check of a new ElasticGPUClaim: InvalidJobError with the reason
        when no class can ever serve it (a TFLOPS figure for a model without a published
        peak, a request no node or class can hold). Checked on a copy of the cluster:
        nothing is bound or stored."""
        binder = self.ready()
        scratch = Binder(ClusterState(binder.state.nodes()), binder.profile, binder.classes())
        scratch.submit(claim_from_cr(obj))

    def consumer_request(self, pod: Mapping[str, Any], req: PodRequest) -> PodRequest:
        """A pod consuming claims asks for no GPU of its own (its claims' ElasticGPUs hold
        the cards) and runs on their node. Pods naming no claim are returned unchanged."""
        if not pod_claims(pod):
            return req
        bound = self._bound(pod)
        node = next((c.node for c, _ in bound.values() if c.node), "")
        selector = dict(req.node_selector)
        if node:
            selector[HOSTNAME_LABEL] = node
        return replace(req, gpu=GpuRequest(), containers=(), node_selector=selector)

    def bind_annotations(self, pod: Mapping[str, Any], node: str, now_s: float) -> dict[str, str]:
        """HAMi's device annotations for a claim-consuming pod: per container slot, the
        ElasticGPUs' cards (``UUID,NVIDIA,MiB,cores:``); empty for a pod naming no claim."""
        if not pod_claims(pod):
            return {}
        try:
            bound = self._bound(pod)
        except GpupoolError as exc:
            log.warning("pod %s: %s", object_key(pod), exc)
            return {}
        slots: list[str] = []
        for _, _, c in _containers(pod):
            entry = bound.get(str(c.get("name")))
            devs = ""
            if entry is not None:
                for g in entry[1]:
                    if g.source is Source.REMOTE or not g.uuid:
                        continue
                    cores = (
                        0
                        if g.source is Source.PHYSICAL
                        else max(1, g.capacity.gpu_milli * 100 // WHOLE_GPU_MILLI)
                    )
                    devs += f"{g.uuid},{HAMI_DEVICE_TYPE},{g.capacity.memory_mib},{cores}:"
            slots.append(devs + ";")
        devices = "".join(slots)
        if not devices.strip(";"):
            return {}
        stamp = str(int(now_s))
        return {
            VGPU_NODE: node,
            VGPU_TIME: stamp,
            DEVICES_TO_ALLOCATE: devices,
            DEVICES_ALLOCATED: devices,
            BIND_PHASE: "allocating",
            BIND_TIME: stamp,
        }


def _made_by_binder(obj: Mapping[str, Any]) -> bool:
    spec = obj.get("spec") or {}
    return bool(spec.get("className"))
