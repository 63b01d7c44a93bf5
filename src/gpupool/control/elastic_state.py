"""The Elastic GPU objects of ``gpupool serve`` in the state file: the ``Binder`` that holds
them, rebuilt from what the file holds, and each change written with its events.

``ElasticState`` keeps a ``Binder`` (``gpupool.core.elastic``) on the control plane's cluster
state and what the file holds of it (``objects`` table: kinds ``ElasticGPUClass``,
``ElasticGPUClaim`` keyed ``<namespace>/<name>``, ``ElasticGPU``). ``persist`` writes what
changed since the last write, with its events, in one transaction through the plane's journal;
a change whose write fails is undone: the binder is rebuilt from what the file holds. Its
caller (``ElasticService``) holds the plane's lock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from gpupool.config.elastic import (
    claim_from_json,
    claim_to_json,
    class_from_json,
    class_to_json,
    gpu_from_json,
    gpu_to_json,
)
from gpupool.control.elastic_documents import CLAIM, CLASS, GPU, KINDS, Key
from gpupool.control.journal import Changes
from gpupool.control.plane import ControlPlane
from gpupool.core.elastic import (
    TASK_PREFIX,
    Binder,
    GpuPhase,
    Source,
    recover,
)
from gpupool.core.model import JobId, TaskId
from gpupool.core.scheduler import Scheduler
from gpupool.store.sqlite import NewEvent

__all__ = ["ElasticState"]


class ElasticState:
    """The binder of one control plane and what the state file holds of it."""

    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane
        saved = self._read_store()
        self._saved: dict[Key, dict[str, Any]] = saved
        self.binder = self._binder_for(plane.scheduler, saved)

    def rebuild(self, scheduler: Scheduler) -> None:
        """A new Binder on ``scheduler``'s state, every ElasticGPU taking its card back."""
        self.binder = self._binder_for(scheduler, self._objects())

    def _read_store(self) -> dict[Key, dict[str, Any]]:
        return {(k, n): dict(b) for k, n, b, _ in self.plane.store.objects() if k in KINDS}

    def _objects(self) -> dict[Key, dict[str, Any]]:
        b = self.binder
        out: dict[Key, dict[str, Any]] = {}
        out.update({(CLASS, c.name): class_to_json(c) for c in b.classes()})
        out.update({(CLAIM, c.key): claim_to_json(c) for c in b.claims()})
        out.update({(GPU, g.name): gpu_to_json(g) for g in b.gpus()})
        return out

    def _binder_for(self, sched: Scheduler, saved: Mapping[Key, Mapping[str, Any]]) -> Binder:
        """A Binder on ``sched``'s state holding the objects of ``saved``, every ElasticGPU on
        its card again. One on a node that is not there fails (its claim is Lost); one whose
        card a job holds (never, unless the file was edited) fails too, with the reason."""
        binder = sched.new_binder(
            class_from_json(body) for (kind, _), body in sorted(saved.items()) if kind == CLASS
        )
        claims = [claim_from_json(b, with_status=True) for (k, _), b in saved.items() if k == CLAIM]
        gpus = [gpu_from_json(b) for (k, _), b in sorted(saved.items()) if k == GPU]
        recover(binder, gpus, claims)
        return binder

    def persist(self, events: Iterable[NewEvent] = ()) -> None:
        """Write what changed since the last write, with ``events``, in one transaction; if
        that fails, the binder goes back to what the file holds and the error goes on."""
        self._fix_owners()
        now = self._objects()
        changed = {k: v for k, v in now.items() if self._saved.get(k) != v}
        gone = [k for k in self._saved if k not in now]
        events = list(events)
        if not changed and not gone and not events:
            return
        try:
            writes = Changes(events=events)
            writes.objects.update(changed)
            writes.objects.update((k, None) for k in gone)
            self.plane.journal.commit(writes)
        except BaseException:
            self._forget_cards()
            self.binder = self._binder_for(self.plane.scheduler, self._saved)
            raise
        self._saved = now

    def _forget_cards(self) -> None:
        state = self.binder.state
        for p in list(state.placements()):
            if p.task.startswith(TASK_PREFIX):
                state.forget(p.task)

    def _fix_owners(self) -> None:
        """Each ElasticGPU's placement names its claim as its job (``elasticgpu/<claim key>``,
        or ``elasticgpu/static`` while unbound), so the card view shows who holds it; an
        ElasticGPU bound after it was made (a static one, a released one made available) is
        moved to its claim here."""
        state = self.binder.state
        for g in self.binder.gpus():
            if g.source is Source.REMOTE or g.phase is GpuPhase.FAILED:
                continue
            task = TaskId(f"{TASK_PREFIX}{g.name}")
            p = state.placement(task)
            want = JobId(f"{TASK_PREFIX}{g.claim_ref.key if g.claim_ref else 'static'}")
            if p is None or p.job == want:
                continue
            state.forget(task)
            state.assume(replace(p, job=want))
            state.confirm(task)
