"""HAMi's NVIDIA device plugin on one emulated node: ``Allocate`` and registration, through
the API server as the real plugin does (the rules are in :mod:`.hami`).

A pod with ``hami.io/vgpu-mig-allocations`` (HAMi 2.10's Dynamic MIG) has each of its
instances made at exactly the placement recorded there, refused when the card does not
offer it or an instance of a pod still on the node overlaps it.

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
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from gpupool.k8s.hami.errors import TranslateError
from gpupool.k8s.hami.mig import (
    MIG_ALLOCATIONS,
    MigAllocation,
    decode_mig_allocations,
    encode_mig_allocations,
    overlaps,
)
from gpupool.k8s.kube import MERGE_PATCH, STRATEGIC_PATCH, Kube, KubeError
from gpupool.k8s.nodeagent import hami
from gpupool.k8s.nodeagent.devices import NVIDIA_DEVICES, AgentDevices
from gpupool.k8s.nodeagent.hami import Device
from gpupool.k8s.nodeagent.ledger import RegisteredCard

__all__ = ["AllocateError", "HamiDevicePlugin", "PlainDevicePlugin", "cards_of"]


class AllocateError(Exception):
    """``Allocate`` failed; the kubelet rejects the pod with UnexpectedAdmissionError."""


def _ann(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return (obj.get("metadata") or {}).get("annotations") or {}


def _key(pod: Mapping[str, Any]) -> tuple[str, str]:
    meta = pod.get("metadata") or {}
    return str(meta.get("namespace", "")), str(meta.get("name", ""))


def cards_of(node: Mapping[str, Any], register: str = hami.REGISTER) -> list[RegisteredCard]:
    """The cards HAMi's register annotation declares (JSON, or the older colon form)."""
    text = _ann(node).get(register, "")
    if not text:
        return []
    if text.lstrip().startswith("["):
        return [
            RegisteredCard(
                str(d.get("id", "")), int(d.get("count", 0) or 0), int(d.get("devmem", 0) or 0)
            )
            for d in json.loads(text)
        ]
    out = []
    for entry in text.split(":"):
        f = entry.split(",")
        if len(f) >= 3:
            out.append(RegisteredCard(f[0], int(f[1]), int(f[2])))
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
        self.mig_created = 0  # MIG instances made at the scheduler's placements

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
                        "GET", f"/api/v1/namespaces/{value.namespace}/pods/{value.name}"
                    )
            listed = await self.kube.request(
                "GET", "/api/v1/pods", params={"fieldSelector": f"spec.nodeName={self.node}"}
            )
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
        slot, devices = found
        if len(devices) != n_devices:
            await self._finish(current, hami.FAILED)
            raise AllocateError("device number not matched")
        if MIG_ALLOCATIONS in _ann(current):
            try:
                await self._realize_mig(current, slot)
            except (AllocateError, KubeError, TranslateError) as exc:
                await self._finish(current, hami.FAILED)
                raise AllocateError(str(exc)) from exc
        ns, name = _key(current)
        try:
            await self._patch_pod(
                ns, name, {self.devices.to_allocate: hami.erase_next(text, self.device_type)}
            )
        except KubeError as exc:
            await self._finish(current, hami.FAILED)
            raise AllocateError(str(exc)) from exc
        await self._try_success(current)
        return current, devices

    async def _realize_mig(self, pod: Mapping[str, Any], slot: int) -> None:
        """HAMi 2.10's MIG ``Allocate`` for one container: each instance the scheduler
        reserved for it is created at exactly its placement (never another), after checking
        that the card registers the profile there and that no instance already on the card
        (of a pod not ended) overlaps it; the pod's annotation then gets the instance's
        identity (``migUUID``, ``gpuInstanceID``, ``computeInstanceID``)."""
        ns, name = _key(pod)
        mine = decode_mig_allocations(
            _ann(pod).get(MIG_ALLOCATIONS, ""), f"pod {ns}/{name}: {MIG_ALLOCATIONS}"
        )
        node = await self.kube.request("GET", f"/api/v1/nodes/{self.node}")
        offered: dict[str, dict[str, set[tuple[int, int]]]] = {}
        for d in json.loads(_ann(node).get(self.devices.register, "") or "[]"):
            offered[str(d.get("id"))] = {
                str(p.get("name")): {
                    (int(x.get("start", 0)), int(x.get("size", 0)))
                    for x in p.get("placements") or ()
                }
                for p in d.get("migProfiles") or ()
            }
        listed = await self.kube.request(
            "GET", "/api/v1/pods", params={"fieldSelector": f"spec.nodeName={self.node}"}
        )
        live: list[MigAllocation] = []
        for other in listed.get("items") or ():
            if (
                _key(other) == (ns, name)
                or (other.get("status") or {}).get("phase") in ("Succeeded", "Failed")
                or (other.get("metadata") or {}).get("deletionTimestamp")
            ):
                continue
            text = _ann(other).get(MIG_ALLOCATIONS, "")
            live += [a for a in decode_mig_allocations(text) if a.mig_uuid]
        live += [a for a in mine if a.mig_uuid]
        out = []
        for a in mine:
            if a.container != slot or a.mig_uuid:
                out.append(a)
                continue
            if a.span not in offered.get(a.uuid, {}).get(a.profile, set()):
                raise AllocateError(f"card {a.uuid} offers no {a.profile} at {a.span}")
            clash = [b for b in live if b.uuid == a.uuid and overlaps(a.span, b.span)]
            if clash:
                raise AllocateError(
                    f"{a.profile} at {a.span} on {a.uuid} overlaps the "
                    f"instance {clash[0].mig_uuid} at {clash[0].span}"
                )
            made = replace(
                a,
                mig_uuid=f"MIG-{a.uuid}-{a.start}-{a.size}",
                gpu_instance=a.start,
                compute_instance=0,
            )
            live.append(made)
            out.append(made)
        self.mig_created += sum(1 for a, b in zip(mine, out, strict=True) if a != b)
        await self._patch_pod(ns, name, {MIG_ALLOCATIONS: encode_mig_allocations(out)})

    async def _patch_pod(self, ns: str, name: str, annotations: dict[str, str]) -> None:
        await self.kube.request(
            "PATCH",
            f"/api/v1/namespaces/{ns}/pods/{name}",
            {"metadata": {"annotations": annotations}},
            content_type=STRATEGIC_PATCH,
        )

    async def _try_success(self, pod: Mapping[str, Any]) -> None:
        ns, name = _key(pod)
        try:
            fresh = await self.kube.request("GET", f"/api/v1/namespaces/{ns}/pods/{name}")
        except KubeError:
            return
        if hami.allocation_done(_ann(fresh).get(self.devices.to_allocate, ""), self.device_type):
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
                await self.kube.request(
                    "PATCH",
                    f"/api/v1/nodes/{self.node}",
                    {"metadata": {"annotations": {hami.NODE_LOCK: None}, "resourceVersion": rv}},
                    content_type=MERGE_PATCH,
                )
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
        await self.kube.request(
            "PATCH",
            f"/api/v1/nodes/{self.node}",
            {"metadata": {"annotations": annotations}},
            content_type=STRATEGIC_PATCH,
        )


class PlainDevicePlugin(HamiDevicePlugin):
    """NVIDIA's stock device plugin: the kubelet's choice of devices, no annotations."""

    async def allocate(self, n_devices: int) -> tuple[dict[str, Any], list[Device]]:
        if not self.alive:
            raise AllocateError(f"device plugin for {self.node} is not running")
        return {}, []

    async def register(self, register_text: str) -> None:
        return None
