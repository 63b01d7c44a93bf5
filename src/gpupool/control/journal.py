"""The journal: the only writer to the state file.

Every change the control plane makes is written here before it is acknowledged, each in one
transaction, with the events that tell of it and the cluster time it was made at (read back
at a restart to resume the clock). ``Changes`` gathers what one step changed (job fields,
objects, events) so that a whole cycle is one write.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpupool.config.jobs import JobRequest
from gpupool.control.clock import Clock
from gpupool.control.codec import node_to_json
from gpupool.core.model import Node
from gpupool.store.sqlite import NewEvent, Store


@dataclass(slots=True)
class Changes:
    """What one step changed: job fields by key, objects by (kind, name) (None: deleted), and
    the events that tell of it."""

    jobs: dict[str, dict[str, Any]] = field(default_factory=dict)
    events: list[NewEvent] = field(default_factory=list)
    objects: dict[tuple[str, str], dict[str, Any] | None] = field(default_factory=dict)

    def job(self, key: str, **fields: Any) -> None:  # noqa: ANN401 (the store's columns)
        self.jobs.setdefault(key, {}).update(fields)

    def event(  # noqa: PLR0913
        self,
        time_s: float,
        reason: str,
        kind: str,
        obj: str,
        message: str,
        namespace: str = "",
        warning: bool = False,
    ) -> None:
        """An event's fields, as ``kubectl get events`` shows them."""
        self.events.append(
            NewEvent(
                time_s, "Warning" if warning else "Normal", reason, kind, obj, namespace, message
            )
        )

    def empty(self) -> bool:
        return not (self.jobs or self.events or self.objects)


class Journal:
    def __init__(self, store: Store, clock: Clock) -> None:
        self.store = store
        self.clock = clock

    def _stamp(self, tx: Any) -> None:  # noqa: ANN401 (the store's transaction)
        tx.set_meta("clock", f"{self.clock.now()} {self.clock.wall()}")

    # -- start-up --------------------------------------------------------------------------

    def seed(
        self, nodes: Sequence[Node], queue_docs: Iterable[tuple[str, str, Mapping[str, Any]]]
    ) -> bool:
        """A new state file gets its first nodes and queue objects (True); an existing one is
        the truth, and the clock resumes from the time it last wrote (False)."""
        if self.store.meta("created") is not None:
            last_s, last_wall = (float(x) for x in (self.store.meta("clock") or "0 0").split())
            self.clock.resume(last_s, last_wall)
            return False
        docs = list(queue_docs)
        with self.store.transaction() as tx:
            for node in nodes:
                tx.put_object("Node", node.name, {"node": node_to_json(node), "failed": False})
            for kind, name, doc in docs:
                tx.put_object(kind, name, dict(doc))
            tx.set_meta("created", str(self.clock.wall()))
            self._stamp(tx)
            tx.add_events(
                [
                    NewEvent(
                        self.clock.now(),
                        "Normal",
                        "Started",
                        "Cluster",
                        "",
                        "",
                        f"new state file: {len(nodes)} nodes, {len(docs)} queue objects",
                    )
                ]
            )
        return True

    # -- writes ----------------------------------------------------------------------------

    def commit(self, changes: Changes) -> list[Any]:
        """``changes`` in one transaction (nothing when there are none)."""
        if changes.empty():
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
            self._stamp(tx)
        return out

    def record(self, fill: Callable[[Changes], None]) -> list[Any]:
        changes = Changes()
        fill(changes)
        return self.commit(changes)

    def insert_job(self, request: JobRequest, now: float, event: NewEvent) -> int:
        """A new job, not made durable yet (``sync`` does, for many submissions at once)."""
        with self.store.transaction(durable=False) as tx:
            uid = tx.insert_job(
                request.key, request.namespace, request.name, request.queue, request.document, now
            )
            tx.add_events([event])
        return int(uid)

    def delete_job(self, key: str, event: NewEvent) -> None:
        with self.store.transaction() as tx:
            tx.delete_job(key)
            tx.add_events([event])

    def write(self, write: Callable[[Any], None], events: Sequence[NewEvent]) -> None:
        """A write of the caller's (queue objects, ElasticGPU objects) with its events."""
        with self.store.transaction() as tx:
            write(tx)
            if events:
                tx.add_events(list(events))

    def trim_events(self, kept: int) -> None:
        with self.store.transaction() as tx:
            tx.trim_events(kept)

    def sync(self) -> None:
        """Every write so far on disk (see ``Store.sync``)."""
        self.store.sync()
