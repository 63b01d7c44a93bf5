"""What a provisioning class's requests have shown of the cloud behind it, learned only from
what a ProvisioningRequest's owner sees: its conditions and their times, and the nodes a
provisioned request brought joining and leaving the cluster. The cloud's quotas, stock and
queue are not visible; their effects are:

- **making time** (``delays``): how long the cloud took to provision a request once there was
  room for it: ``Provisioned`` minus its creation, or minus the last time nodes of the class
  left the cluster while it waited (the room it was waiting for, when it waited for room);
- **scale-down lag** (``lag_s``): how long the nodes of a request its job was done with stayed
  in the cluster after the request was deleted (a request revoked at
  ``maxRunDurationSeconds`` loses its nodes at once and is not counted);
- **concurrent capacity** (``capacity_nodes``): the most nodes the class held at once at a
  moment one of its requests waited longer than the cloud ever took to make capacity (it was
  waiting for room, not for the making): when it failed after waiting so (the cloud's queue
  timeout), or when it was provisioned only after nodes of the class left. None while no
  request has waited so: as far as anything shows, the class's requests do not wait for each
  other.

A request that failed and was made again for the same job keeps its place: its ``first_s`` is
the creation of the job's first request (a queue serves requests in the order they came).
"""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass, field
from statistics import median
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpupool.core.provisioning.request import ProvisioningRequest

LEARN_LAST = 32
"""How many of a provisioning class's latest samples (making times, lags, capacity moments)
what is learned rests on."""

AT_RUN_END_S = 1.0
"""A request let go this close to its run end (its job stopped at the limit the run end set)
is taken as revoked there: the cloud takes the nodes back at once."""

FIRSTS_KEPT = 4096
"""Jobs whose first request's creation is remembered at most (the oldest go first)."""


@dataclass(slots=True)
class _Episode:
    """One request as far as capacity goes: made, provisioned, let go, its nodes gone."""

    key: str
    cls: str
    nodes: int  # one node per pod
    created_s: float
    first_s: float
    provisioned_s: float | None = None
    released_s: float | None = None  # deleted, or Failed / BookingExpired / CapacityRevoked
    run_ends_s: float | None = None  # Provisioned + maxRunDurationSeconds: the cloud takes it
    revoked: bool = False  # let go at its run end: its nodes went with it, no scale-down lag
    alive: set[str] = field(default_factory=set)  # its nodes still in the cluster


@dataclass(slots=True)
class _Class:
    delays: deque[float] = field(default_factory=lambda: deque(maxlen=LEARN_LAST))
    lags: deque[float] = field(default_factory=lambda: deque(maxlen=LEARN_LAST))
    contended: deque[int] = field(default_factory=lambda: deque(maxlen=LEARN_LAST))
    held: int = 0  # nodes of provisioned requests still in the cluster
    left_s: float | None = None  # the last time nodes of the class left


@dataclass(frozen=True, slots=True)
class HoldingRequest:
    """A request of the class whose nodes are in the cluster: ``released_s`` when it was let
    go (its nodes leave after the scale-down lag), None while it holds them for a job."""

    key: str
    nodes: int
    released_s: float | None
    revoked: bool


@dataclass(frozen=True, slots=True)
class ClassCapacity:
    """What a class's requests have shown (see the module): making times, latest last; the
    scale-down lag (None: none seen); the concurrent capacity in nodes (None: unbounded as far
    as anything shows) and the number of moments it rests on; the requests holding nodes now."""

    provisioning_class_name: str
    delays: tuple[float, ...]
    lag_s: float | None
    capacity_nodes: int | None
    contended: int
    held_nodes: int
    holders: tuple[HoldingRequest, ...]
    left_s: float | None

    def delay(self, since_s: float = 0.0) -> tuple[float | None, int]:
        """The median making time of those that took at least ``since_s`` (a request being
        made that long already is one of them), and how many did; (None, 0): none did."""
        longer = [x for x in self.delays if x >= since_s]
        return (median(longer) if longer else None), len(longer)

    @property
    def longest_delay_s(self) -> float | None:
        return max(self.delays, default=None)


class CapacityHistory:
    """Capacity episodes of every class (see the module). The ledger feeds it its facts."""

    def __init__(self) -> None:
        self._eps: dict[str, _Episode] = {}
        self._node: dict[str, str] = {}  # node -> request key
        self._firsts: OrderedDict[str, float] = OrderedDict()  # "ns/job" -> first creation
        self._cls: dict[str, _Class] = {}

    def _of(self, cls: str) -> _Class:
        return self._cls.setdefault(cls, _Class())

    # -- facts ---------------------------------------------------------------------------------

    def made(self, req: ProvisioningRequest, now_s: float) -> None:
        first = now_s
        if req.job:
            jk = f"{req.namespace}/{req.job}"
            first = self._firsts.setdefault(jk, now_s)
            self._firsts.move_to_end(jk)
            while len(self._firsts) > FIRSTS_KEPT:
                self._firsts.popitem(last=False)
        self._eps[req.key] = _Episode(
            req.key, req.provisioning_class_name, req.pod_count, now_s, first
        )

    def first_s(self, key: str) -> float | None:
        """When the job of request ``key`` made its first request (None: unknown request)."""
        ep = self._eps.get(key)
        return ep.first_s if ep is not None else None

    def provisioned(
        self, key: str, nodes: tuple[str, ...], now_s: float, max_run_s: float | None = None
    ) -> None:
        ep = self._eps.get(key)
        if ep is None or ep.provisioned_s is not None:
            return
        ep.run_ends_s = None if max_run_s is None else now_s + max_run_s
        c = self._of(ep.cls)
        waited_for_room = c.left_s is not None and ep.created_s < c.left_s <= now_s
        delay = now_s - (c.left_s if waited_for_room and c.left_s is not None else ep.created_s)
        longest = max(c.delays, default=None)
        if waited_for_room and longest is not None and now_s - ep.created_s > longest:
            c.contended.append(c.held + ep.nodes)
        c.delays.append(max(0.0, delay))
        ep.provisioned_s = now_s
        ep.alive = set(nodes)
        for n in nodes:
            self._node[n] = key
        c.held += len(ep.alive)

    def consumed(self, job: str, namespace: str) -> None:
        """The job started on its booking: it will not ask again for this wait."""
        self._firsts.pop(f"{namespace}/{job}", None)

    def released(self, key: str, now_s: float, revoked: bool = False, failed: bool = False) -> None:
        """The request was deleted or ended: its nodes no longer wait for a job of it. A request
        that fails unprovisioned after waiting longer than the class ever took to make
        capacity was waiting for room: the class's capacity shows."""
        ep = self._eps.get(key)
        if ep is None or ep.released_s is not None:
            return
        ep.released_s = now_s
        ends = ep.run_ends_s
        ep.revoked = revoked or (ends is not None and now_s >= ends - AT_RUN_END_S)
        c = self._of(ep.cls)
        if failed and ep.provisioned_s is None:
            longest = max(c.delays, default=None)
            if longest is not None and now_s - ep.created_s > longest and c.held > 0:
                c.contended.append(c.held)
        if not ep.alive:
            del self._eps[key]

    def node_left(self, name: str, now_s: float) -> None:
        key = self._node.pop(name, None)
        if key is None:
            return
        ep = self._eps.get(key)
        if ep is None or name not in ep.alive:
            return
        ep.alive.discard(name)
        c = self._of(ep.cls)
        c.held -= 1
        c.left_s = now_s
        if ep.alive:
            return
        if ep.released_s is not None and not ep.revoked:
            c.lags.append(max(0.0, now_s - ep.released_s))
        if ep.released_s is not None:
            del self._eps[key]

    # -- reading -------------------------------------------------------------------------------

    def learned(self, cls: str) -> ClassCapacity:
        c = self._of(cls)
        holders = tuple(
            HoldingRequest(e.key, len(e.alive), e.released_s, e.revoked)
            for e in self._eps.values()
            if e.cls == cls and e.alive
        )
        return ClassCapacity(
            cls,
            tuple(c.delays),
            median(c.lags) if c.lags else None,
            max(c.contended) if c.contended else None,
            len(c.contended),
            c.held,
            holders,
            c.left_s,
        )
