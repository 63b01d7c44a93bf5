"""One emulated node beside a real API server: :class:`NodeAgent`, its kubelet and HAMi's
device plugin, run by a :class:`~gpupool.k8s.nodeagent.fleet.Fleet`.

A kubelet receives the pods bound to its node and admits them one at a time, in the order
they arrive (its sync loop). For each new pod the agent does what the kubelet does:

1. the device manager (its admit handler runs first): a pod asking ``nvidia.com/gpu`` needs
   that many healthy devices not held by admitted pods, then one ``Allocate`` call per
   container asking for them, init containers first; a failure rejects the pod with
   ``UnexpectedAdmissionError``;
2. the predicate admit handler (:mod:`.kubelet`): CPU, memory, extended resources, node
   affinity; a failure rejects the pod with ``OutOfcpu``, ``NodeAffinity``, ...;
3. admitted: after ``start_delay_s`` (the containers starting) the pod is ``Running``
   (status subresource, with the pod's UID as precondition, as the kubelet's status manager
   patches); with the annotation ``nodeagent.gpupool.io/run-seconds`` it is ``Succeeded``
   that many seconds later.

Pods already running when the agent starts count as admitted (a kubelet restart keeps
them). Pods of other schedulers (bound by ``spec.nodeName`` directly) go through the same
admission; :meth:`Fleet.occupy` makes DaemonSet-like ones that hold CPU and memory.

"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from gpupool.core.errors import GpupoolError
from gpupool.k8s.kube import MERGE_PATCH, KubeError
from gpupool.k8s.nodeagent.devices import devices_of
from gpupool.k8s.nodeagent.enflame import DEVICE_TYPE as DRS_TYPE
from gpupool.k8s.nodeagent.enflame import DrsDevicePlugin
from gpupool.k8s.nodeagent.kubelet import (
    Rejection,
    Requests,
    admit,
    pod_requests,
    rejected_status,
    unexpected,
)
from gpupool.k8s.nodeagent.ledger import ContainerAllocation
from gpupool.k8s.nodeagent.plugin import AllocateError, HamiDevicePlugin, PlainDevicePlugin
from gpupool.k8s.translate import node_from_k8s, read_placement

if TYPE_CHECKING:
    from gpupool.k8s.nodeagent.fleet import Fleet

__all__ = ["GPU_RESOURCE", "RUN_SECONDS", "NodeAgent", "obj_meta", "pod_key"]

log = logging.getLogger("gpupool.k8s.nodeagent")

RUN_SECONDS = "nodeagent.gpupool.io/run-seconds"
GPU_RESOURCE = "nvidia.com/gpu"


def obj_meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def pod_key(pod: Mapping[str, Any]) -> str:
    meta = obj_meta(pod)
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def _gpu_containers(
    pod: Mapping[str, Any], resource: str = "nvidia.com/gpu"
) -> list[tuple[str, int, bool]]:
    """(container, devices, is init) for each container asking for GPUs, init containers
    first (the order the kubelet allocates in)."""
    spec = pod.get("spec") or {}
    out = []
    for init, key in ((True, "initContainers"), (False, "containers")):
        for c in spec.get(key) or []:
            res = c.get("resources") or {}
            raw = (res.get("limits") or {}).get(resource, (res.get("requests") or {}).get(resource))
            if raw is not None and int(str(raw)) > 0:
                out.append((str(c.get("name", "")), int(str(raw)), init))
    return out


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _expected_cards(pod: Mapping[str, Any], node: Mapping[str, Any]) -> frozenset[str] | None:
    """The card UUIDs gpupool recorded for the pod (``gpupool.io/placement``, whose card
    numbers are the node's cards in HAMi's index order); None when it recorded none."""
    try:
        recorded = read_placement(pod)
        if recorded is None:
            return None
        gpus = {g.index: g.uuid for g in node_from_k8s(node).gpus}
    except GpupoolError:
        return None
    return frozenset(gpus.get(s.index, f"#{s.index}") for s in recorded.shares)


class NodeAgent:
    """The kubelet and HAMi's device plugin of one node."""

    def __init__(self, fleet: Fleet, name: str) -> None:
        self.fleet = fleet
        self.kube = fleet.kube
        self.name = name
        self.devices = devices_of(fleet.nodes.get(name) or {})  # NVIDIA's, or the vendor's
        plugin = DrsDevicePlugin if self.devices.device_type == DRS_TYPE else HamiDevicePlugin
        self.plugin: HamiDevicePlugin = (
            PlainDevicePlugin(fleet.kube, name)
            if fleet.device_plugin == "nvidia"
            else plugin(fleet.kube, name, self.devices)
        )
        self.queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.seen: set[str] = set()
        self.active: dict[str, Requests] = {}  # uid -> what it holds
        self.busy = False
        self.tasks: set[asyncio.Task[None]] = set()
        self._worker: asyncio.Task[None] | None = None
        self._register: asyncio.Task[None] | None = None

    # -- the pod stream ------------------------------------------------------------------

    def offer(self, pod: dict[str, Any]) -> None:
        uid = str(obj_meta(pod).get("uid", ""))
        if uid in self.seen:
            return
        self.seen.add(uid)
        self.fleet.note(self.name, f"bound {pod_key(pod)}")
        phase = (pod.get("status") or {}).get("phase", "Pending")
        if phase == "Running":
            self.active[uid] = pod_requests(pod)  # admitted before this agent started
            return
        if phase != "Pending":
            return
        self.queue.put_nowait(pod)

    def forget(self, pod: Mapping[str, Any]) -> None:
        uid = str(obj_meta(pod).get("uid", ""))
        if self.active.pop(uid, None) is not None:
            self.fleet.ledger.end(uid)

    def start(self) -> None:
        self._worker = asyncio.create_task(self._work(), name=f"kubelet {self.name}")
        if self.fleet.register_interval_s > 0:
            self._register = asyncio.create_task(
                self._registration(), name=f"device plugin {self.name}"
            )

    async def stop(self) -> None:
        for t in [self._worker, self._register, *self.tasks]:
            if t is not None:
                t.cancel()
        for t in [self._worker, self._register, *self.tasks]:
            if t is not None:
                with contextlib.suppress(asyncio.CancelledError):
                    await t

    @property
    def idle(self) -> bool:
        return self.queue.empty() and not self.busy

    async def _work(self) -> None:
        while True:
            pod = await self.queue.get()
            self.busy = True
            try:
                await self._admit(pod)
            except Exception:  # one bad pod must not stop the node
                log.exception("node %s: admitting %s failed", self.name, pod_key(pod))
            finally:
                self.busy = False

    # -- admission -----------------------------------------------------------------------

    async def _admit(self, pod: dict[str, Any]) -> None:
        uid = str(obj_meta(pod).get("uid", ""))
        key = pod_key(pod)
        current = self.fleet.pods.get(key)
        if current is None or obj_meta(current).get("uid") != uid:
            return  # deleted (or replaced) before the kubelet got to it
        node = self.fleet.nodes.get(self.name)
        if node is None:
            return
        ledger = self.fleet.ledger
        ledger.begin(uid, key, self.name, _expected_cards(pod, node))
        rejection = await self._devices(pod, uid, key, node)
        if rejection is None:
            rejection = admit(pod, node, self.active.values())
        if rejection is not None:
            ledger.reject(uid, key, rejection)
            await self._reject(pod, rejection)
            return
        self.active[uid] = pod_requests(pod)
        ledger.admit(uid)
        self._spawn(self._run(pod))

    async def _devices(
        self, pod: dict[str, Any], uid: str, key: str, node: Mapping[str, Any]
    ) -> Rejection | None:
        resource = self.devices.resource
        wanted = _gpu_containers(pod, resource)
        if not wanted:
            return None
        need = pod_requests(pod).scalars.get(resource, 0)
        healthy = 0
        if self.plugin.alive:
            raw = ((node.get("status") or {}).get("allocatable") or {}).get(resource, 0)
            healthy = int(str(raw))
        held = sum(r.scalars.get(resource, 0) for r in self.active.values())
        if need > healthy - held:
            return unexpected(
                f"requested number of devices unavailable for {resource}. "
                f"Requested: {need}, Available: {max(0, healthy - held)}"
            )
        for container, n, init in wanted:
            try:
                served, devices = await self.plugin.allocate(n)
            except AllocateError as exc:
                return unexpected(str(exc))
            self.fleet.note(
                self.name,
                f"Allocate for {key}/{container}: served "
                f"{pod_key(served) if served else '-'} ({self.plugin.via})",
            )
            if served:
                self.fleet.ledger.allocated(
                    ContainerAllocation(
                        pod=key,
                        uid=uid,
                        container=container,
                        devices=tuple(devices),
                        served=pod_key(served),
                        served_uid=str(obj_meta(served).get("uid", "")),
                        via=self.plugin.via,
                        init=init,
                    )
                )
        return None

    async def _status(self, pod: Mapping[str, Any], status: dict[str, Any]) -> None:
        meta = obj_meta(pod)
        with contextlib.suppress(KubeError):
            await self.kube.request(
                "PATCH",
                f"/api/v1/namespaces/{meta.get('namespace')}/pods/{meta.get('name')}/status",
                {"metadata": {"uid": meta.get("uid")}, "status": status},
                content_type=MERGE_PATCH,
            )

    async def _reject(self, pod: Mapping[str, Any], rejection: Rejection) -> None:
        await self._status(pod, rejected_status(rejection))
        meta = obj_meta(pod)
        ns = str(meta.get("namespace", "default"))
        with contextlib.suppress(KubeError):
            await self.kube.request(
                "POST",
                f"/api/v1/namespaces/{ns}/events",
                {
                    "apiVersion": "v1",
                    "kind": "Event",
                    "metadata": {"generateName": f"{meta.get('name')}.", "namespace": ns},
                    "involvedObject": {
                        "kind": "Pod",
                        "apiVersion": "v1",
                        "namespace": ns,
                        "name": meta.get("name"),
                        "uid": meta.get("uid"),
                    },
                    "reason": rejection.reason,
                    "message": rejection.message,
                    "type": "Warning",
                    "source": {"component": "kubelet", "host": self.name},
                    "firstTimestamp": _now(),
                    "lastTimestamp": _now(),
                    "count": 1,
                },
            )

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _run(self, pod: Mapping[str, Any]) -> None:
        uid = str(obj_meta(pod).get("uid", ""))
        await asyncio.sleep(self.fleet.start_delay_s)
        if uid not in self.active:
            return
        containers = [
            {
                "name": c.get("name"),
                "ready": True,
                "restartCount": 0,
                "image": c.get("image", ""),
                "imageID": "",
                "state": {"running": {"startedAt": _now()}},
            }
            for c in (pod.get("spec") or {}).get("containers") or []
        ]
        await self._status(
            pod,
            {
                "phase": "Running",
                "startTime": _now(),
                "hostIP": "10.0.0.1",
                "conditions": [
                    {"type": t, "status": "True", "lastTransitionTime": _now()}
                    for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled")
                ],
                "containerStatuses": containers,
            },
        )
        raw = (obj_meta(pod).get("annotations") or {}).get(RUN_SECONDS)
        if raw is None:
            return
        await asyncio.sleep(float(raw))
        if uid not in self.active:
            return
        await self._status(pod, {"phase": "Succeeded"})
        self.forget(pod)

    # -- the device plugin's registration and death ----------------------------------------

    async def _registration(self) -> None:
        while True:
            node = self.fleet.nodes.get(self.name) or {}
            text = (obj_meta(node).get("annotations") or {}).get(self.devices.register, "")
            with contextlib.suppress(KubeError):
                await self.plugin.register(text)
            await asyncio.sleep(self.fleet.register_interval_s)

    async def kill_device_plugin(self) -> None:
        """The device plugin dies: ``Allocate`` fails, it stops reporting, and the kubelet
        marks its devices unhealthy (allocatable ``nvidia.com/gpu`` falls to 0)."""
        self.plugin.alive = False
        if self._register is not None:
            self._register.cancel()
        await self.kube.request(
            "PATCH",
            f"/api/v1/nodes/{self.name}/status",
            {"status": {"allocatable": {self.devices.resource: "0"}}},
            content_type=MERGE_PATCH,
        )
