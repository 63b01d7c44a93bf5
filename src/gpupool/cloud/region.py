"""A simulated cloud: node pools that scale from zero, for ProvisioningRequests.

One region, described by a ``kind: Cloud`` document (``gpupool.cloud.spec``), run by the
simulator (``gpupool sim scenario``) and by ``gpupool serve --cloud``. What it models, in the
caller's seconds:

- **node pools** per GPU model (a node template: CPU, memory, labels, GPUs), each in one or
  more **zones**, each zone with a most nodes it can hold; every pool starts with no node;
- a **regional GPU quota**: the GPUs of nodes alive or being made, at most ``gpuQuota``;
- a request whose pod set no pool can hold, or that needs more nodes than a zone or the quota
  allow, **fails** at once; any other is **accepted** and queued;
- queued requests are tried in order, each in its pool's zones, the one with most room first;
  a request is **provisioned atomically**: all its nodes in one zone, made together after a
  **provisioning delay** (drawn per request) and joining the cluster at one instant, or none.
  Capacity is committed when provisioning starts, so two requests never count on one node;
- **stock-outs**: windows in which a zone of a pool makes no node (seeded: a Poisson process
  of outages per zone, ``stockouts.ratePerHour``, each lasting ``stockouts.duration``);
- a request not provisioned within ``queueTimeout`` **fails** (``CapacityNotAvailable``);
- provisioned nodes carry the request's label and a NoSchedule taint (``REQUEST_LABEL``), so
  only the pods pinned to them run there; at ``maxRunDurationSeconds`` after provisioning the
  cloud **revokes** the capacity (CapacityRevoked) and removes the nodes and their pods;
- a request deleted, failed, expired or done with no longer protects its nodes: each is
  **removed once idle** for ``scaleDownAfter``;
- **requests made by hand** (``requests``): bookings no job was made for; nobody consumes
  them, so they show a booking expiring (10 minutes after Provisioned) and its nodes going.

The cloud drives the core through the Scheduler's facts (``provisioning_accepted`` /
``_provisioned`` / ``_failed`` / ``_revoked``) and adds and removes nodes through its ``Host``
(the simulator's Scheduler itself; in ``serve`` the control plane, which writes them to its
state file and requeues the jobs of a removed node). It reads the cycle's decisions
(``CycleResult.provision`` and ``deprovision``). ``snapshot()`` and ``restore()`` carry its
state (requests, timers, the random generator) across a restart of ``serve``. It records,
per request, when it was made, provisioned, consumed and ended, and the GPU-time its nodes sat
booked but unused: the figures the scenario report prints. Which pool holds a request and
the nodes a pool makes are ``gpupool.cloud.pools``; the outage windows, ``gpupool.cloud.stockouts``;
the records, ``gpupool.cloud.run``.
"""

from __future__ import annotations

import contextlib
import math
from typing import TYPE_CHECKING, Any

import numpy as np

from gpupool.cloud.pools import match_request, pool_node, refusal, reserving_pod_set
from gpupool.cloud.run import CloudRun, Host, RequestRecord, SchedulerHost
from gpupool.cloud.spec import CloudSpec
from gpupool.cloud.stockouts import is_stocked_out, outage_windows
from gpupool.core.decisions import CycleResult
from gpupool.core.errors import ConflictError, NotFoundError
from gpupool.core.model import JobId, NodeName
from gpupool.core.provisioning import BOOKING_S, ProvisioningRequest
from gpupool.kernel import EventQueue

if TYPE_CHECKING:
    from gpupool.core.scheduler import Scheduler

__all__ = ["Cloud", "CloudRun", "Host", "RequestRecord", "SchedulerHost"]

MANUAL_NAMESPACE = "reservations"


_MANUAL, _READY, _REVOKE, _TIMEOUT, _IDLE, _TRY = range(6)


class Cloud:
    """The simulated region, bound to one Scheduler for one run."""

    def __init__(self, spec: CloudSpec, host: Host, seed: int, duration_s: float) -> None:
        """Stock-outs are drawn for ``duration_s`` seconds from 0."""
        self.spec = spec
        self.host = host
        self.rng = np.random.default_rng([seed, 0x5C10D])
        self.run = CloudRun(spec)
        self._events: EventQueue[tuple[int, str]] = EventQueue()  # (what, request or node)
        self._serial = 0
        self._queue: list[str] = []  # accepted, not provisioning yet, in order
        self._zone_nodes: dict[tuple[str, str], int] = {}  # nodes alive or being made
        self._gpus_held = 0  # against the regional quota
        self._alive_gpus = 0
        self._node_req: dict[str, str] = {}  # node -> request key
        self._protected: set[str] = set()  # nodes held for a live request
        self._deadline_seen = -math.inf
        for m in spec.requests:
            self._push(m.at_s, _MANUAL, m.name)
        for pi, pool in enumerate(spec.pools):
            for zi, zone in enumerate(pool.zones):
                windows = outage_windows(spec, seed, pi, zi, duration_s)
                self.run.stockouts[f"{pool.name}/{zone}"] = windows
                for _, end in windows:
                    self._push(end, _TRY, "")
        self.run.note_capacity(0.0, self._alive_gpus)

    @property
    def sched(self) -> Scheduler:
        return self.host.scheduler

    def _push(self, t: float, kind: int, key: str) -> None:
        self._events.schedule(t, (kind, key))

    # -- the loop's side ----------------------------------------------------------------------

    def next_event_s(self) -> float:
        """The next time the cloud acts, or a booking in the core expires (a cycle must run
        then to see it)."""
        t = self._events.peek()
        checks = self.sched.checks
        if checks is not None:
            d = checks.next_deadline()
            if d is not None and d > self._deadline_seen:
                t = min(t, d)
        return t

    def advance(self, now: float) -> list[JobId]:
        """Handle everything due at ``now``; returns jobs whose nodes were taken back (they
        are pending again)."""
        checks = self.sched.checks
        if checks is not None:
            d = checks.next_deadline()
            if d is not None and d <= now:
                self._deadline_seen = max(self._deadline_seen, d)
        requeued: list[JobId] = []
        for _, (kind, key) in self._events.pop_until(now):
            if kind == _MANUAL:
                self._manual(key, now)
            elif kind == _READY:
                self._ready(key, now)
            elif kind == _REVOKE:
                requeued += self._revoke(key, now)
            elif kind == _TIMEOUT:
                self._timeout(key, now)
            elif kind == _IDLE:
                requeued += self._idle(key, now)
            self._try_queue(now)
        return requeued

    def on_cycle(self, result: CycleResult, now: float) -> None:
        """Carry out a cycle's provisioning decisions; note bookings its binds consumed."""
        for req in result.provision:
            self._new(req, now, manual=False)
        for key in result.deprovision:
            self._release(key, now)
        for rec in self.run.requests.values():
            if rec.outcome != "booked":
                continue
            live = self.sched.provisioning_request(rec.key)
            if live is not None and live.consumed_s is not None:
                rec.consumed_s = live.consumed_s
                rec.outcome = "consumed"
        self._try_queue(now)

    def finish(self, end_s: float) -> CloudRun:
        for rec in self.run.requests.values():
            if rec.ended_s is None and rec.outcome == "booked":
                rec.ended_s = end_s
        self.run.note_capacity(end_s, self._alive_gpus)
        return self.run

    # -- across a restart ---------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """Everything the cloud needs to go on after a restart, as JSON: its requests, what
        it has committed in each zone, its timers and its random generator. Stock-out windows
        are not in it: they follow from the seed."""
        return {
            "requests": [r.to_json() for r in self.run.requests.values()],
            "heap": [[t, seq, kind, key] for t, seq, (kind, key) in self._events.entries()],
            "seq": self._events.last_id,
            "serial": self._serial,
            "queue": list(self._queue),
            "zoneNodes": [[p, z, n] for (p, z), n in sorted(self._zone_nodes.items())],
            "gpusHeld": self._gpus_held,
            "aliveGpus": self._alive_gpus,
            "nodeRequest": dict(self._node_req),
            "protected": sorted(self._protected),
            "deadlineSeen": None if self._deadline_seen == -math.inf else self._deadline_seen,
            "nodesMade": self.run.nodes_made,
            "rng": self.rng.bit_generator.state,
        }

    def restore(self, snap: dict[str, Any]) -> None:
        """Go on from ``snapshot()``'s output (taken with the same spec and seed)."""
        records = [RequestRecord.from_json(r) for r in snap["requests"]]
        self.run.requests = {r.key: r for r in records}
        self._events = EventQueue.restored(
            [(float(t), int(q), (int(k), str(key))) for t, q, k, key in snap["heap"]],
            int(snap["seq"]),
        )
        self._serial = int(snap["serial"])
        self._queue = [str(k) for k in snap["queue"]]
        self._zone_nodes = {(str(p), str(z)): int(n) for p, z, n in snap["zoneNodes"]}
        self._gpus_held, self._alive_gpus = int(snap["gpusHeld"]), int(snap["aliveGpus"])
        self._node_req = {str(k): str(v) for k, v in snap["nodeRequest"].items()}
        self._protected = {str(n) for n in snap["protected"]}
        seen = snap.get("deadlineSeen")
        self._deadline_seen = -math.inf if seen is None else float(seen)
        self.run.nodes_made = int(snap["nodesMade"])
        self.rng.bit_generator.state = snap["rng"]
        self.run.note_capacity(
            self.run.capacity_t[-1] if self.run.capacity_t else 0.0, self._alive_gpus
        )

    def reconcile(self, live: set[str], now: float) -> None:
        """Release every request the core no longer holds (deleted before a restart, whose
        deletion had not reached the cloud yet)."""
        for key, rec in list(self.run.requests.items()):
            if key not in live and rec.ended_s is None and not rec.manual:
                self._release(key, now)

    def prune(self, keep: int) -> None:
        """Forget all but the last ``keep`` requests that ended and hold no node (a long-running
        ``serve`` would otherwise keep every request it ever saw)."""
        held = set(self._node_req.values())
        gone = [
            k
            for k, r in self.run.requests.items()
            if r.ended_s is not None and k not in held and k not in self._queue
        ]
        for key in gone[: max(0, len(gone) - keep)]:
            del self.run.requests[key]

    # -- requests -----------------------------------------------------------------------------

    def _manual(self, name: str, now: float) -> None:
        m = next(r for r in self.spec.requests if r.name == name)
        ps = reserving_pod_set(self.spec.pool(m.pool), m.nodes)
        req = self.sched.create_provisioning_request(
            ProvisioningRequest(m.name, (ps,), namespace=MANUAL_NAMESPACE), now
        )
        self._new(req, now, manual=True)

    def _new(self, req: ProvisioningRequest, now: float, manual: bool) -> None:
        key = req.key
        pool, n, why = match_request(self.spec, req)
        rec = RequestRecord(
            key,
            req.job,
            pool.name if pool else "",
            n,
            n * (pool.gpus_per_node if pool else 0),
            manual,
            now,
            label=req.node_label,
        )
        self.run.requests[key] = rec
        if req.ended:  # refused by the core (the project's limit)
            rec.end("failed", now, "refused: too many requests")
            return
        refused = refusal(self.spec, pool, n, rec.gpus, why)
        if refused is not None:
            self._fail(rec, *refused, now)
            return
        self.sched.provisioning_accepted(key, now)
        self._queue.append(key)
        self._push(now + self.spec.queue_timeout_s, _TIMEOUT, key)
        self._try_queue(now)

    def _try_queue(self, now: float) -> None:
        for key in list(self._queue):
            rec = self.run.requests[key]
            pool = self.spec.pool(rec.pool)
            if self._gpus_held + rec.gpus > self.spec.gpu_quota:
                continue
            zones = sorted(pool.zones, key=lambda z: (self._zone_nodes.get((pool.name, z), 0), z))
            for zone in zones:
                used = self._zone_nodes.get((pool.name, zone), 0)
                if used + rec.nodes > pool.max_nodes_per_zone or is_stocked_out(
                    self.run.stockouts, pool.name, zone, now
                ):
                    continue
                self._queue.remove(key)
                self._zone_nodes[(pool.name, zone)] = used + rec.nodes
                self._gpus_held += rec.gpus
                rec.zone, rec.committed_s, rec.outcome = zone, now, "provisioning"
                delay = float(self.spec.delay.draw(self.rng, 1)[0])
                self._push(now + delay, _READY, key)
                break

    def _ready(self, key: str, now: float) -> None:
        rec = self.run.requests[key]
        if rec.outcome != "provisioning":
            return  # cancelled while the nodes were being made
        pool = self.spec.pool(rec.pool)
        names = []
        for _ in range(rec.nodes):
            node = pool_node(pool, self._serial, rec.zone, rec.label)
            self._serial += 1
            name = node.name
            self.host.add_node(node, now)
            names.append(name)
            self._node_req[name] = key
            self._protected.add(name)
        self.run.nodes_made += rec.nodes
        self._alive_gpus += rec.gpus
        self.run.note_capacity(now, self._alive_gpus)
        rec.node_names = tuple(names)
        rec.nodes_added_s = tuple(now for _ in names)
        try:
            live = self.sched.provisioning_provisioned(key, names, now)
        except (ConflictError, NotFoundError):
            rec.end("cancelled", now, "gone before its nodes came")
            self._unprotect(rec, now)
            return
        rec.provisioned_s, rec.outcome = now, "booked"
        if live.max_run_duration_s is not None:
            # A hair after the limit: the job, stopped at that very limit, ends first.
            self._push(now + live.max_run_duration_s + 1e-6, _REVOKE, key)

    def _timeout(self, key: str, now: float) -> None:
        rec = self.run.requests[key]
        if key in self._queue:
            self._queue.remove(key)
            self._fail(
                rec,
                "CapacityNotAvailable",
                f"not provisioned within {self.spec.queue_timeout_s:.0f}s "
                "(stock-outs or the regional quota)",
                now,
            )

    def _fail(self, rec: RequestRecord, reason: str, message: str, now: float) -> None:
        with contextlib.suppress(NotFoundError):
            self.sched.provisioning_failed(rec.key, message, now, reason)
        rec.end("failed", now, f"{reason}: {message}")

    def _release(self, key: str, now: float) -> None:
        """The core no longer wants ``key``: cancel it, or let its nodes go once idle."""
        rec = self.run.requests.get(key)
        if rec is None or rec.ended_s is not None:
            if rec is not None:
                self._unprotect(rec, now)
            return
        if key in self._queue:
            self._queue.remove(key)
            rec.end("cancelled", now, "deleted before provisioning")
            return
        if rec.outcome == "provisioning":
            self._zone_nodes[(rec.pool, rec.zone)] -= rec.nodes
            self._gpus_held -= rec.gpus
            rec.end("cancelled", now, "deleted while its nodes were being made")
            return
        live = self.sched.provisioning_request(key)
        if live is not None and live.consumed_s is not None:
            rec.consumed_s = live.consumed_s
            rec.outcome = "consumed"
        if rec.outcome == "consumed":
            rec.end("consumed", now)  # its job is done with the nodes
        elif rec.provisioned_s is not None and now >= rec.provisioned_s + BOOKING_S - 1e-9:
            rec.end("expired", now, f"booking expired: no pod came within {BOOKING_S:.0f}s")
        else:
            rec.end("cancelled", now, "deleted while booked")
        self._unprotect(rec, now)

    def _unprotect(self, rec: RequestRecord, now: float) -> None:
        for name in rec.node_names:
            if name in self._protected:
                self._protected.discard(name)
                self._push(now + self.spec.scale_down_after_s, _IDLE, name)

    def _remove(self, name: str, now: float) -> list[JobId]:
        key = self._node_req.pop(name)
        rec = self.run.requests[key]
        self._protected.discard(name)
        hit = self.host.remove_node(NodeName(name), now)
        pool = self.spec.pool(rec.pool)
        self._zone_nodes[(rec.pool, rec.zone)] -= 1
        self._gpus_held -= pool.gpus_per_node
        self._alive_gpus -= pool.gpus_per_node
        self.run.note_capacity(now, self._alive_gpus)
        return hit

    def _idle(self, name: str, now: float) -> list[JobId]:
        if name not in self._node_req or name in self._protected:
            return []
        if self.sched.placements_on(NodeName(name)):
            self._push(now + self.spec.scale_down_after_s, _IDLE, name)
            return []
        return self._remove(name, now)

    def _revoke(self, key: str, now: float) -> list[JobId]:
        """``maxRunDurationSeconds`` is up: the capacity goes back, nodes and pods with it."""
        rec = self.run.requests[key]
        alive = [n for n in rec.node_names if n in self._node_req]
        if not alive:
            return []
        with contextlib.suppress(NotFoundError):
            self.sched.provisioning_revoked(key, "maxRunDurationSeconds reached", now)
        hit: list[JobId] = []
        for name in alive:
            hit += self._remove(name, now)
        rec.end("revoked", now, "maxRunDurationSeconds reached")
        return sorted(set(hit))
