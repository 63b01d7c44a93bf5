"""ControlPlane: the service behind ``gpupool serve``: the core, its durable state and a cluster.

Facts come in from the API (a job submitted or cancelled, a queue or node changed) and from
the cluster (a job ended); each is written to the state file before it is acknowledged. A loop
calls ``tick()``: jobs that ended are finished, the core runs one cycle, and its decisions are
carried out on the cluster and written, all in one transaction.

This class is a facade over the parts that do the work, one concept each:

- ``journal``: the only writer to the state file (``Changes`` gathers one step's writes);
- ``recovery``: start-up, and the scheduler built from what the state file holds;
- ``jobs``: submit, read, cancel, delete;
- ``loop``: one tick (finished jobs, one cycle, its decisions carried out);
- ``inventory``: nodes, from the API and from the simulated cloud;
- ``queue_objects``: the queue configuration's objects;
- ``provisioning``: the provisioning check's state in the state file, and its requests;
- ``history``: usage over time and wait estimates for the dashboard.

Threads: the API's worker threads and the loop share one lock (``self.lock``); every method
below takes it. The core never sees two callers at once.
"""

from __future__ import annotations

import math
import threading
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

from gpupool.cloud.region import Cloud
from gpupool.cloud.spec import CloudSpec
from gpupool.control import (
    history,
    inventory,
    jobs,
    loop,
    provisioning,
    queue_objects,
    recovery,
)
from gpupool.control.clock import Clock
from gpupool.control.journal import Changes, Journal
from gpupool.control.records import (
    ACTIVE,
    EVENTS_KEPT,
    HISTORY_KEPT,
    TERMINAL,
    Backend,
    JobRecord,
    TickResult,
    Watcher,
)
from gpupool.core.model import JobId, Node, NodeName
from gpupool.core.placement.framework import Profile
from gpupool.core.provisioning import ProvisioningRequest
from gpupool.core.quota import QueueConfig
from gpupool.core.scheduler import Scheduler
from gpupool.metrics import Metrics
from gpupool.store.sqlite import Store

__all__ = ["ACTIVE", "TERMINAL", "Backend", "ControlPlane", "JobRecord", "TickResult", "Watcher"]


class ControlPlane:
    scheduler: Scheduler
    config: QueueConfig
    queue_docs: dict[tuple[str, str], dict[str, Any]]

    def __init__(
        self,
        store: Store,
        backend: Backend,
        clock: Clock,
        *,
        nodes: Sequence[Node] = (),
        queue_docs: Sequence[Mapping[str, Any]] = (),
        profile: Profile | None = None,
        metrics: Metrics | None = None,
        cloud: CloudSpec | None = None,
        cloud_seed: int = 1,
    ) -> None:
        """``nodes`` and ``queue_docs`` seed a new state file; an existing one is the truth
        and they are ignored (its nodes and queues were changed through the API since).
        ``cloud`` is a simulated cloud that provisions nodes for ProvisioningRequests (its
        state is kept in the state file, so a restart goes on where it was)."""
        self.store = store  # read at start-up; written only through the journal
        self.journal = Journal(store, clock)
        self.backend = backend
        self.clock = clock
        self.profile = profile
        self.metrics = metrics or Metrics()
        self.lock = threading.RLock()
        self.jobs: dict[str, JobRecord] = {}
        self.node_status: dict[str, dict[str, Any]] = {}  # name -> {"failed": bool}
        self._estimates: dict[JobId, tuple[int, float | None]] = {}
        self._estimated_at = -math.inf  # never (Clock.monotonic)
        self.cycles = 0
        self.last_tick: TickResult | None = None
        self.history: deque[dict[str, Any]] = deque(maxlen=HISTORY_KEPT)
        self._sampled_at = -math.inf  # never (Clock.monotonic)
        self.watchers: list[Watcher] = []
        self.cloud: Cloud | None = None
        self._cloud_spec, self._cloud_seed = cloud, cloud_seed
        self._tick_changes: Changes | None = None  # the cycle's, while the cloud acts
        self._saved: dict[tuple[str, str], dict[str, Any]] = {}  # provisioning rows on disk
        self._cloud_saved: dict[str, Any] | None = None  # the cloud's snapshot on disk
        self._usable_cache: dict[str, tuple[int, set[str]]] = {}  # job -> usable flavors
        with self.lock:
            recovery.open_state(self, nodes, queue_docs)

    # -- jobs ------------------------------------------------------------------------------

    def submit(self, body: object, namespace: str | None = None, *, sync: bool = True) -> JobRecord:
        """Accept a Job document (see ``jobs.submit``)."""
        return jobs.submit(self, body, namespace, sync=sync)

    def sync(self) -> None:
        """Every write so far on disk (see ``Store.sync``); call it holding no lock."""
        self.journal.sync()

    def job(self, key: str) -> JobRecord:
        return jobs.job(self, key)

    def cancel(self, key: str) -> JobRecord:
        return jobs.cancel(self, key)

    def delete(self, key: str) -> JobRecord:
        return jobs.delete(self, key)

    # -- the loop --------------------------------------------------------------------------

    def tick(self) -> TickResult:
        """Finish jobs that ended, run one cycle, carry out and record its decisions."""
        return loop.tick(self)

    def estimates(self) -> dict[JobId, tuple[int, float | None]]:
        return history.estimates(self)

    def trim_events(self) -> None:
        self.journal.trim_events(EVENTS_KEPT)

    # -- queue objects ---------------------------------------------------------------------

    def queue_objects(self, kind: str) -> list[tuple[str, dict[str, Any]]]:
        return queue_objects.queue_objects(self, kind)

    def queue_object(self, kind: str, name: str) -> dict[str, Any]:
        return queue_objects.queue_object(self, kind, name)

    def put_queue_object(
        self, kind: str, body: Mapping[str, Any], *, create: bool
    ) -> dict[str, Any]:
        return queue_objects.put_queue_object(self, kind, body, create=create)

    def delete_queue_object(self, kind: str, name: str) -> None:
        queue_objects.delete_queue_object(self, kind, name)

    # -- nodes (the API's, and the cloud's as its Host) ------------------------------------

    def add_nodes(self, pool: Mapping[str, Any]) -> list[Node]:
        return inventory.add_nodes(self, pool)

    def set_node(
        self, name: str, *, unschedulable: bool | None = None, failed: bool | None = None
    ) -> dict[str, Any]:
        return inventory.set_node(self, name, unschedulable=unschedulable, failed=failed)

    def drain_node(self, name: str) -> list[str]:
        return inventory.drain_node(self, name)

    def delete_node(self, name: str) -> None:
        inventory.delete_node(self, name)

    def add_node(self, node: Node, now_s: float) -> None:
        inventory.add_node(self, node, now_s)

    def remove_node(self, name: NodeName, now_s: float) -> list[JobId]:
        return inventory.remove_node(self, name, now_s)

    # -- provisioning requests -------------------------------------------------------------

    def provisioning_requests(self) -> list[ProvisioningRequest]:
        return provisioning.provisioning_requests(self)

    def provisioning_request(self, key: str) -> ProvisioningRequest:
        return provisioning.provisioning_request(self, key)

    def delete_provisioning_request(self, key: str) -> ProvisioningRequest:
        return provisioning.delete_provisioning_request(self, key)
