"""ControlPlane: the service behind ``gpupool serve``: the core, its durable state and a cluster.

Facts come in from the API (a job submitted or cancelled, a queue or node changed) and from
the cluster (a job ended); each is written to the state file before it is acknowledged. A loop
calls ``tick()``: jobs that ended are finished, the core runs one cycle, and its decisions are
carried out on the cluster and written, all in one transaction.

Recovery is the same path as start-up: the state file holds nodes, queue objects and jobs;
running jobs take back exactly the cards they held (``Scheduler.restore``), pending jobs go back
to their queues in submission order. Changing a queue object rebuilds the scheduler the same
way, so there is one way to build it, exercised on every start.

Threads: the API's worker threads and the loop share one lock (``self.lock``); every method
below takes it. The core never sees two callers at once.
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
from collections import Counter, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from gpupool.cloud.region import Cloud
from gpupool.cloud.spec import CloudSpec
from gpupool.config.cluster import nodes_from_documents
from gpupool.config.documents import Document
from gpupool.config.jobs import JobRequest, parse_job
from gpupool.config.queues import queue_config_from_documents
from gpupool.control.clock import Clock
from gpupool.control.codec import (
    node_from_json,
    node_to_json,
    placement_from_json,
    placement_to_json,
    request_from_json,
    request_to_json,
)
from gpupool.control.limits import check_metadata
from gpupool.control.reasons import usable_only
from gpupool.core.decisions import CycleResult
from gpupool.core.errors import ConfigError, ConflictError, InvalidJobError, NotFoundError
from gpupool.core.model import Job, JobId, Node, NodeName, Placement
from gpupool.core.placement.framework import Profile
from gpupool.core.provisioning import CheckState, ProvisioningRequest
from gpupool.core.quota import QueueConfig
from gpupool.core.scheduler import Scheduler
from gpupool.metrics import Metrics
from gpupool.store.sqlite import NewEvent, Store

QUEUE_KINDS = ("ResourceFlavor", "Cohort", "ClusterQueue", "LocalQueue",
               "WorkloadPriorityClass", "PriorityClass", "QueueSettings", "AdmissionCheck",
               "ProvisioningRequestConfig")
ACTIVE = ("Pending", "Running")
TERMINAL = ("Succeeded", "Failed", "Cancelled")
ESTIMATE_EVERY_S = 1.0  # wall seconds between wait-estimate runs
EVENTS_KEPT = 50_000
HISTORY_EVERY_S = 1.0  # wall seconds between samples of queue usage
HISTORY_KEPT = 900
MAX_POOL_NODES = 1_000  # nodes one API request may add
MAX_NODE_GPUS = 64  # cards on one node
REQUEST_KIND = "ProvisioningRequest"  # state-file kinds of the provisioning check's state
CHECK_KIND = "ProvisioningCheck"  # per job: its admission-check record, or its booking
CLOUD_KIND = "Cloud"  # the simulated cloud's snapshot
CLOUD_HORIZON_S = 365 * 86_400.0  # stock-outs are drawn this far ahead
CLOUD_REQUESTS_KEPT = 200  # ended requests the cloud remembers


class Backend(Protocol):
    """Where bound jobs run: the virtual cluster here, Kubernetes elsewhere."""

    def start(self, key: str, placements: Sequence[Placement], start_s: float,
              end_s: float) -> None: ...

    def stop(self, key: str) -> None: ...

    def due(self, now_s: float) -> list[str]:
        """Jobs whose end time has come, in end order."""
        ...


class Watcher(Protocol):
    """Something that holds cards in the scheduler's state beside the jobs (ElasticGPUs):
    told when a new Scheduler is built (to take its cards back in it), when a node fails and
    when a cycle ran. Called under the plane's lock."""

    def scheduler_built(self, scheduler: Scheduler) -> None: ...

    def node_failed(self, name: str) -> None: ...

    def ticked(self, result: TickResult) -> None: ...


@dataclass(slots=True)
class JobRecord:
    uid: int
    request: JobRequest
    phase: str
    submitted_s: float
    started_s: float | None = None
    finished_s: float | None = None
    flavor: str = ""
    cluster_queue: str = ""
    placements: tuple[Placement, ...] = ()
    preemptions: int = 0
    message: str = ""

    @property
    def key(self) -> str:
        return self.request.key

    @property
    def job(self) -> Job:
        return self.request.job


@dataclass(slots=True)
class TickResult:
    time_s: float
    finished: int = 0
    bound: int = 0
    evicted: int = 0
    parked: int = 0
    decision_s: float = 0.0


@dataclass(slots=True)
class _Changes:
    jobs: dict[str, dict[str, Any]] = field(default_factory=dict)
    events: list[NewEvent] = field(default_factory=list)
    objects: dict[tuple[str, str], dict[str, Any] | None] = field(default_factory=dict)

    def job(self, key: str, **fields: Any) -> None:
        self.jobs.setdefault(key, {}).update(fields)

    def event(self, time_s: float, reason: str, kind: str, obj: str, message: str,
              namespace: str = "", warning: bool = False) -> None:
        self.events.append(NewEvent(time_s, "Warning" if warning else "Normal", reason, kind,
                                    obj, namespace, message))


def _namespace_of(kind: str, key: str) -> str:
    """Whose events a queue object's changes are: a LocalQueue's namespace's; the others are
    the cluster's (namespace '')."""
    return key.split("/", 1)[0] if kind == "LocalQueue" else ""


def _key_of(kind: str, body: Mapping[str, Any]) -> str:
    meta = body.get("metadata")
    if kind == "QueueSettings" and not isinstance(meta, Mapping):
        return "default"
    if not isinstance(meta, Mapping) or not isinstance(meta.get("name"), str):
        raise ConfigError(f"{kind}: metadata.name is required")
    if kind == "LocalQueue":
        ns = meta.get("namespace") or "default"
        return f"{ns}/{meta['name']}"
    return str(meta["name"])


_JOB_KEY = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[a-z0-9]([-a-z0-9.]*[a-z0-9])?")
ANOTHER_TENANT = "a job of another namespace"


def _for_owner(message: str, namespace: str, jobs: Mapping[str, Any]) -> str:
    """``message`` as the owner of a job in ``namespace`` reads it: another namespace's job
    named in it (a preemptor, a gang waited behind) is not named, as it does not exist
    for them."""
    if "/" not in message:
        return message

    def hide(m: re.Match[str]) -> str:
        key = m.group(0)
        return ANOTHER_TENANT if key in jobs and not key.startswith(f"{namespace}/") else key

    return _JOB_KEY.sub(hide, message)


_DOCUMENT_FIELDS = {"cpu_milli": "cpu", "memory_mib": "memory", "gpu.gpu_milli": "gpu.milli",
                    "gpu.memory_mib": "gpu.memory", "gpu.mig_profile": "gpu.mig",
                    "node_selector": "nodeSelector"}


def _in_document_terms(exc: InvalidJobError, request: JobRequest) -> InvalidJobError:
    """The core names its own fields (``pod_sets[0].memory_mib=3145728``); the submitter
    wrote a document: name its field (``spec.podSets[0].memory``) and the value as written."""
    if exc.field == "pod_sets":
        return InvalidJobError("spec.podSets", exc.value, exc.rule, job=exc.job)
    match = re.fullmatch(r"pod_sets\[(\d+)\]\.(.+)", exc.field)
    if match is None:
        return exc
    index, name = int(match.group(1)), _DOCUMENT_FIELDS.get(match.group(2), match.group(2))
    value: Any = exc.value
    try:
        found: Any = request.document["spec"]["podSets"][index]
        for part in name.split("."):
            found = found[part]
        value = found
    except (KeyError, IndexError, TypeError):
        pass
    return InvalidJobError(f"spec.podSets[{index}].{name}", value, exc.rule, job=exc.job)


class ControlPlane:
    def __init__(self, store: Store, backend: Backend, clock: Clock, *,
                 nodes: Sequence[Node] = (), queue_docs: Sequence[Mapping[str, Any]] = (),
                 profile: Profile | None = None, metrics: Metrics | None = None,
                 cloud: CloudSpec | None = None, cloud_seed: int = 1) -> None:
        """``nodes`` and ``queue_docs`` seed a new state file; an existing one is the truth
        and they are ignored (its nodes and queues were changed through the API since).
        ``cloud`` is a simulated cloud that provisions nodes for ProvisioningRequests (its
        state is kept in the state file, so a restart goes on where it was)."""
        self.store = store
        self.backend = backend
        self.clock = clock
        self.profile = profile
        self.metrics = metrics or Metrics()
        self.lock = threading.RLock()
        self.jobs: dict[str, JobRecord] = {}
        self.node_status: dict[str, dict[str, Any]] = {}  # name -> {"failed": bool}
        self._estimates: dict[JobId, tuple[int, float | None]] = {}
        self._estimated_at = 0.0
        self.cycles = 0
        self.last_tick: TickResult | None = None
        self.history: deque[dict[str, Any]] = deque(maxlen=HISTORY_KEPT)
        self._sampled_at = 0.0
        self.watchers: list[Watcher] = []
        self.cloud: Cloud | None = None
        self._cloud_spec, self._cloud_seed = cloud, cloud_seed
        self._tick_changes: _Changes | None = None  # the cycle's, while the cloud acts
        self._saved: dict[tuple[str, str], dict[str, Any]] = {}  # provisioning rows on disk
        self._cloud_saved: dict[str, Any] | None = None  # the cloud's snapshot on disk
        self._usable_cache: dict[str, tuple[int, set[str]]] = {}  # job -> usable flavors
        with self.lock:
            self._open(nodes, queue_docs)

    # -- start-up and recovery ---------------------------------------------------------------

    def _open(self, nodes: Sequence[Node], queue_docs: Sequence[Mapping[str, Any]]) -> None:
        if self.store.meta("created") is None:
            with self.store.transaction() as tx:
                for node in nodes:
                    tx.put_object("Node", node.name, {"node": node_to_json(node),
                                                       "failed": False})
                for doc in queue_docs:
                    kind = str(doc.get("kind"))
                    tx.put_object(kind, _key_of(kind, doc), dict(doc))
                tx.set_meta("created", str(self.clock.wall()))
                tx.set_meta("clock", f"{self.clock.now()} {self.clock.wall()}")
                tx.add_events([NewEvent(self.clock.now(), "Normal", "Started", "Cluster", "",
                                        "", f"new state file: {len(nodes)} nodes, "
                                        f"{len(queue_docs)} queue objects")])
        else:
            last_s, last_wall = (float(x) for x in (self.store.meta("clock") or "0 0").split())
            self.clock.resume(last_s, last_wall)
        self.queue_docs = {(k, n): b for k, n, b, _ in self.store.objects()
                           if k in QUEUE_KINDS}
        self.config = self._config(self.queue_docs)
        for _, name, body, _ in self.store.objects("Node"):
            self.node_status[name] = body
        for kind in (REQUEST_KIND, CHECK_KIND):
            for _, name, body, _ in self.store.objects(kind):
                self._saved[(kind, name)] = body
        for row in self.store.jobs():
            request = parse_job(row.document, self.config, submit_time_s=row.submitted_s,
                                check_queue=row.phase in ACTIVE)
            rec = JobRecord(row.uid, request, row.phase, row.submitted_s, row.started_s,
                            row.finished_s, row.flavor, "",
                            tuple(placement_from_json(row.key, p) for p in row.placements),
                            row.preemptions, row.message)
            self.jobs[row.key] = rec
        self._build()
        if self._cloud_spec is not None:
            self.cloud = Cloud(self._cloud_spec, self, self._cloud_seed, CLOUD_HORIZON_S)
            saved = [b for _, n, b, _ in self.store.objects(CLOUD_KIND)
                     if n == self._cloud_spec.name]
            if saved:
                try:
                    self.cloud.restore(saved[0])
                    self.cloud.reconcile({r.key for r in self.scheduler.provisioning_requests()},
                                         self.clock.now())
                except (KeyError, TypeError, ValueError) as exc:  # another cloud file
                    spec, why = self._cloud_spec, repr(exc)
                    self.cloud = Cloud(spec, self, self._cloud_seed, CLOUD_HORIZON_S)
                    self._record(lambda c: c.event(
                        self.clock.now(), "CloudReset", "Cloud", spec.name,
                        f"the saved cloud state does not fit this cloud's spec ({why}); it "
                        "starts afresh", warning=True))
        recovered = Counter(r.phase for r in self.jobs.values())
        if recovered:
            self._record(lambda c: c.event(self.clock.now(), "Recovered", "Cluster", "",
                                           "state file read: " + ", ".join(
                                               f"{n} {p.lower()}" for p, n in
                                               sorted(recovered.items()))))

    def _config(self, docs: Mapping[tuple[str, str], Mapping[str, Any]]) -> QueueConfig:
        return queue_config_from_documents([
            Document(f"{kind} {name}", 1, body) for (kind, name), body in docs.items()])

    def _nodes(self) -> list[Node]:
        out = []
        for body in self.node_status.values():
            if not body.get("failed"):
                out.append(node_from_json(body["node"]))
        return out

    def _build(self) -> None:
        """A new Scheduler from the nodes, queues and jobs held now."""
        rows = self._provisioning_rows() if hasattr(self, "scheduler") else self._saved
        sched = Scheduler(self._nodes(), self.config, self.profile)
        now = self.clock.now()
        requests = [request_from_json(b) for (k, _), b in sorted(rows.items())
                    if k == REQUEST_KIND]
        if requests:
            sched.restore_provisioning(requests)
        checks = {n: b for (k, n), b in rows.items() if k == CHECK_KIND}
        running = sorted((r for r in self.jobs.values() if r.phase == "Running"),
                         key=lambda r: (r.started_s or 0.0, r.uid))
        conflicts = _Changes()
        for rec in running:
            try:
                restored = sched.restore(rec.job, rec.placements, rec.started_s or now,
                                         rec.flavor, rec.preemptions)
            except ConflictError as exc:
                # Two holders of one card (a state file two servers wrote): the one that
                # started first keeps it, the later one goes back to its queue, whole.
                self._requeue_conflict(rec, str(exc), now, conflicts)
                continue
            rec.cluster_queue = restored.queue
            booking = (checks.get(rec.key) or {}).get("booking")
            if booking:
                with contextlib.suppress(NotFoundError):
                    sched.restore_booking(JobId(rec.key), str(booking))
            self.backend.start(rec.key, rec.placements, rec.started_s or now,
                               self._end_s(rec, sched))
        for rec in sorted((r for r in self.jobs.values() if r.phase == "Pending"),
                          key=lambda r: r.uid):
            try:
                sched.submit(rec.job, rec.submitted_s)
            except InvalidJobError:
                # Accepted before; the nodes it needs are away (failed) for now. It waits,
                # parked with its reason, until they are back.
                sched.queue_again(rec.job, rec.preemptions)
            rec.cluster_queue = sched.resolve_queue(rec.job.queue)
            check = checks.get(rec.key)
            if check and not check.get("booking"):
                with contextlib.suppress(NotFoundError, ValueError):
                    # its queue may have lost its admission check since: it queues plainly
                    sched.restore_check(
                        JobId(rec.key), CheckState(check["state"]),
                        request=str(check["request"]), flavor=str(check["flavor"]),
                        attempts=int(check["attempts"]), made=int(check["made"]),
                        retry_at_s=float(check["retryAt"]), message=str(check["message"]))
        for w in self.watchers:
            w.scheduler_built(sched)
        self.scheduler = sched
        self._usable_cache.clear()  # a new table, maybe new flavors
        self._commit(conflicts)
        if self.cloud is not None:  # deletions the old scheduler had not passed on yet
            self.cloud.reconcile({r.key for r in sched.provisioning_requests()}, now)

    @staticmethod
    def _requeue_conflict(rec: JobRecord, why: str, now: float, changes: _Changes) -> None:
        """A running job whose cards another running job, started earlier, holds: back to
        Pending (it queues below, in submission order) with a Warning event."""
        rec.phase, rec.placements, rec.started_s, rec.flavor = "Pending", (), None, ""
        rec.message = (f"its cards were held by another job when the state file was read "
                       f"({why}); back in its queue")
        changes.job(rec.key, phase="Pending", placements=[], started_s=None, flavor="",
                    message=rec.message)
        changes.event(now, "RestoreConflict", "Job", rec.key, rec.message,
                      rec.request.namespace, warning=True)

    def _end_s(self, rec: JobRecord, sched: Scheduler | None = None) -> float:
        """When a running job ends: its duration, or its run limit (cut by the booking it
        runs on, when it consumed one)."""
        run = rec.job.duration_s or 0.0
        limit = (sched or self.scheduler).run_limit_s(JobId(rec.key))
        if limit is not None:
            run = min(run, limit)
        return (rec.started_s or 0.0) + run

    # -- provisioning state and the simulated cloud ------------------------------------------

    def _provisioning_rows(self) -> dict[tuple[str, str], dict[str, Any]]:
        """The admission checks' state as state-file rows: every ProvisioningRequest, and per
        job its check record or the booking it runs on."""
        state = self.scheduler.provisioning_state()
        rows: dict[tuple[str, str], dict[str, Any]] = {}
        for req in state.requests:
            rows[(REQUEST_KIND, req.key)] = request_to_json(req)
        for rec in state.records:
            jid = rec.job.id
            rows[(CHECK_KIND, str(jid))] = {
                "state": rec.state.value, "request": rec.request, "flavor": rec.flavor,
                "attempts": rec.attempts, "made": state.made.get(jid, 0),
                "retryAt": rec.retry_at_s, "message": rec.message}
        for jid, key in state.bookings.items():
            rows[(CHECK_KIND, str(jid))] = {"booking": key, "made": state.made.get(jid, 0)}
        return rows

    def _save_provisioning(self, changes: _Changes) -> None:
        """What changed in the checks' state and the cloud since the last write, into
        ``changes`` (written in the same transaction as the decisions)."""
        rows = self._provisioning_rows()
        now = self.clock.now()
        for key, body in rows.items():
            old = self._saved.get(key)
            if old == body:
                continue
            changes.objects[key] = body
            if key[0] == REQUEST_KIND:
                self._request_events(key[1], old, body, now, changes)
        for key in self._saved.keys() - rows.keys():
            changes.objects[key] = None
        self._saved = rows
        if self.cloud is not None:
            self.cloud.prune(CLOUD_REQUESTS_KEPT)
            snap = self.cloud.snapshot()
            if snap != self._cloud_saved:
                changes.objects[(CLOUD_KIND, self.cloud.spec.name)] = snap
                self._cloud_saved = snap

    @staticmethod
    def _request_events(key: str, old: Mapping[str, Any] | None, new: Mapping[str, Any],
                        now: float, changes: _Changes) -> None:
        """An event per condition a request gained (and one when it is made)."""
        ns = str(new["namespace"])
        if old is None:
            who = f" for job {new['job']}" if new["job"] else ""
            count = new["pod_sets"][0]["count"]
            changes.event(now, "Created", "ProvisioningRequest", key,
                          f"asks the cloud for {count} pod(s) at once{who}", ns)
        before = {(c["type"], c["status"]) for c in (old or {}).get("conditions", ())}
        for c in new["conditions"]:
            if (c["type"], c["status"]) in before or not c["status"]:
                continue
            bad = c["type"] in ("Failed", "BookingExpired", "CapacityRevoked")
            changes.event(now, c["type"], "ProvisioningRequest", key,
                          f"{c['reason']}: {c['message']}", ns, warning=bad)

    def add_node(self, node: Node, now_s: float) -> None:
        """A node the cloud made joins (the cloud's Host; called inside ``tick``)."""
        body = {"node": node_to_json(node), "failed": False, "cloud": True}
        self.node_status[node.name] = body
        self.scheduler.add_node(node)
        changes = self._tick_changes or _Changes()
        changes.objects[("Node", node.name)] = body
        changes.event(now_s, "NodeProvisioned", "Node", node.name,
                      f"made by the cloud: {node.gpu_count} GPU(s) "
                      f"{node.gpus[0].model if node.gpus else ''}".strip())
        if self._tick_changes is None:
            self._commit(changes)

    def remove_node(self, name: NodeName, now_s: float) -> list[JobId]:
        """The cloud took a node back: its jobs go back to their queues whole."""
        changes = self._tick_changes or _Changes()
        hit: list[JobId] = []
        if name in self.node_status:
            if not self.node_status[name].get("failed"):
                hit = self.scheduler.remove_node(name, now_s)
                for w in self.watchers:
                    w.node_failed(name)
            self._requeue(hit, f"node {name} was taken back by the cloud", now_s, changes,
                          "NodeLost")
            del self.node_status[name]
        changes.objects[("Node", name)] = None
        changes.event(now_s, "NodeDeprovisioned", "Node", name,
                      f"taken back by the cloud; {len(hit)} job(s) requeued")
        if self._tick_changes is None:
            self._commit(changes)
        return hit

    def _requeue(self, hit: Sequence[JobId], why: str, now_s: float, changes: _Changes,
                 reason: str) -> None:
        """Jobs whose node went: back in their queues, whole, with ``why``."""
        for jid in hit:
            rec = self.jobs[jid]
            self.backend.stop(rec.key)
            rec.phase, rec.placements, rec.started_s, rec.flavor = "Pending", (), None, ""
            rec.message = f"{why}; back in its queue"
            changes.job(rec.key, phase="Pending", placements=[], started_s=None, flavor="",
                        message=rec.message)
            changes.event(now_s, reason, "Job", rec.key, rec.message, rec.request.namespace,
                          warning=True)

    def provisioning_requests(self) -> list[ProvisioningRequest]:
        with self.lock:
            return self.scheduler.provisioning_requests()

    def provisioning_request(self, key: str) -> ProvisioningRequest:
        with self.lock:
            req = self.scheduler.provisioning_request(key)
            if req is None:
                raise NotFoundError(f"ProvisioningRequest {key} not found")
            return req

    def delete_provisioning_request(self, key: str) -> ProvisioningRequest:
        """Cancel a request: the cloud stops provisioning it (or lets its nodes go once
        idle); a job waiting for it backs off and retries."""
        with self.lock:
            req = self.provisioning_request(key)
            now = self.clock.now()
            self.scheduler.delete_provisioning_request(key, now)
            changes = _Changes()
            changes.event(now, "Deleted", "ProvisioningRequest", key, "deleted (cancelled)",
                          req.namespace)
            self._save_provisioning(changes)
            self._commit(changes)
            return req

    def _record(self, fill: Any) -> list[Any]:
        changes = _Changes()
        fill(changes)
        return self._commit(changes)

    def _commit(self, changes: _Changes) -> list[Any]:
        if not changes.jobs and not changes.events and not changes.objects:
            return []
        with self.store.transaction() as tx:
            for key, fields in changes.jobs.items():
                tx.update_job(key, **fields)
            for (kind, name), body in changes.objects.items():
                if body is None:
                    tx.delete_object(kind, name)
                else:
                    tx.put_object(kind, name, body)
            out = tx.add_events(changes.events)
            tx.set_meta("clock", f"{self.clock.now()} {self.clock.wall()}")
        return out

    # -- jobs --------------------------------------------------------------------------------

    def submit(self, body: object, namespace: str | None = None, *,
               sync: bool = True) -> JobRecord:
        """Accept a Job document: written to the state file and queued, or an error and
        nothing changed (InvalidJobError, NotFoundError for a queue, ConflictError).

        The write is made durable after the lock is let go, so that submissions arriving
        together share one fsync; with ``sync=False`` that is left to the caller, who calls
        ``sync()`` before acknowledging (and may then read the record under the lock first).
        """
        rec = self._submit(body, namespace)
        if sync:
            self.sync()
        return rec

    def sync(self) -> None:
        """Every write so far on disk (see ``Store.sync``); call it holding no lock."""
        self.store.sync()

    def _submit(self, body: object, namespace: str | None) -> JobRecord:
        check_metadata(body)  # before the lock: a refusal costs no one a wait
        with self.lock:
            now = self.clock.now()
            request = parse_job(body, self.config, namespace=namespace, submit_time_s=now)
            if request.key in self.jobs:
                raise ConflictError(f"job {request.key} already exists "
                                    f"({self.jobs[request.key].phase})")
            sched = self.scheduler
            cq = sched.resolve_queue(request.job.queue)
            try:
                sched.submit(request.job, now)  # checks it could ever run here, then queues
            except InvalidJobError as exc:
                raise _in_document_terms(exc, request) from None
            try:
                with self.store.transaction(durable=False) as tx:
                    uid = tx.insert_job(request.key, request.namespace, request.name,
                                        request.queue, request.document, now)
                    tx.add_events([NewEvent(now, "Normal", "Submitted", "Job", request.key,
                                            request.namespace, f"queued in {request.queue} "
                                            f"(ClusterQueue {cq})")])
            except BaseException:
                sched.cancel(request.job.id, now)  # not on disk, so not accepted
                raise
            rec = JobRecord(uid, request, "Pending", now, cluster_queue=cq)
            self.jobs[request.key] = rec
            self.metrics.submitted(cq)
            return rec

    def job(self, key: str) -> JobRecord:
        with self.lock:
            rec = self.jobs.get(key)
            if rec is None:
                raise NotFoundError(f"job {key} not found")
            return rec

    def cancel(self, key: str) -> JobRecord:
        """Cancel a pending or running job (its cards are free at once). Idempotent: a job
        that has ended already is left as it is, record and all (``delete`` removes it)."""
        with self.lock:
            rec = self.job(key)
            if rec.phase in TERMINAL:
                return rec
            self._cancel(rec, self.clock.now())
            return rec

    def delete(self, key: str) -> JobRecord:
        """Delete a job: cancelled first if it is pending or running, then its record is
        removed (its events stay), so that its name can be used again. Returns the record
        as it was last."""
        with self.lock:
            rec = self.job(key)
            now = self.clock.now()
            if rec.phase not in TERMINAL:
                self._cancel(rec, now)
            with self.store.transaction() as tx:
                tx.delete_job(key)
                tx.add_events([NewEvent(now, "Normal", "Deleted", "Job", key,
                                        rec.request.namespace,
                                        f"deleted ({rec.phase.lower()})")])
            del self.jobs[key]
            return rec

    def _cancel(self, rec: JobRecord, now: float) -> None:
        key = rec.key
        with self.store.transaction() as tx:  # on disk first: a failed write cancels nothing
            tx.update_job(key, phase="Cancelled", finished_s=now, message="cancelled")
            tx.add_events([NewEvent(now, "Normal", "Cancelled", "Job", key,
                                    rec.request.namespace,
                                    f"cancelled while {rec.phase.lower()}")])
        if rec.phase == "Running":
            self.backend.stop(key)
        self.scheduler.cancel(JobId(key), now)
        rec.phase, rec.finished_s, rec.message = "Cancelled", now, "cancelled"
        changes = _Changes()
        self._save_provisioning(changes)
        self._commit(changes)

    # -- the loop ----------------------------------------------------------------------------

    def tick(self) -> TickResult:
        """Finish jobs that ended, run one cycle, carry out and record its decisions."""
        with self.lock:
            now = self.clock.now()
            out = TickResult(now)
            changes = _Changes()
            for key in self.backend.due(now):
                rec = self.jobs.get(key)
                if rec is None or rec.phase != "Running":
                    continue
                limit = self.scheduler.run_limit_s(JobId(key))
                self.scheduler.finished(JobId(key), now)
                limited = limit is not None and (rec.job.duration_s or 0.0) > limit
                rec.phase = "Failed" if limited else "Succeeded"
                rec.finished_s = now
                rec.message = (f"stopped at its run limit ({limit:g} s)"
                               if limited else "completed")
                changes.job(key, phase=rec.phase, finished_s=now, message=rec.message)
                changes.event(now, "RunLimitReached" if limited else "Completed", "Job", key,
                              rec.message, rec.request.namespace, warning=limited)
                out.finished += 1
            self._tick_changes = changes
            try:
                if self.cloud is not None:
                    self.cloud.advance(now)  # nodes made or taken back by now
                t0 = time.perf_counter()
                result = self.scheduler.cycle(now)
                out.decision_s = time.perf_counter() - t0
                self._carry_out(result, now, changes, out)
                if self.cloud is not None:
                    self.cloud.on_cycle(result, now)
                self._save_provisioning(changes)
            finally:
                self._tick_changes = None
            self._commit(changes)
            self.cycles += 1
            self.metrics.cycle(out.decision_s)
            self.last_tick = out
            for w in self.watchers:
                w.ticked(out)
            if time.monotonic() - self._sampled_at >= HISTORY_EVERY_S:
                self._sample(now)
            return out

    def _sample(self, now: float) -> None:
        """One point of the queues' usage over time, for the dashboard."""
        self._sampled_at = time.monotonic()
        sched = self.scheduler
        queues = {}
        for q in self.config.cluster_queues:
            usage = sched.usage(q.name)
            milli = sum(v for (_, res), v in usage.items() if res == "gpu_milli")
            queues[q.name] = {"gpu_milli": int(milli), "share": round(sched.share(q.name), 4)}
        totals = sched.totals()
        self.history.append({
            "time_s": round(now, 3), "queues": queues,
            "allocated_pct": round(100 * totals["gpu_milli_used"] /
                                   max(1, totals["gpu_milli_total"]), 2),
            "pending": sched.pending_count()})

    def _carry_out(self, result: CycleResult, now: float, changes: _Changes,
                   out: TickResult) -> None:
        for ev in result.evicts:
            rec = self.jobs[ev.job]
            self.backend.stop(rec.key)
            rec.phase, rec.placements, rec.started_s, rec.flavor = "Pending", (), None, ""
            rec.preemptions += 1
            ns = rec.request.namespace
            rec.message = _for_owner(ev.message, ns, self.jobs)
            changes.job(rec.key, phase="Pending", placements=[], started_s=None, flavor="",
                        preemptions=rec.preemptions, message=rec.message)
            changes.event(now, "Preempted", "Job", rec.key, _for_owner(
                f"{ev.reason}: preempted by {ev.preemptor}; back in its queue", ns,
                self.jobs), ns, warning=True)
            self.metrics.preempted(ev.queue, ev.reason)
            out.evicted += 1
        for b in result.binds:
            rec = self.jobs[b.job]
            self.scheduler.confirm(b.placements)
            rec.phase, rec.placements, rec.started_s = "Running", b.placements, now
            rec.flavor, rec.cluster_queue, rec.message = b.flavor, b.queue, ""
            self.backend.start(rec.key, b.placements, now, self._end_s(rec))
            nodes = sorted({pl.node for pl in b.placements})
            changes.job(rec.key, phase="Running", started_s=now, flavor=b.flavor, message="",
                        placements=[placement_to_json(pl) for pl in b.placements])
            changes.event(now, "Admitted", "Job", rec.key,
                          f"admitted by ClusterQueue {b.queue} (flavor {b.flavor or '-'}) "
                          f"after {now - rec.submitted_s:.0f} s; bound to "
                          f"{', '.join(nodes[:4])}{' ...' if len(nodes) > 4 else ''}",
                          rec.request.namespace)
            self.metrics.admitted(b.queue, now - rec.submitted_s)
            out.bound += 1
        for p in result.parks:
            parked = self.jobs.get(p.job)
            if parked is not None:
                message = usable_only(p.status.message, self._usable(parked),
                                      (f.name for f in self.config.flavors))
                parked.message = _for_owner(message, parked.request.namespace, self.jobs)
                out.parked += 1

    def _usable(self, rec: JobRecord) -> set[str]:
        """The flavors of the job's ClusterQueue whose nodes could hold it (cached while the
        nodes stay as they are)."""
        version = self.scheduler.nodes_version
        hit = self._usable_cache.get(rec.key)
        if hit is not None and hit[0] == version:
            return hit[1]
        usable = self.scheduler.usable_flavors(rec.job, rec.cluster_queue)
        if len(self._usable_cache) > 100_000:
            self._usable_cache.clear()
        self._usable_cache[rec.key] = (version, usable)
        return usable

    # -- queue objects -----------------------------------------------------------------------

    def queue_objects(self, kind: str) -> list[tuple[str, dict[str, Any]]]:
        with self.lock:
            return [(n, dict(b)) for (k, n), b in self.queue_docs.items() if k == kind]

    def queue_object(self, kind: str, name: str) -> dict[str, Any]:
        with self.lock:
            body = self.queue_docs.get((kind, name))
            if body is None:
                raise NotFoundError(f"{kind} {name} not found")
            return dict(body)

    def put_queue_object(self, kind: str, body: Mapping[str, Any], *,
                         create: bool) -> dict[str, Any]:
        """Create (``create``) or replace a queue object. The whole queue configuration is
        checked with it (ConfigError names the field), and the scheduler is rebuilt."""
        with self.lock:
            body = dict(body)
            if body.get("kind", kind) != kind:
                raise ConfigError(f"kind={body.get('kind')!r} does not match the endpoint "
                                  f"({kind})")
            body["kind"] = kind
            name = _key_of(kind, body)
            exists = (kind, name) in self.queue_docs
            if create and exists:
                raise ConflictError(f"{kind} {name} already exists")
            if not create and not exists:
                raise NotFoundError(f"{kind} {name} not found")
            docs = dict(self.queue_docs)
            docs[(kind, name)] = body
            self._apply_queue_docs(docs, lambda tx: tx.put_object(kind, name, body),
                                   f"{kind} {name} {'created' if create else 'updated'}",
                                   _namespace_of(kind, name))
            return body

    def delete_queue_object(self, kind: str, name: str) -> None:
        with self.lock:
            if (kind, name) not in self.queue_docs:
                raise NotFoundError(f"{kind} {name} not found")
            docs = {k: v for k, v in self.queue_docs.items() if k != (kind, name)}
            if kind in ("ClusterQueue", "LocalQueue"):
                busy = [r.key for r in self.jobs.values() if r.phase in ACTIVE and (
                    r.cluster_queue == name if kind == "ClusterQueue" else
                    r.request.queue == name)]
                if busy:
                    raise ConflictError(f"{kind} {name} has {len(busy)} pending or running "
                                        f"job(s) (e.g. {busy[0]}); cancel them first")
            self._apply_queue_docs(docs, lambda tx: tx.delete_object(kind, name),
                                   f"{kind} {name} deleted", _namespace_of(kind, name))

    def _apply_queue_docs(self, docs: dict[tuple[str, str], dict[str, Any]], write: Any,
                          message: str, namespace: str = "") -> None:
        config = self._config(docs)
        for rec in self.jobs.values():
            if rec.phase in ACTIVE:
                try:
                    parse_job(rec.request.document, config)
                except InvalidJobError as exc:
                    raise ConflictError(f"the change would leave job {rec.key} without its "
                                        f"queue: {exc}") from None
        old = (self.queue_docs, self.config)
        requests = {key: rec.request for key, rec in self.jobs.items()}
        self.queue_docs, self.config = docs, config
        try:
            for rec in self.jobs.values():
                if rec.phase in ACTIVE:
                    rec.request = parse_job(rec.request.document, config,
                                            submit_time_s=rec.submitted_s)
            self._build()
            now = self.clock.now()
            with self.store.transaction() as tx:
                write(tx)
                tx.add_events([NewEvent(now, "Normal", "QueuesChanged", "Queue", "",
                                        namespace, message)])
        except Exception:  # the change is not on disk: it is not made at all
            self.queue_docs, self.config = old
            for key, rec in self.jobs.items():
                rec.request = requests[key]
            self._build()
            raise

    # -- nodes -------------------------------------------------------------------------------

    def add_nodes(self, pool: Mapping[str, Any]) -> list[Node]:
        """Nodes from one node-pool spec (the shape of cluster.yaml's ``nodePools`` items)."""
        gpus = pool.get("gpus")
        for path, value, limit in (
                ("count", pool.get("count"), MAX_POOL_NODES),
                ("gpus.count", gpus.get("count") if isinstance(gpus, Mapping) else None,
                 MAX_NODE_GPUS)):
            if isinstance(value, int) and value > limit:  # refused before anything is built
                raise ConfigError(f"request: {path}={value} is more than {limit:,}")
        with self.lock:
            doc = Document("request", 1, {"apiVersion": "gpupool.io/v1alpha1",
                                          "kind": "Cluster", "metadata": {"name": "api"},
                                          "nodePools": [dict(pool)]})
            nodes = nodes_from_documents([doc], source="request")
            clash = [n.name for n in nodes if n.name in self.node_status]
            if clash:
                raise ConflictError(f"node {clash[0]} already exists")
            now = self.clock.now()
            with self.store.transaction() as tx:
                for n in nodes:
                    tx.put_object("Node", n.name, {"node": node_to_json(n), "failed": False})
                tx.add_events([NewEvent(now, "Normal", "NodeAdded", "Node", n.name, "",
                                        f"{n.gpu_count} GPU(s) "
                                        f"{n.gpus[0].model if n.gpus else ''}".strip())
                               for n in nodes])
            for n in nodes:
                self.node_status[n.name] = {"node": node_to_json(n), "failed": False}
                self.scheduler.add_node(n)
            return nodes

    def set_node(self, name: str, *, unschedulable: bool | None = None,
                 failed: bool | None = None) -> dict[str, Any]:
        """Cordon/uncordon, fail/recover a node. A failed node's jobs go back to their queues
        whole (gangs included)."""
        with self.lock:
            body = self.node_status.get(name)
            if body is None:
                raise NotFoundError(f"node {name} not found")
            body = {"node": dict(body["node"]), "failed": bool(body.get("failed"))}
            changes = _Changes()
            now = self.clock.now()
            if unschedulable is not None and body["node"]["schedulable"] == unschedulable:
                body["node"]["schedulable"] = not unschedulable
                if not body["failed"]:
                    self.scheduler.update_node(node_from_json(body["node"]))
                changes.event(now, "Cordoned" if unschedulable else "Uncordoned", "Node",
                              name, "marked unschedulable" if unschedulable else
                              "schedulable again")
            if failed is not None and failed != body["failed"]:
                body["failed"] = failed
                if failed:
                    hit = self.scheduler.remove_node(NodeName(name), now)
                    for w in self.watchers:
                        w.node_failed(name)
                    self._requeue(hit, f"node {name} failed", now, changes, "NodeFailed")
                    changes.event(now, "NodeFailed", "Node", name,
                                  f"node failed; {len(hit)} job(s) requeued", warning=True)
                else:
                    self.scheduler.add_node(node_from_json(body["node"]))
                    changes.event(now, "NodeRecovered", "Node", name, "node is back")
            with self.store.transaction() as tx:
                tx.put_object("Node", name, body)
                for key, fields in changes.jobs.items():
                    tx.update_job(key, **fields)
                tx.add_events(changes.events)
            self.node_status[name] = body
            return body

    def drain_node(self, name: str) -> list[str]:
        """Cordon a node and send its jobs back to their queues, whole (kubectl's drain:
        its pods are evicted and scheduled again elsewhere). ElasticGPUs bound on it stay,
        as volumes stay with a drained node. Returns the jobs requeued."""
        with self.lock:
            body = self.set_node(name, unschedulable=True)
            if body["failed"]:
                return []
            now = self.clock.now()
            hit = sorted({p.job for p in self.scheduler.placements_on(NodeName(name))
                          if p.job in self.jobs and self.jobs[p.job].phase == "Running"})
            for job in hit:
                self.scheduler.requeue(job, now)
            changes = _Changes()
            self._requeue(hit, f"node {name} was drained", now, changes, "Drained")
            changes.event(now, "Drained", "Node", name,
                          f"drained: {len(hit)} job(s) back in their queues")
            self._commit(changes)
            return [str(j) for j in hit]

    def delete_node(self, name: str) -> None:
        with self.lock:
            body = self.node_status.get(name)
            if body is None:
                raise NotFoundError(f"node {name} not found")
            if not body.get("failed"):
                self.set_node(name, failed=True)
            with self.store.transaction() as tx:
                tx.delete_object("Node", name)
                tx.add_events([NewEvent(self.clock.now(), "Normal", "NodeRemoved", "Node",
                                        name, "", "node removed")])
            del self.node_status[name]

    # -- estimates ---------------------------------------------------------------------------

    def estimates(self) -> dict[JobId, tuple[int, float | None]]:
        """Queue position and estimated start of pending jobs, refreshed at most once a
        second (a shadow run of the queues)."""
        with self.lock:
            wall = time.monotonic()
            if wall - self._estimated_at >= ESTIMATE_EVERY_S:
                self._estimates = self.scheduler.estimates(self.clock.now())
                self._estimated_at = wall
            return self._estimates

    def trim_events(self) -> None:
        with self.store.transaction() as tx:
            tx.trim_events(EVENTS_KEPT)

