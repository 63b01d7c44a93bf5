"""The cluster :class:`~gpupool.k8s.replay.ReplayServer` serves: which Nodes and Pods exist,
as JSON, and every change to them as a versioned watch event.

``nodes`` nodes of ``gpus`` cards (``k8s/replay_objects.py``) and ``pods`` pods: ``pending`` of
gpupool's waiting, a quarter of the rest gpupool's already bound (one whole card each, recorded
in ``gpupool.io/placement``), the others DaemonSet-like pods of other schedulers. Objects
nobody changed are built from one template per kind when they are listed; only changed ones
are held, so the cluster keeps no dict per object. Each change takes the next
``resourceVersion``, is kept in a bounded history (older versions are compacted away) and is
sent to every open watch of its kind.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections import deque
from typing import Any

from gpupool.k8s.replay_objects import (
    CARD_MIB,
    SENTINEL,
    SENTINEL_UID,
    JsonTemplate,
    realistic_node,
    realistic_pod,
)

__all__ = ["ReplayCluster", "dumps"]


class ReplayCluster:
    """The replayed cluster's objects, versions and watch history (see the module's
    docstring); ``history``: how many changes are kept for watches to resume from."""

    def __init__(
        self,
        nodes: int,
        pods: int,
        pending: int,
        *,
        gpus: int = 8,
        history: int = 20_000,
    ) -> None:
        self.n_nodes = nodes
        self.gpus = gpus
        self.n_pods = pods
        self.pending = pending
        self.rv = 1
        # only changed objects are held, as JSON-ready dicts; the rest come from templates
        self.nodes: dict[str, dict[str, Any]] = {}
        self.pods: dict[str, dict[str, Any]] = {}
        self.history: deque[tuple[int, str, bytes]] = deque(maxlen=history)
        self.watchers: dict[str, set[asyncio.Queue[bytes | None]]] = {"nodes": set(), "pods": set()}
        self._templates: dict[str, JsonTemplate] = {}
        self._node_text: dict[int, bytes] = {}
        own_bound = (pods - pending) // 4
        self.own_bound = min(own_bound, nodes * max(0, gpus - 2))
        self.others = pods - pending - self.own_bound

    # -- the objects ------------------------------------------------------------------------

    def _pod_key(self, i: int) -> tuple[str, str]:
        return f"team-{i % 50:02d}", f"pod-{i:06d}"

    def _pod_shape(self, i: int) -> tuple[str, str, str]:
        """(kind, node, placement annotation) of pod ``i``."""
        if i < self.pending:
            return "pending", "", ""
        j = i - self.pending
        if j < self.own_bound:
            per = max(1, self.gpus - 2)
            node = f"node-{j // per:05d}"
            ns, name = self._pod_key(i)
            place = json.dumps(
                {
                    "job": f"{ns}/{name}",
                    "task": f"{ns}/{name}/ps0-0",
                    "queue": "default",
                    "flavor": "",
                    "node": node,
                    "cpu": 2000,
                    "mem": 8192,
                    "start": 0.0,
                    "gang": 1,
                    "cards": [[j % per, 1000, CARD_MIB, None]],
                },
                separators=(",", ":"),
            )
            return "own", node, place
        return "other", f"node-{j % self.n_nodes:05d}", ""

    def _make_pod_as(self, kind: str, i: int, node: str, place: str) -> dict[str, Any]:
        if kind == "pending":
            return realistic_pod(i, node="", scheduler="gpupool")
        if kind == "own":
            return realistic_pod(i, node=node, scheduler="gpupool", placement=place)
        return realistic_pod(i, node=node, scheduler="default-scheduler", gpu=False)

    def _make_pod(self, i: int) -> dict[str, Any]:
        return self._make_pod_as(*self._pod_shape(i)[:1], i, *self._pod_shape(i)[1:])

    def pod_object(self, i: int) -> dict[str, Any]:
        ns, name = self._pod_key(i)
        return self.pods.get(f"{ns}/{name}") or self._make_pod(i)

    def pod_json(self, i: int) -> bytes:
        """Pod ``i`` as JSON: from its kind's template unless it changed."""
        ns, name = self._pod_key(i)
        changed = self.pods.get(f"{ns}/{name}")
        if changed is not None:
            return dumps(changed).encode()
        kind, node, place = self._pod_shape(i)
        tpl = self._templates.get(kind)
        if tpl is None:
            sample = self._make_pod_as(kind, SENTINEL, node and "@NODE@", place and "@PLACE@")
            tpl = self._templates[kind] = JsonTemplate(dumps(sample))
        return tpl.fill(
            {
                "pod-999999": name,
                "team-49": ns,
                SENTINEL_UID: str(uuid.UUID(int=i + 1)),
                "@NODE@": node,
                "@PLACE@": json.dumps(place)[1:-1],
            }
        ).encode()

    def node_json(self, i: int) -> bytes:
        name = f"node-{i:05d}"
        if name in self.nodes:
            return dumps(self.nodes[name]).encode()
        text = self._node_text.get(i)
        if text is None:
            text = self._node_text[i] = dumps(realistic_node(i, gpus=self.gpus)).encode()
        return text

    def node_object(self, i: int) -> dict[str, Any]:
        return self.nodes.get(f"node-{i:05d}") or realistic_node(i, gpus=self.gpus)

    def _index(self, kind: str, name: str) -> int | None:
        try:
            i = int(name.rsplit("-", 1)[1])
        except (IndexError, ValueError):
            return None
        return i if 0 <= i < (self.n_nodes if kind == "nodes" else self.n_pods) else None

    def _changed(self, kind: str, event: str, obj: dict[str, Any]) -> None:
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        line = dumps({"type": event, "object": obj}).encode() + b"\n"
        self.history.append((self.rv, kind, line))
        for q in self.watchers[kind]:
            q.put_nowait(line)


def dumps(obj: object) -> str:
    """Compact JSON, as the API server writes it."""
    return json.dumps(obj, separators=(",", ":"))
