"""Queue objects (ResourceFlavor, ClusterQueue, LocalQueue, ...): read, created, replaced and
deleted through the API. The whole configuration is checked with each change and the scheduler
rebuilt; a change that is not on disk is not made at all."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from gpupool.config.jobs import parse_job
from gpupool.control import recovery
from gpupool.control.records import ACTIVE, key_of, namespace_of
from gpupool.core.errors import ConfigError, ConflictError, InvalidJobError, NotFoundError
from gpupool.store.sqlite import NewEvent

if TYPE_CHECKING:
    from gpupool.control.plane import ControlPlane


def queue_objects(plane: ControlPlane, kind: str) -> list[tuple[str, dict[str, Any]]]:
    with plane.lock:
        return [(n, dict(b)) for (k, n), b in plane.queue_docs.items() if k == kind]


def queue_object(plane: ControlPlane, kind: str, name: str) -> dict[str, Any]:
    with plane.lock:
        body = plane.queue_docs.get((kind, name))
        if body is None:
            raise NotFoundError(f"{kind} {name} not found")
        return dict(body)


def put_queue_object(
    plane: ControlPlane, kind: str, body: Mapping[str, Any], *, create: bool
) -> dict[str, Any]:
    """Create (``create``) or replace a queue object. The whole queue configuration is
    checked with it (ConfigError names the field), and the scheduler is rebuilt."""
    with plane.lock:
        body = dict(body)
        if body.get("kind", kind) != kind:
            raise ConfigError(f"kind={body.get('kind')!r} does not match the endpoint ({kind})")
        body["kind"] = kind
        name = key_of(kind, body)
        exists = (kind, name) in plane.queue_docs
        if create and exists:
            raise ConflictError(f"{kind} {name} already exists")
        if not create and not exists:
            raise NotFoundError(f"{kind} {name} not found")
        docs = dict(plane.queue_docs)
        docs[(kind, name)] = body
        _apply(
            plane,
            docs,
            lambda tx: tx.put_object(kind, name, body),
            f"{kind} {name} {'created' if create else 'updated'}",
            namespace_of(kind, name),
        )
        return body


def delete_queue_object(plane: ControlPlane, kind: str, name: str) -> None:
    with plane.lock:
        if (kind, name) not in plane.queue_docs:
            raise NotFoundError(f"{kind} {name} not found")
        docs = {k: v for k, v in plane.queue_docs.items() if k != (kind, name)}
        if kind in ("ClusterQueue", "LocalQueue"):
            busy = [
                r.key
                for r in plane.jobs.values()
                if r.phase in ACTIVE
                and (r.cluster_queue == name if kind == "ClusterQueue" else r.request.queue == name)
            ]
            if busy:
                raise ConflictError(
                    f"{kind} {name} has {len(busy)} pending or running "
                    f"job(s) (e.g. {busy[0]}); cancel them first"
                )
        _apply(
            plane,
            docs,
            lambda tx: tx.delete_object(kind, name),
            f"{kind} {name} deleted",
            namespace_of(kind, name),
        )


def _apply(
    plane: ControlPlane,
    docs: dict[tuple[str, str], dict[str, Any]],
    write: Callable[[Any], None],
    message: str,
    namespace: str = "",
) -> None:
    config = recovery.config_of(docs)
    for rec in plane.jobs.values():
        if rec.phase in ACTIVE:
            try:
                parse_job(rec.request.document, config)
            except InvalidJobError as exc:
                raise ConflictError(
                    f"the change would leave job {rec.key} without its queue: {exc}"
                ) from None
    old = (plane.queue_docs, plane.config)
    requests = {key: rec.request for key, rec in plane.jobs.items()}
    plane.queue_docs, plane.config = docs, config
    try:
        for rec in plane.jobs.values():
            if rec.phase in ACTIVE:
                rec.request = parse_job(rec.request.document, config, submit_time_s=rec.submitted_s)
        recovery.build(plane)
        now = plane.clock.now()
        plane.journal.write(
            write, [NewEvent(now, "Normal", "QueuesChanged", "Queue", "", namespace, message)]
        )
    except Exception:  # the change is not on disk: it is not made at all
        plane.queue_docs, plane.config = old
        for key, rec in plane.jobs.items():
            rec.request = requests[key]
        recovery.build(plane)
        raise
