"""HAMi's NVIDIA device plugin on one emulated node: ``Allocate`` and registration, through
the API server as the real plugin does (the rules are in :mod:`.hami`).

Every step is a real request, in HAMi's order: get the Node (the lock), get the locked pod or
list the node's pods, patch the pod's device annotation, get the pod again, patch
``hami.io/bind-phase``, and release the lock (get the Node, then a merge patch carrying its
``resourceVersion``, retried five times from 100 ms, doubling, as HAMi's ``DefaultStrategy``).
The time these take is the window in which, without the lock, another pod's ``Allocate``
reads the wrong annotation.

:class:`PlainDevicePlugin` is NVIDIA's stock plugin for comparison runs: it hands out the
devices the kubelet chose and reads no annotation.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from gpupool.k8s.kube import MERGE_PATCH, STRATEGIC_PATCH, Kube, KubeError
from gpupool.k8s.nodeagent import hami
from gpupool.k8s.nodeagent.devices import NVIDIA_DEVICES, AgentDevices
from gpupool.k8s.nodeagent.hami import Device
from gpupool.k8s.nodeagent.ledger import Card

__all__ = ["AllocateError", "HamiDevicePlugin", "PlainDevicePlugin", "cards_of"]


class AllocateError(Exception):
    """``Allocate`` failed; the kubelet rejects the pod with UnexpectedAdmissionError."""


def _ann(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return (obj.get("metadata") or {}).get("annotations") or {}


def _key(pod: Mapping[str, Any]) -> tuple[str, str]:
    meta = pod.get("metadata") or {}
    return str(meta.get("namespace", "")), str(meta.get("name", ""))


def cards_of(node: Mapping[str, Any], register: str = hami.REGISTER) -> list[Card]:
    """The cards HAMi's register annotation declares (JSON, or the older colon form)."""
    text = _ann(node).get(register, "")
    if not text:
        return []
    if text.lstrip().startswith("["):
        return [Card(str(d.get("id", "")), int(d.get("count", 0) or 0),
                     int(d.get("devmem", 0) or 0)) for d in json.loads(text)]
    out = []
    for entry in text.split(":"):
        f = entry.split(",")
        if len(f) >= 3:
            out.append(Card(f[0], int(f[1]), int(f[2])))
    return out


class HamiDevicePlugin:
    def __init__(self, kube: Kube, node: str, devices: AgentDevices = NVIDIA_DEVICES) -> None:
        self.devices = devices
        self.device_type = devices.device_type
        self.kube = kube
        self.node = node
        self.alive = True
        self.via = ""  # how the last Allocate found its pod: "lock <value>" or "scan"
        self.errors: list[str] = []  # API errors the plugin met and retried

    async def _pending_pod(self) -> dict[str, Any]:
        try:
            node = await self.kube.request("GET", f"/api/v1/nodes/{self.node}")
            lock = _ann(node).get(hami.NODE_LOCK)
            self.via = "scan"
            if lock:
                value = hami.parse_lock(lock)
                if value.namespace and value.name:
                    self.via = f"lock {lock}"
                    return await self.kube.request(
                        "GET", f"/api/v1/namespaces/{value.namespace}/pods/{value.name}")
            listed = await self.kube.request("GET", "/api/v1/pods", params={
                "fieldSelector": f"spec.nodeName={self.node}"})
        except (KubeError, hami.ProtocolError) as exc:
            raise AllocateError(str(exc)) from exc
        pod = hami.first_pending(listed.get("items") or [], self.node)
        if pod is None:
            raise AllocateError(f"no binding pod found on node {self.node}")
        return dict(pod)

    async def allocate(self, n_devices: int) -> tuple[dict[str, Any], list[Device]]:
        """One ``Allocate`` call for a container asking ``n_devices``: the pod whose
        annotation was read, and the devices it names."""
        if not self.alive:
            raise AllocateError(f"device plugin for {self.node} is not running")
        current = await self._pending_pod()
        text = _ann(current).get(self.devices.to_allocate, "")
        try:
            found = hami.next_request(text, self.device_type)
        except hami.ProtocolError as exc:
            await self._finish(current, hami.FAILED)
            raise AllocateError(str(exc)) from exc
        if found is None:
            await self._finish(current, hami.FAILED)
            raise AllocateError("device request not found")
        _, devices = found
        if len(devices) != n_devices:
            await self._finish(current, hami.FAILED)
            raise AllocateError("device number not matched")
        ns, name = _key(current)
        try:
            await self._patch_pod(ns, name, {self.devices.to_allocate:
                                             hami.erase_next(text, self.device_type)})
        except KubeError as exc:
            await self._finish(current, hami.FAILED)
            raise AllocateError(str(exc)) from exc
        await self._try_success(current)
        return current, devices

    async def _patch_pod(self, ns: str, name: str, annotations: dict[str, str]) -> None:
        await self.kube.request("PATCH", f"/api/v1/namespaces/{ns}/pods/{name}",
                                {"metadata": {"annotations": annotations}},
                                content_type=STRATEGIC_PATCH)

    async def _try_success(self, pod: Mapping[str, Any]) -> None:
        ns, name = _key(pod)
        try:
            fresh = await self.kube.request("GET", f"/api/v1/namespaces/{ns}/pods/{name}")
        except KubeError:
            return
        if hami.allocation_done(_ann(fresh).get(self.devices.to_allocate, ""),
                                self.device_type):
            await self._finish(pod, hami.SUCCESS)

    async def _finish(self, pod: Mapping[str, Any], phase: str) -> None:
        ns, name = _key(pod)
        with contextlib.suppress(KubeError):
            await self._patch_pod(ns, name, {hami.BIND_PHASE: phase})
        await self.release_lock(ns, name)

    async def release_lock(self, ns: str, name: str) -> None:
        """HAMi's ``ReleaseNodeLock``: the owner is checked once; each retry (after a
        ``409``) reads the node again and removes whatever lock it then carries, as HAMi's
        retry loop does, so anyone else releasing this pod's lock meanwhile can cost the
        next pod its lock."""
        try:
            node = await self.kube.request("GET", f"/api/v1/nodes/{self.node}")
        except KubeError:
            return
        value = _ann(node).get(hami.NODE_LOCK)
        if not value or not hami.lock_names(value, ns, name):
            return
        delay = 0.1
        for _ in range(5):
            try:
                node = await self.kube.request("GET", f"/api/v1/nodes/{self.node}")
                rv = (node.get("metadata") or {}).get("resourceVersion", "")
                await self.kube.request("PATCH", f"/api/v1/nodes/{self.node}", {
                    "metadata": {"annotations": {hami.NODE_LOCK: None},
                                 "resourceVersion": rv}}, content_type=MERGE_PATCH)
                return
            except KubeError as exc:
                self.errors.append(f"releasing the lock for {ns}/{name}: {exc}")
                await asyncio.sleep(delay)
                delay *= 2

    async def register(self, register_text: str) -> None:
        """``RegistrInAnnotation``: the handshake stamp and the device list on the Node."""
        stamp = "Reported " + datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S.%f +0000 UTC")
        annotations = {hami.HANDSHAKE: stamp}
        if register_text:
            annotations[self.devices.register] = register_text
        await self.kube.request("PATCH", f"/api/v1/nodes/{self.node}",
                                {"metadata": {"annotations": annotations}},
                                content_type=STRATEGIC_PATCH)


class PlainDevicePlugin(HamiDevicePlugin):
    """NVIDIA's stock device plugin: the kubelet's choice of devices, no annotations."""

    async def allocate(self, n_devices: int) -> tuple[dict[str, Any], list[Device]]:
        if not self.alive:
            raise AllocateError(f"device plugin for {self.node} is not running")
        return {}, []

    async def register(self, register_text: str) -> None:
        return None
