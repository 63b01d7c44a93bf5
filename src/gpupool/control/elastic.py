"""Elastic GPU objects in ``gpupool serve``: classes, claims and ElasticGPUs, durable.

``ElasticService`` is what the API calls: each verb changes the ``Binder``
(``gpupool.core.elastic``) that ``ElasticState`` (``control/elastic_state.py``) keeps on the
control plane's own cluster state, so claims and jobs never share a card, and has the change
written to the state file with its events in the same step, before the caller hears of it.

It watches the plane (``ControlPlane.watchers``):

- a new Scheduler (start-up, a queue change) gets a new Binder on its state, into which every
  ElasticGPU takes its card back as it was (``Binder.restore``); ElasticGPUs on a node that is
  away (failed, deleted) fail and their claims are Lost;
- a node that fails fails its ElasticGPUs (``Binder.node_removed``);
- after a cycle, pending Immediate claims are tried again when jobs ended or every
  ``RECONCILE_EVERY_S`` wall seconds (of the plane's ``Clock.monotonic``).

Every method takes the plane's lock.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from gpupool.config.elastic import (
    claim_from_json,
    class_from_json,
    gpu_from_json,
)
from gpupool.control.elastic_documents import (
    API_GROUP,
    CLAIM,
    CLASS,
    GPU,
    flat,
    parse_classes,
)
from gpupool.control.elastic_state import ElasticState
from gpupool.control.plane import ControlPlane, TickResult
from gpupool.core.elastic import (
    Binder,
    ClaimPhase,
    ElasticGPU,
    ElasticGPUClaim,
    ElasticGPUClass,
    Release,
    Source,
)
from gpupool.core.errors import ConfigError, ConflictError, NotFoundError
from gpupool.core.scheduler import Scheduler
from gpupool.store.sqlite import NewEvent

__all__ = ["API_GROUP", "CLAIM", "ElasticService", "parse_classes"]

RECONCILE_EVERY_S = 2.0  # wall seconds between retries of pending claims when nothing ended


class ElasticService:
    """The three kinds of Elastic GPU objects of one control plane, durable."""

    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane
        self._reconciled_at = -math.inf  # never
        with plane.lock:
            self._state = ElasticState(plane)
            self._persist()
            plane.watchers.append(self)

    @property
    def binder(self) -> Binder:
        return self._state.binder

    def _persist(self, events: Iterable[NewEvent] = ()) -> None:
        """Write what changed, with ``events``, in one transaction (undone if it fails)."""
        self._state.persist(events)

    @classmethod
    def of(cls, plane: ControlPlane) -> ElasticService:
        """The plane's service, made (and restored from the state file) on first use."""
        with plane.lock:
            for w in plane.watchers:
                if isinstance(w, ElasticService):
                    return w
            return cls(plane)

    def _event(
        self,
        reason: str,
        kind: str,
        obj: str,
        message: str,
        namespace: str = "",
        warning: bool = False,
    ) -> NewEvent:
        return NewEvent(
            self.plane.clock.now(),
            "Warning" if warning else "Normal",
            reason,
            kind,
            obj,
            namespace,
            message,
        )

    # -- watching the plane --------------------------------------------------------------------

    def scheduler_built(self, scheduler: Scheduler) -> None:
        self._state.rebuild(scheduler)

    def node_failed(self, name: str) -> None:
        lost = self.binder.node_removed(name)
        self._persist(
            [self._event("Lost", CLAIM, c.key, c.message, c.namespace, warning=True) for c in lost]
        )

    def ticked(self, result: TickResult) -> None:
        if not any(c.phase is ClaimPhase.PENDING for c in self.binder.claims()):
            return
        wall = self.plane.clock.monotonic()
        if (
            not (result.finished or result.evicted)
            and wall - self._reconciled_at < RECONCILE_EVERY_S
        ):
            return
        self._reconciled_at = wall
        self._reconcile()

    def _reconcile(self) -> None:
        bound = self.binder.reconcile()
        self._persist([self._bound_event(c) for c in bound])

    def _bound_event(self, c: ElasticGPUClaim) -> NewEvent:
        where = f"node {c.node}" if c.node else "a remote pool"
        return self._event(
            "Bound", CLAIM, c.key, f"bound to {', '.join(c.elastic_gpus)} on {where}", c.namespace
        )

    # -- classes -------------------------------------------------------------------------------

    def classes(self) -> list[ElasticGPUClass]:
        with self.plane.lock:
            return self.binder.classes()

    def get_class(self, name: str) -> ElasticGPUClass:
        with self.plane.lock:
            return self.binder.get_class(name)

    def put_class(
        self, body: Mapping[str, Any], *, create: bool, name: str | None = None
    ) -> ElasticGPUClass:
        """Create (``create``) or replace a class; ConfigError naming the field (nothing
        changes), ConflictError when it exists (create), NotFoundError when not (replace).
        Replacing a class changes how new ElasticGPUs are made; those made already keep
        their policy."""
        cls = class_from_json(flat(CLASS, body))
        if name is not None and cls.name != name:
            rule = f"must match the path ({name})"
            raise ConfigError(
                f"{CLASS}: metadata.name={cls.name!r}: {rule}",
                field="metadata.name",
                value=cls.name,
                rule=rule,
                where=CLASS,
            )
        with self.plane.lock:
            exists = cls.name in {c.name for c in self.binder.classes()}
            if create and exists:
                raise ConflictError(f"{CLASS} {cls.name} already exists")
            if not create and not exists:
                raise NotFoundError(f"{CLASS} {cls.name} not found")
            if exists:
                self.binder.delete_class(cls.name)
            self.binder.add_class(cls)
            self._persist(
                [
                    self._event(
                        "Created" if create else "Updated",
                        CLASS,
                        cls.name,
                        f"provisioner {cls.provisioner.value}, reclaimPolicy "
                        f"{cls.reclaim_policy.value}, bindingMode {cls.binding_mode.value}",
                    )
                ]
            )
            if cls.binding_mode.value == "Immediate":
                self._reconcile()
            return cls

    def delete_class(self, name: str) -> ElasticGPUClass:
        """ConflictError while a claim names it (a claim keeps its class for its life)."""
        with self.plane.lock:
            self.binder.get_class(name)
            users = sorted(c.key for c in self.binder.claims() if c.class_name == name)
            if users:
                raise ConflictError(
                    f"{CLASS} {name} is the class of {len(users)} claim(s) "
                    f"(e.g. {users[0]}); delete them first"
                )
            cls = self.binder.delete_class(name)
            self._persist(
                [self._event("Deleted", CLASS, name, "class deleted; ElasticGPUs it made are kept")]
            )
            return cls

    def seed(self, classes: Iterable[ElasticGPUClass]) -> list[ElasticGPUClass]:
        """Classes for a new state file (see ``parse_classes``); existing ones are kept."""
        made = []
        with self.plane.lock:
            for cls in classes:
                if cls.name not in {c.name for c in self.binder.classes()}:
                    made.append(self.binder.add_class(cls))
            self._persist(
                [
                    self._event(
                        "Created", CLASS, c.name, f"provisioner {c.provisioner.value} (seed)"
                    )
                    for c in made
                ]
            )
        return made

    # -- claims --------------------------------------------------------------------------------

    def claims(self) -> list[ElasticGPUClaim]:
        with self.plane.lock:
            return sorted(self.binder.claims(), key=lambda c: c.key)

    def claim(self, key: str) -> ElasticGPUClaim:
        with self.plane.lock:
            return self.binder.claim(key)

    def submit(self, body: Mapping[str, Any], namespace: str | None = None) -> ElasticGPUClaim:
        """A tenant's claim: stored and, in Immediate mode, bound when it can be.
        InvalidJobError (a claim no class can serve, a TFLOPS figure for a model with no
        known peak, a request the cluster can never hold) or ConflictError (exists), and
        nothing stored."""
        claim = claim_from_json(flat(CLAIM, body, namespace))
        with self.plane.lock:
            if claim.key in {c.key for c in self.binder.claims()}:
                raise ConflictError(f"{CLAIM} {claim.key} already exists")
            c = self.binder.submit(claim)
            events = [self._event("Submitted", CLAIM, c.key, f"class {c.class_name}", c.namespace)]
            if c.phase is ClaimPhase.BOUND:
                events.append(self._bound_event(c))
            self._persist(events)
            return self.binder.claim(c.key)

    def delete_claim(self, key: str) -> Release:
        with self.plane.lock:
            c = self.binder.claim(key)
            release = self.binder.delete_claim(key)
            parts = [f"{len(release.deleted)} ElasticGPU(s) deleted"]
            if release.retained:
                parts.append(f"{', '.join(release.retained)} kept Released (Retain)")
            self._persist([self._event("Deleted", CLAIM, key, "; ".join(parts), c.namespace)])
            if release.deleted:
                self.plane.scheduler.wake()  # parked jobs may fit the freed cards
                self._reconcile()
            return release

    # -- ElasticGPUs ---------------------------------------------------------------------------

    def gpus(self) -> list[ElasticGPU]:
        with self.plane.lock:
            return self.binder.gpus()

    def gpu(self, name: str) -> ElasticGPU:
        with self.plane.lock:
            return self.binder.gpu(name)

    def add_gpu(self, body: Mapping[str, Any]) -> ElasticGPU:
        """An operator's ElasticGPU (Available, holding its card, slice or MIG instance at
        once, or a GPU of a remote pool)."""
        gpu = gpu_from_json(flat(GPU, body))
        with self.plane.lock:
            g = self.binder.add_gpu(gpu)
            where = (
                f"pool {g.pool}" if g.source is Source.REMOTE else f"node {g.node} card {g.card}"
            )
            self._persist([self._event("Created", GPU, g.name, f"{g.source.value} on {where}")])
            self._reconcile()
            return self.binder.gpu(g.name)

    def delete_gpu(self, name: str) -> ElasticGPU:
        with self.plane.lock:
            g = self.binder.delete_gpu(name)
            self._persist(
                [self._event("Deleted", GPU, name, "ElasticGPU deleted; its capacity is free")]
            )
            self.plane.scheduler.wake()
            self._reconcile()
            return g

    def make_available(self, name: str) -> ElasticGPU:
        with self.plane.lock:
            g = self.binder.make_available(name)
            self._persist(
                [self._event("Available", GPU, name, "Released ElasticGPU made Available")]
            )
            self._reconcile()
            return self.binder.gpu(g.name)
