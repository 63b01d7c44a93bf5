"""Kueue's objects in the cluster as gpupool's queue configuration, applied as they change.

Where the API server serves ``kueue.x-k8s.io`` (Kueue's CRDs are installed), gpupool reads its
queues from Kueue's own objects: ResourceFlavor, Cohort, ClusterQueue, LocalQueue,
WorkloadPriorityClass, AdmissionCheck and ProvisioningRequestConfig, in the version the
server prefers. :class:`KueueSource` watches them (one informer per kind) and, a short while
after any change, builds the configuration again (``objects.py``) and applies it to the
running scheduler in place (``Scheduler.update_config``): no informer or server restarts, the
Lease is kept, running jobs keep their cards and pending jobs their place.

One bad object never stops scheduling. The object is marked, and the configuration keeps its
last applied version (or goes on without it). What each object is told, written by the leader
only and only when it changes:

- a status condition ``gpupool.io/Accepted``: ``True`` (reason ``Applied``) or ``False``
  (reason ``InvalidField``, ``field=value rule`` as the message, saying whether the last
  applied version stays in use), beside the conditions Kueue's controllers write, which are
  kept; and an Event (``Warning InvalidConfiguration``, or ``Normal Applied`` when an object
  becomes good again);
- a status condition ``gpupool.io/FieldsIgnored`` (``True`` with reason ``NotActedOn`` and
  each ``path: reason``, else ``False``) and a ``Normal FieldsIgnored`` Event. A
  ClusterQueue's ``namespaceSelector`` is acted on here (``pods.py``) while Namespaces are
  watched, and then not reported.

WorkloadPriorityClass has no status: it gets the Events only. Events of cluster-scoped objects
go to the ``default`` namespace, as ``kubectl describe`` looks for them there.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpupool.config.documents import field_text
from gpupool.core.errors import ConfigError, ConflictError
from gpupool.core.quota import QueueConfig
from gpupool.k8s.informer import Informer
from gpupool.k8s.kube import MERGE_PATCH, Kube, KubeError
from gpupool.k8s.kueue.objects import GROUP, KINDS, Built, Key, QueueObjects
from gpupool.k8s.kueue.pods import KueueController
from gpupool.k8s.lease import micro_time
from gpupool.k8s.reconfigure import apply_config

if TYPE_CHECKING:
    from gpupool.k8s.controller import Controller

__all__ = ["ACCEPTED", "IGNORED", "KueueSource", "served_version"]

log = logging.getLogger("gpupool.k8s.kueue")

ACCEPTED = "gpupool.io/Accepted"
IGNORED = "gpupool.io/FieldsIgnored"
_NO_STATUS = ("WorkloadPriorityClass",)


async def served_version(kube: Kube) -> tuple[str, dict[str, str]] | None:
    """(version, kind -> plural) of Kueue's API group as the server prefers it, with the
    queue kinds it serves; None when the group is not served (Kueue is not installed)."""
    try:
        group = await kube.request("GET", f"/apis/{GROUP}")
    except KubeError as exc:
        if exc.status == 404:
            return None
        raise
    version = str(((group.get("preferredVersion") or {}).get("version")) or "")
    if not version:
        return None
    body = await kube.request("GET", f"/apis/{GROUP}/{version}")
    names = {r.get("name") for r in body.get("resources") or ()}
    kinds: dict[str, str] = {}
    for kind, plural in KINDS.items():
        if plural not in names:
            continue
        try:  # may this service account read them? (RBAC: deploy/)
            await kube.request("GET", f"/apis/{GROUP}/{version}/{plural}", params={"limit": "1"})
        except KubeError as exc:
            if exc.status != 403:
                raise
            log.warning("Kueue's %s are served but not readable (%s): left out", plural, exc)
            continue
        kinds[kind] = plural
    if "ClusterQueue" not in kinds:
        if "clusterqueues" in names:
            log.warning(
                "Kueue's ClusterQueues are not readable: gpupool's own queue objects are used"
            )
        return None
    return version, kinds


@dataclass(frozen=True, slots=True)
class _Report:
    """What one object is told: its two conditions, each (status, reason, message)."""

    accepted: tuple[str, str, str]
    ignored: tuple[str, str, str]


class KueueSource:
    """Kueue's queue objects, watched; the configuration built from them and applied."""

    def __init__(
        self,
        kube: Kube,
        version: str,
        kinds: Mapping[str, str],
        *,
        group: str = GROUP,
        component: str = "gpupool",
        identity: str = "",
        debounce_s: float = 0.2,
        interval_s: float = 1.0,
    ) -> None:
        """``group``: the API group read; gpupool's own (``gpupool.io``, whose kinds have the
        same shapes) may be read the same way."""
        self.kube = kube
        self.group = group
        self.version = version
        self.kinds = dict(kinds)
        self.component = component
        self.identity = identity
        self.debounce_s = debounce_s
        self.interval_s = interval_s
        self.store = QueueObjects()
        self.config: QueueConfig | None = None
        self.built: Built | None = None
        self.controller: KueueController | None = None
        self.applied = 0  # configurations applied to a running scheduler, in place
        self.informers = {
            kind: Informer(
                kube, f"/apis/{group}/{version}/{plural}", self._on_object, name=f"kueue {plural}"
            )
            for kind, plural in self.kinds.items()
        }
        self._tasks: list[asyncio.Task[None]] = []
        self._changed = asyncio.Event()
        self._wanted: dict[Key, _Report] = {}
        self._written: dict[Key, _Report] = {}
        self._uids: dict[Key, str] = {}

    @classmethod
    async def discover(cls, kube: Kube, **kwargs: Any) -> KueueSource | None:
        """A source for the cluster's Kueue objects; None when Kueue's API is not served."""
        served = await served_version(kube)
        if served is None:
            return None
        return cls(kube, served[0], served[1], **kwargs)

    # -- watching ----------------------------------------------------------------------------

    def _on_object(self, event: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        if event == "DELETED":
            key = self.store.delete(obj)
            self._uids.pop(key, None)
            self._written.pop(key, None)
        else:
            if old is not None and _intent(old) == _intent(obj):
                return  # a status write (Kueue's or ours): nothing to apply
            key = self.store.put(obj)
            self._uids[key] = str((obj.get("metadata") or {}).get("uid") or "")
        self._changed.set()

    async def start(self) -> QueueConfig:
        """Watch every kind; once all are listed, the first configuration."""
        self._tasks = [asyncio.create_task(i.run()) for i in self.informers.values()]
        for i in self.informers.values():
            await i.synced.wait()
        self._changed.clear()
        if self._build() is None:
            self.config = QueueConfig()  # nothing valid yet: no queues until there is
        assert self.config is not None
        return self.config

    def attach(self, controller: Controller) -> None:
        """The controller whose scheduler changes are applied to (its config must be the one
        :meth:`start` returned): a :class:`KueueController`, which reads pods as Kueue
        does."""
        if not isinstance(controller, KueueController):
            raise TypeError(f"Kueue's objects need a KueueController, not {type(controller)}")
        self.controller = controller
        self.component = controller.opt.scheduler_name
        self.identity = controller.opt.identity
        controller.selectors = self._selectors()

    def _selectors(self) -> dict[str, Any]:
        """ClusterQueue -> its ``spec.namespaceSelector`` (None when unset), as applied."""
        return {
            obj.obj.name: (obj.doc.body.get("spec") or {}).get("namespaceSelector")
            for key, obj in self.store.applied.items()
            if key[0] == "ClusterQueue"
        }

    async def run(self) -> None:
        """Apply changes and write what objects are told, until cancelled (then stop
        watching)."""
        if not self._tasks:
            await self.start()
        try:
            while True:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), self.interval_s)
                if self._changed.is_set():
                    await asyncio.sleep(self.debounce_s)  # a burst of edits: one build
                    self._changed.clear()
                    self.apply()
                if self.controller is None or self.controller.is_leader():
                    await self.report()
        finally:
            for t in self._tasks:
                t.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)

    # -- applying ----------------------------------------------------------------------------

    def _build(self) -> Built | None:
        keep: list[Key] = []
        ctl = self.controller
        if ctl is not None and ctl.sched is not None:
            keep = [("ClusterQueue", q) for q in {r.queue for r in ctl.sched.running()}]
        try:
            built = self.store.build(keep)
        except ConfigError as exc:
            log.error("Kueue objects: no valid configuration (%s); the last one stays", exc)
            return None
        self.built = built
        self._plan(built)
        if self.config is None:
            self.config = built.config
        return built

    def apply(self) -> bool:
        """Build the configuration from the objects and apply it in place; whether it
        changed. A configuration the scheduler refuses leaves the last one in use."""
        previous = self.store.applied
        built = self._build()
        if built is None or built.config == self.config:
            return False
        ctl = self.controller
        if ctl is not None:
            selectors, ctl.selectors = ctl.selectors, self._selectors()
            try:
                apply_config(ctl, built.config, "Kueue objects")
            except (ConfigError, ConflictError):
                ctl.selectors = selectors
                self.store.applied = previous
                return False
            if ctl.sched is not None:
                self.applied += 1
        self.config = built.config
        return True

    # -- what objects are told ---------------------------------------------------------------

    def _plan(self, built: Built) -> None:
        enforced = self.controller is not None and self.controller.enforce_selectors
        wanted: dict[Key, _Report] = {}
        for key in self.store.objects:
            problem = built.problems.get(key)
            in_use = problem is None or key in built.reverted
            if problem is not None:
                kept = (
                    "; its last applied version stays in use"
                    if key in built.reverted
                    else "; it is not in use"
                )
                accepted = ("False", "InvalidField", _field_message(problem) + kept)
            else:
                accepted = ("True", "Applied", "applied to gpupool's queue configuration")
            items = [
                i
                for i in built.ignored.get(key, ())
                if in_use and not (enforced and i.path == "spec.namespaceSelector")
            ]
            if items:
                ignored = ("True", "NotActedOn", "; ".join(f"{i.path}: {i.reason}" for i in items))
            else:
                ignored = ("False", "AllActedOn", "gpupool acts on every field given")
            wanted[key] = _Report(accepted, ignored)
        self._wanted = wanted

    async def report(self) -> int:
        """Write the conditions and Events that changed; how many objects were written."""
        if self.built is not None:
            self._plan(self.built)  # whether selectors are enforced may have changed
        n = 0
        for key, want in list(self._wanted.items()):
            done = self._written.get(key)
            if done == want:
                continue
            events: list[tuple[str, str, str]] = []
            if done is None or done.accepted != want.accepted:
                if want.accepted[0] == "False":
                    events.append(("Warning", "InvalidConfiguration", want.accepted[2]))
                elif done is not None:
                    events.append(("Normal", "Applied", "valid again, and applied"))
            if want.ignored[0] == "True" and (done is None or done.ignored != want.ignored):
                events.append(("Normal", "FieldsIgnored", want.ignored[2]))
            try:
                await self._write_status(key, want)
                for ev in events:
                    await self._event(key, *ev)
            except KubeError as exc:
                if exc.status != 404:
                    log.warning("Kueue %s %s: %s", key[0], key[1], exc)
                continue
            self._written[key] = want
            n += 1
        return n

    def _path(self, key: Key) -> str:
        kind, name = key
        plural = self.kinds[kind]
        base = f"/apis/{self.group}/{self.version}"
        if "/" in name:
            ns, name = name.split("/", 1)
            return f"{base}/namespaces/{ns}/{plural}/{name}"
        return f"{base}/{plural}/{name}"

    async def _write_status(self, key: Key, want: _Report) -> None:
        if key[0] in _NO_STATUS:
            return
        path = self._path(key)
        for _ in range(5):
            obj = await self.kube.request("GET", path)
            meta = obj.get("metadata") or {}
            status = obj.get("status") or {}
            conditions = [
                c
                for c in status.get("conditions") or ()
                if c.get("type") not in (ACCEPTED, IGNORED)
            ]
            old = {c.get("type"): c for c in status.get("conditions") or ()}
            for type_, (st, reason, message) in (
                (ACCEPTED, want.accepted),
                (IGNORED, want.ignored),
            ):
                prior = old.get(type_) or {}
                since = prior.get("lastTransitionTime") if prior.get("status") == st else None
                conditions.append(
                    {
                        "type": type_,
                        "status": st,
                        "reason": reason,
                        "message": message[:32768],
                        "observedGeneration": meta.get("generation") or 0,
                        "lastTransitionTime": since or micro_time()[:19] + "Z",
                    }
                )
            try:
                await self.kube.request(
                    "PATCH",
                    f"{path}/status",
                    {
                        "metadata": {"resourceVersion": meta.get("resourceVersion")},
                        "status": {"conditions": conditions},
                    },
                    content_type=MERGE_PATCH,
                )
                return
            except KubeError as exc:
                if exc.status != 409:
                    raise
        raise KubeError(
            409, "Conflict", "status kept changing under gpupool's write", f"PATCH {path}/status"
        )

    async def _event(self, key: Key, type_: str, reason: str, message: str) -> None:
        kind, name = key
        ns, _, short = name.rpartition("/")
        now = micro_time()[:19] + "Z"
        involved = {
            "apiVersion": f"{self.group}/{self.version}",
            "kind": kind,
            "name": short,
            "uid": self._uids.get(key, ""),
        }
        if ns:
            involved["namespace"] = ns
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{short}.", "namespace": ns or "default"},
            "involvedObject": involved,
            "reason": reason,
            "message": message[:1024],
            "type": type_,
            "source": {"component": self.component},
            "reportingComponent": self.component,
            "reportingInstance": self.identity,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        await self.kube.request("POST", f"/api/v1/namespaces/{ns or 'default'}/events", body)


def _intent(obj: Mapping[str, Any]) -> tuple[Any, ...]:
    """What the user wrote: what a change must touch to matter."""
    return obj.get("spec"), obj.get("value"), obj.get("description")


def _field_message(exc: ConfigError) -> str:
    """``field=value rule`` when the error is structured, else its text without the
    document's place (which means nothing for an API object)."""
    if exc.field is not None and exc.rule is not None:
        return field_text(exc.field, exc.value, exc.rule)
    text = str(exc)
    if exc.where and text.startswith(exc.where):
        text = text[len(exc.where) :].lstrip(": ")
    return text
