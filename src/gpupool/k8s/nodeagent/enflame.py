"""Enflame's gcushare device plugin in DRS mode on one emulated node: the ``Allocate`` of the
``enflame.com/drs-gcu`` resource, through the API server as the real plugin does.

Written from the plugin's own source (``gcushare-device-plugin``: ``server.Allocate``,
``getAssumePod``, ``resource.PodResource.GetCandidatePods`` and ``PodExistContainerCanBind``,
``drs.CreateDRSInstance``) and from a DRS pod and node recorded on an S60 card, which HAMi's
``pkg/device/enflame`` was written against. The plugin takes no node lock and reads no
``-to-allocate`` annotation:

1. The kubelet asks for one container at a time, with as many device IDs as the container
   asks ``enflame.com/drs-gcu`` (its profile's slices; the node advertises one device per
   slice).
2. **Which pod**: the pods the API server lists on the node in phase ``Pending`` that ask
   ``enflame.com/drs-gcu`` in some container's limits and carry
   ``enflame.com/gcu-assigned-time``, oldest assigned time first; the first of them with a
   container asking exactly that many slices whose record in ``assigned-containers`` is not
   yet ``allocated`` (containers in spec order; init containers are not looked at). None: the
   call fails (``invalid allocation request: unable to find pod request ...``). So two pods
   asking the same slices can be served each other's record when their assigned times are
   in the other order than the kubelet admits them.
3. **The instance**: on the card ``enflame.com/gcu-assigned-index`` names (one card for the
   whole pod), of the record's ``profileName`` and ``profileID``; the card must offer that
   profile (the node's ``enflame.com/gcu-drs-capacity``) and have its slices free: its
   capacity less the slices of the instances of the pods on the node not ended. The record
   becomes ``allocated: true`` with the instance's ``instanceID`` and ``instanceUUID``; when
   no other container of the pod is left, ``enflame.com/gcu-assigned: "true"`` (one strategic
   merge patch of both annotations).
4. The container gets ``ENFLAME_VISIBLE_DEVICES`` (the card) and ``TOPS_VISIBLE_DEVICES``
   (``DRS-<instanceUUID>``): here, the card and the profile's memory and core percent as a
   :class:`~gpupool.k8s.nodeagent.hami.Device` of type ``Enflame`` for the ledger.
"""

from __future__ import annotations

import json
import math
import re
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gpupool.k8s.kube import STRATEGIC_PATCH, KubeError
from gpupool.k8s.nodeagent.hami import Device
from gpupool.k8s.nodeagent.plugin import AllocateError, HamiDevicePlugin

__all__ = [
    "ASSIGNED_CONTAINERS",
    "DRS_RESOURCE",
    "DrsDevicePlugin",
    "assume_order",
    "bindable_container",
]

DRS_RESOURCE = "enflame.com/drs-gcu"
CAPACITY = "enflame.com/gcu-drs-capacity"
ASSIGNED = "enflame.com/gcu-assigned"
ASSIGNED_TIME = "enflame.com/gcu-assigned-time"
ASSIGNED_INDEX = "enflame.com/gcu-assigned-index"
ASSIGNED_ID = "enflame.com/gcu-assigned-id"
ASSIGNED_CONTAINERS = "assigned-containers"
DEVICE_TYPE = "Enflame"
_PROFILE = re.compile(r"^\s*(\d+)g\.(\d+)gb\s*$", re.IGNORECASE)


def _ann(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return (obj.get("metadata") or {}).get("annotations") or {}


def _limit(container: Mapping[str, Any]) -> object | None:
    return ((container.get("resources") or {}).get("limits") or {}).get(DRS_RESOURCE)


def _slices(container: Mapping[str, Any]) -> int:
    """The container's ``enflame.com/drs-gcu`` limit (0 when it has none)."""
    raw = _limit(container)
    try:
        return int(str(raw)) if raw is not None else 0
    except ValueError:
        return 0


def _assume_time(pod: Mapping[str, Any]) -> int:
    """``GetAssumeTimeFromPodAnnotation``: the assigned time, 0 when absent or unreadable."""
    try:
        return int(_ann(pod).get(ASSIGNED_TIME, "0"))
    except ValueError:
        return 0


def assume_order(pods: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """``GetCandidatePods``: the pods asking DRS slices that HAMi (or Enflame's scheduler)
    has assigned, oldest assigned time first (ties keep the list's order)."""
    out = [
        p
        for p in pods
        if sum(_slices(c) for c in (p.get("spec") or {}).get("containers") or ()) > 0
        and ASSIGNED_TIME in _ann(p)
    ]
    return sorted(out, key=_assume_time)


def _records(pod: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    text = _ann(pod).get(ASSIGNED_CONTAINERS)
    if not text:
        return {}
    try:
        records = json.loads(text)
    except json.JSONDecodeError as exc:
        meta = pod.get("metadata") or {}
        raise AllocateError(
            f"pod {meta.get('namespace')}/{meta.get('name')}: "
            f"{ASSIGNED_CONTAINERS}={text!r} is not JSON ({exc.msg})"
        ) from None
    if not isinstance(records, dict):
        raise AllocateError(f"{ASSIGNED_CONTAINERS}={text!r}: expected an object by container")
    return {str(k): dict(v) if isinstance(v, dict) else {} for k, v in records.items()}


def bindable_container(pod: Mapping[str, Any], slices: int) -> tuple[str, bool] | None:
    """``PodExistContainerCanBind``'s choice: (the first container asking ``slices`` whose
    record is not yet allocated, whether it is the pod's last one left); None when none."""
    records = _records(pod)
    asking = done = 0
    chosen = ""
    for c in (pod.get("spec") or {}).get("containers") or ():
        if _limit(c) is None:
            continue
        n = _slices(c)
        asking += 1
        name = str(c.get("name", ""))
        if records.get(name, {}).get("allocated") is True:
            done += 1
            continue
        if n == slices and not chosen:
            chosen = name
    if not chosen:
        return None
    return chosen, asking - done == 1


@dataclass(frozen=True, slots=True)
class _DrsCard:
    capacity: int
    profiles: Mapping[str, str]  # name -> ID
    largest: int  # slices of the whole card


def _cards(node: Mapping[str, Any]) -> dict[str, _DrsCard]:
    """The node's DRS cards by index, as its ``enflame.com/gcu-drs-capacity`` lists them."""
    try:
        spec = json.loads(_ann(node).get(CAPACITY, "") or "{}")
    except json.JSONDecodeError:
        return {}
    profiles = {str(k): str(v) for k, v in (spec.get("profiles") or {}).items()}
    largest = max((int(m.group(1)) for n in profiles if (m := _PROFILE.match(n))), default=0)
    out = {}
    for pos, d in enumerate(spec.get("devices") or ()):
        try:
            capacity = int(str(d.get("capacity")))
        except ValueError:
            capacity = 0
        out[str(d.get("index", pos))] = _DrsCard(capacity, profiles, largest)
    return out


class DrsDevicePlugin(HamiDevicePlugin):
    """Enflame's gcushare device plugin (DRS mode) of one node."""

    async def _candidates(self) -> list[Mapping[str, Any]]:
        try:
            listed = await self.kube.request(
                "GET",
                "/api/v1/pods",
                params={"fieldSelector": f"spec.nodeName={self.node},status.phase=Pending"},
            )
        except KubeError as exc:
            raise AllocateError(str(exc)) from exc
        return assume_order(listed.get("items") or [])

    async def allocate(self, n_devices: int) -> tuple[dict[str, Any], list[Device]]:
        if not self.alive:
            raise AllocateError(f"device plugin for {self.node} is not running")
        self.via = "assume-time"
        for pod in await self._candidates():
            found = bindable_container(pod, n_devices)
            if found is None:
                continue
            container, last = found
            device = await self._bind(dict(pod), container, last)
            return dict(pod), [device]
        raise AllocateError(
            f"invalid allocation request: unable to find pod request {DRS_RESOURCE}: {n_devices}"
        )

    async def _bind(self, pod: dict[str, Any], container: str, last: bool) -> Device:
        """The record of ``container`` made allocated, with a new instance of its profile on
        the pod's card, in one patch of the pod."""
        meta = pod.get("metadata") or {}
        ns, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
        records = _records(pod)
        record = records.setdefault(container, {})
        index = _ann(pod).get(ASSIGNED_INDEX) or _ann(pod).get(ASSIGNED_ID, "")
        profile = str(record.get("profileName") or "")
        instance = await self._create_instance(index, profile, str(record.get("profileID", "")))
        record.update(
            {
                "allocated": True,
                "instanceID": instance,
                "instanceUUID": str(
                    uuid.uuid5(uuid.NAMESPACE_URL, f"{self.node}/{index}/{instance}")
                ),
            }
        )
        patch = {
            ASSIGNED_CONTAINERS: json.dumps(records, sort_keys=True),
            ASSIGNED: "true" if last else _ann(pod).get(ASSIGNED, "false"),
        }
        try:
            await self.kube.request(
                "PATCH",
                f"/api/v1/namespaces/{ns}/pods/{name}",
                {"metadata": {"annotations": patch}},
                content_type=STRATEGIC_PATCH,
            )
        except KubeError as exc:
            raise AllocateError(str(exc)) from exc
        m = _PROFILE.match(profile)
        slices, gb = (int(m.group(1)), int(m.group(2))) if m else (0, 0)
        card = (await self._node_cards()).get(index)
        largest = card.largest if card is not None else 0
        cores = math.ceil(slices * 100 / largest) if largest else 0
        return Device(f"{self.node}-enflame-drs-{index}", DEVICE_TYPE, gb * 1024, cores)

    async def _node_cards(self) -> dict[str, _DrsCard]:
        try:
            node = await self.kube.request("GET", f"/api/v1/nodes/{self.node}")
        except KubeError as exc:
            raise AllocateError(str(exc)) from exc
        return _cards(node)

    async def _create_instance(self, index: str, profile: str, profile_id: str) -> str:
        """``CreateDRSInstance``: a new instance of ``profile`` on card ``index``; its ID.
        Refused when the card does not offer the profile (with that ID) or lacks the slices
        (those of the instances the node's pods not ended hold)."""
        card = (await self._node_cards()).get(index)
        if card is None:
            raise AllocateError(f"create DRS instance: no card with index {index!r} on {self.node}")
        shape = _PROFILE.match(profile)
        if card.profiles.get(profile) != profile_id or shape is None:
            raise AllocateError(
                f"create DRS instance: card {index} offers no profile "
                f"{profile!r} with ID {profile_id!r}"
            )
        want = int(shape.group(1))
        held, ids = await self._instances(index)
        if held + want > card.capacity:
            raise AllocateError(
                f"create DRS instance: card {index} has "
                f"{card.capacity - held} of {card.capacity} slices free, "
                f"{profile} needs {want}"
            )
        return str(next(i for i in range(len(ids) + 1) if str(i) not in ids))

    async def _instances(self, index: str) -> tuple[int, set[str]]:
        """(slices held, instance IDs) on card ``index`` by pods on the node not ended."""
        try:
            listed = await self.kube.request(
                "GET", "/api/v1/pods", params={"fieldSelector": f"spec.nodeName={self.node}"}
            )
        except KubeError as exc:
            raise AllocateError(str(exc)) from exc
        held, ids = 0, set()
        for other in listed.get("items") or ():
            meta = other.get("metadata") or {}
            if (other.get("status") or {}).get("phase") in ("Succeeded", "Failed") or meta.get(
                "deletionTimestamp"
            ):
                continue
            ann = _ann(other)
            if (ann.get(ASSIGNED_INDEX) or ann.get(ASSIGNED_ID, "")) != index:
                continue
            for record in _records(other).values():
                if record.get("instanceID") is None:
                    continue
                m = _PROFILE.match(str(record.get("profileName", "")))
                held += int(m.group(1)) if m else 0
                ids.add(str(record["instanceID"]))
        return held, ids

    async def register(self, register_text: str) -> None:
        """``PatchDRSGCUCapacityToNode``: the capacity annotation only (no HAMi handshake)."""
        if not register_text:
            return
        await self.kube.request(
            "PATCH",
            f"/api/v1/nodes/{self.node}",
            {"metadata": {"annotations": {CAPACITY: register_text}}},
            content_type=STRATEGIC_PATCH,
        )
