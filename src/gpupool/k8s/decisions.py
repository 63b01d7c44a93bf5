"""What each decision of a cycle does on the API server: ``Bind`` goes to the binder
(after the checks the core cannot make: extended resources other than GPUs, and the exact
MIG placement), ``Park`` to the status writer, ``Evict`` evicts a job's pods, and binds onto
their nodes wait until they are gone. Mixed into
:class:`~gpupool.k8s.controller.Controller`."""

from __future__ import annotations

import contextlib

from gpupool.core.decisions import Bind
from gpupool.core.errors import NotFoundError
from gpupool.core.model import JobId
from gpupool.k8s.jobs import JobInfo
from gpupool.k8s.parts import ControllerParts

__all__ = ["Decisions"]


class Decisions(ControllerParts):
    """The cycle and its decisions (mixed into the controller)."""

    def cycle(self) -> None:
        assert self.sched is not None
        if self._mig_recheck:
            self._mig_recheck = False
            self._choose_mig_again()
        self._apply_usage()
        self._report_binds_in_flight()
        now = self.clock()
        result = self.sched.cycle(now)
        self.stats.cycles += 1
        if self.provisioning is not None:
            self.provisioning.handle(result)
        for bind in result.binds:
            info = self.jobs.get(bind.job)
            if info is None:
                continue
            info.running = True
            self._dispatch(bind, info, now)
        for park in result.parks:
            info = self.jobs.get(park.job)
            if info is None:
                continue
            message = park.status.message or "waiting"
            for key in info.pods:
                self.status.park(key, message)
        for key, form in self.switcher.due(self, result.parks):
            self._spawn(self.switcher.switch(self.kube, self, key, form))
        for ev in result.evicts:
            self._evict_job(ev.job, f"preempted by {ev.preemptor} ({ev.reason})")

    def _evict_job(self, job_id: JobId, reason: str) -> None:
        """The core took a job's cards back for a preemptor: its pods are evicted (they do
        not come back; a Job controller makes new ones, scheduled as new jobs). Binds onto
        their nodes wait until they are gone (see ``_dispatch``), so the preemptor never
        shares a card with a victim still running."""
        assert self.sched is not None
        info = self.jobs.pop(job_id, None)
        with contextlib.suppress(NotFoundError):
            self.sched.cancel(job_id, self.clock())  # the core queued it again
        if info is None:
            return
        for key in info.pods:
            self.pod_job.pop(key, None)
            if key in info.ended:
                continue
            pod = self.pod(key)
            node = str(((pod or {}).get("spec") or {}).get("nodeName") or "")
            self.evicting[key] = node
            self._spawn(self._evict(key, reason))

    async def _evict(self, key: str, reason: str) -> None:
        if await self.binder.evict(key, reason, self._victim_gone):
            self.stats.evictions += 1

    def _dispatch(self, bind: Bind, info: JobInfo, now: float) -> None:
        busy = set(self.evicting.values())
        if any(p.node in busy for p in bind.placements):
            self.deferred[bind.job] = (bind, now)
            return
        for p in bind.placements:
            key = info.task_pod[p.task]
            asked = self.extended_asks.get(key)
            if asked:  # the core does not count them: two pods of a cycle may share the room
                short = self.extended.shortfall(str(p.node), asked, skip=key)
                if short is not None:
                    self._back_off(key)
                    self._bind_failed(key, f"not bound to {p.node}: {short}")
                    continue
                self.extended.take(key, str(p.node), asked)
            if any(s.mig_profile for s in p.shares):
                chosen = self._mig_placements(key, p)
                if isinstance(chosen, str):
                    self._back_off(key)
                    self._bind_failed(key, f"not bound to {p.node}: {chosen}")
                    continue
                if self.mig.take(key, str(p.node), chosen, True):
                    self._mig_changed(str(p.node))
            self.status.bound(key)
            self.binder.submit(self._bind_item(key, p, info, bind.flavor, now, self.pod(key)))

    def _victim_gone(self, key: str) -> None:
        self.evicting.pop(key, None)
        busy = set(self.evicting.values())
        for job_id, (bind, now) in list(self.deferred.items()):
            info = self.jobs.get(job_id)
            if info is None:
                del self.deferred[job_id]
            elif not any(p.node in busy for p in bind.placements):
                del self.deferred[job_id]
                self._dispatch(bind, info, now)
