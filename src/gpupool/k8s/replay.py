"""An HTTP server that speaks the API server's list/watch protocol over realistic Nodes and
Pods (``k8s/replay_objects.py``): the cluster of ``gpupool k8s bench --scale`` where the
2-core machine cannot hold 100,000 pods in etcd. The objects, their versions and the watch
history are the :class:`~gpupool.k8s.replay_cluster.ReplayCluster` it extends (objects nobody
changed are built from one template per kind when they are listed, so it keeps no dict per
object); this module is the protocol.

:class:`ReplayServer` answers what ``gpupool k8s run`` asks, as kube-apiserver v1.20 does:

- ``GET`` lists of nodes and pods in pages (``limit``/``continue``), with the list's
  ``resourceVersion``; ``watch=true`` streams JSON lines from a version (a version older
  than the kept history is an ``ERROR`` event with code 410, as after compaction);
- single GETs; merge PATCHes of node and pod metadata with the ``resourceVersion`` (and pod
  UID) preconditions (``409 Conflict`` otherwise); strategic PATCHes of pod status;
  ``POST .../binding`` (``409`` when already bound); Events (POST, PATCH);
- Leases (GET, POST, PUT with ``resourceVersion``), recording each renewal's time;
- everything else ``404`` (no Kueue, no CRDs, no DRA: gpupool's defaults).

It plays HAMi's device plugin too: when a pod is bound to a node whose ``hami.io/mutex.lock``
names it, ``Allocate`` "runs": the pod's ``hami.io/bind-phase`` becomes ``success``, it is
``Running``, and the lock is released, each as a MODIFIED watch event.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from gpupool.k8s.replay_cluster import ReplayCluster, dumps

__all__ = ["ReplayServer", "ReplayStats"]

LOCK = "hami.io/mutex.lock"


@dataclass
class ReplayStats:
    list_requests: int = 0
    list_bytes: int = 0
    first_request_s: float = 0.0
    synced_s: dict[str, float] = field(default_factory=dict)  # kind -> first watch time
    binds: list[float] = field(default_factory=list)
    status_writes: int = 0
    events_written: int = 0
    renewals: list[tuple[float, str]] = field(default_factory=list)  # (time, holder)
    conflicts: int = 0


class ReplayServer(ReplayCluster):
    """The API server over a :class:`~gpupool.k8s.replay_cluster.ReplayCluster` of ``nodes``
    nodes and ``pods`` pods, ``pending`` of them gpupool's and waiting; it counts what it
    served in ``stats``."""

    def __init__(
        self,
        nodes: int,
        pods: int,
        pending: int,
        *,
        gpus: int = 8,
        history: int = 20_000,
        page_limit: int = 500,
    ) -> None:
        super().__init__(nodes, pods, pending, gpus=gpus, history=history)
        self.stats = ReplayStats()
        self.page_limit = page_limit
        self.lease: dict[str, Any] | None = None
        self.events: dict[str, dict[str, Any]] = {}

    # -- HTTP -------------------------------------------------------------------------------

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 << 20)
        r = app.router
        r.add_get("/replay/stats", self.h_stats)
        r.add_get("/api/v1/nodes", lambda q: self.h_collection(q, "nodes"))
        r.add_get("/api/v1/pods", lambda q: self.h_collection(q, "pods"))
        r.add_get("/api/v1/nodes/{name}", self.h_get_node)
        r.add_patch("/api/v1/nodes/{name}", self.h_patch_node)
        r.add_get("/api/v1/namespaces/{ns}/pods/{name}", self.h_get_pod)
        r.add_patch("/api/v1/namespaces/{ns}/pods/{name}", self.h_patch_pod)
        r.add_patch("/api/v1/namespaces/{ns}/pods/{name}/status", self.h_pod_status)
        r.add_post("/api/v1/namespaces/{ns}/pods/{name}/binding", self.h_bind)
        r.add_post("/api/v1/namespaces/{ns}/events", self.h_event)
        r.add_patch("/api/v1/namespaces/{ns}/events/{name}", self.h_event)
        base = "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases"
        r.add_get(base + "/{name}", self.h_lease_get)
        r.add_put(base + "/{name}", self.h_lease_put)
        r.add_post(base, self.h_lease_put)
        r.add_route("*", "/{tail:.*}", self.h_missing)
        return app

    async def h_missing(self, req: web.Request) -> web.Response:
        return _status(404, "NotFound", f"the server could not find {req.path}")

    async def h_stats(self, req: web.Request) -> web.Response:
        s = self.stats
        return web.json_response(
            {
                "list_requests": s.list_requests,
                "list_bytes": s.list_bytes,
                "first_request_s": s.first_request_s,
                "synced_s": s.synced_s,
                "binds": len(s.binds),
                "first_bind_s": min(s.binds, default=0.0),
                "last_bind_s": max(s.binds, default=0.0),
                "status_writes": s.status_writes,
                "events_written": s.events_written,
                "renewals": s.renewals,
                "conflicts": s.conflicts,
                "pending": self.pending,
                "own_bound": self.own_bound,
                "others": self.others,
            }
        )

    async def h_collection(self, req: web.Request, kind: str) -> web.StreamResponse:
        if not self.stats.first_request_s:
            self.stats.first_request_s = time.time()
        if req.query.get("watch") in ("true", "1"):
            return await self._watch(req, kind)
        limit = int(req.query.get("limit") or 0) or (
            self.n_nodes if kind == "nodes" else self.n_pods
        )
        start, rv = 0, self.rv
        token = req.query.get("continue")
        if token:
            start_s, rv_s = token.split(":")
            start, rv = int(start_s), int(rv_s)
        total = self.n_nodes if kind == "nodes" else self.n_pods
        end = min(total, start + limit)
        make = self.node_json if kind == "nodes" else self.pod_json
        items = b",".join(make(i) for i in range(start, end))
        meta: dict[str, Any] = {"resourceVersion": str(rv)}
        if end < total:
            meta["continue"] = f"{end}:{rv}"
            meta["remainingItemCount"] = total - end
        head = dumps(
            {
                "kind": "NodeList" if kind == "nodes" else "PodList",
                "apiVersion": "v1",
                "metadata": meta,
            }
        )[:-1]
        body = head.encode() + b',"items":[' + items + b"]}"
        self.stats.list_requests += 1
        self.stats.list_bytes += len(body)
        return web.Response(body=body, content_type="application/json")

    async def _watch(self, req: web.Request, kind: str) -> web.StreamResponse:
        self.stats.synced_s.setdefault(kind, time.time())
        since = int(req.query.get("resourceVersion") or self.rv)
        resp = web.StreamResponse()
        resp.content_type = "application/json"
        await resp.prepare(req)
        # the history holds every change after ``floor``; older versions are compacted
        full = self.history.maxlen is not None and len(self.history) == self.history.maxlen
        floor = self.history[0][0] - 1 if full else 0
        if since < floor:
            gone = {
                "type": "ERROR",
                "object": {
                    "kind": "Status",
                    "code": 410,
                    "reason": "Expired",
                    "status": "Failure",
                    "message": f"too old resource version: {since}",
                },
            }
            await resp.write(json.dumps(gone).encode() + b"\n")
            return resp
        q: asyncio.Queue[bytes | None] = asyncio.Queue()
        for rv, k, text in self.history:
            if rv > since and k == kind:
                q.put_nowait(text)
        self.watchers[kind].add(q)
        timeout = float(req.query.get("timeoutSeconds") or 300)
        end = time.monotonic() + timeout
        try:
            while True:
                left = end - time.monotonic()
                if left <= 0:
                    break
                try:
                    line = await asyncio.wait_for(q.get(), left)
                except TimeoutError:
                    break
                if line is None:
                    break
                await resp.write(line)
        finally:
            self.watchers[kind].discard(q)
        return resp

    async def h_get_node(self, req: web.Request) -> web.Response:
        i = self._index("nodes", req.match_info["name"])
        if i is None:
            return _status(404, "NotFound", f'nodes "{req.match_info["name"]}" not found')
        return web.json_response(self.node_object(i))

    async def h_patch_node(self, req: web.Request) -> web.Response:
        name = req.match_info["name"]
        i = self._index("nodes", name)
        if i is None:
            return _status(404, "NotFound", f'nodes "{name}" not found')
        patch = await req.json()
        node = self.node_object(i)
        meta = patch.get("metadata") or {}
        want = meta.get("resourceVersion")
        if want and want != node["metadata"]["resourceVersion"]:
            self.stats.conflicts += 1
            return _status(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on nodes "{name}": the object has been modified',
            )
        node = _copy(node)
        _merge(node["metadata"].setdefault("annotations", {}), meta.get("annotations") or {})
        _merge(node["metadata"].setdefault("labels", {}), meta.get("labels") or {})
        self.nodes[name] = node
        self._changed("nodes", "MODIFIED", node)
        return web.json_response(node)

    def _pod(self, req: web.Request) -> tuple[str, dict[str, Any] | None]:
        ns, name = req.match_info["ns"], req.match_info["name"]
        i = self._index("pods", name)
        if i is None or self._pod_key(i) != (ns, name):
            return f"{ns}/{name}", None
        return f"{ns}/{name}", self.pod_object(i)

    async def h_get_pod(self, req: web.Request) -> web.Response:
        key, pod = self._pod(req)
        if pod is None:
            return _status(404, "NotFound", f'pods "{key}" not found')
        return web.json_response(pod)

    async def h_patch_pod(self, req: web.Request) -> web.Response:
        key, pod = self._pod(req)
        if pod is None:
            return _status(404, "NotFound", f'pods "{key}" not found')
        meta = (await req.json()).get("metadata") or {}
        if meta.get("uid") and meta["uid"] != pod["metadata"]["uid"]:
            return _status(409, "Conflict", "Precondition failed: UID")
        pod = _copy(pod)
        _merge(pod["metadata"].setdefault("annotations", {}), meta.get("annotations") or {})
        _merge(pod["metadata"].setdefault("labels", {}), meta.get("labels") or {})
        self.pods[key] = pod
        self._changed("pods", "MODIFIED", pod)
        return web.json_response(pod)

    async def h_pod_status(self, req: web.Request) -> web.Response:
        key, pod = self._pod(req)
        if pod is None:
            return _status(404, "NotFound", f'pods "{key}" not found')
        conds = ((await req.json()).get("status") or {}).get("conditions") or []
        pod = _copy(pod)
        status = pod.setdefault("status", {})
        kept = [
            c
            for c in status.get("conditions") or ()
            if c.get("type") not in {d.get("type") for d in conds}
        ]
        status["conditions"] = kept + conds
        self.pods[key] = pod
        self.stats.status_writes += 1
        self._changed("pods", "MODIFIED", pod)
        return web.json_response(pod)

    async def h_bind(self, req: web.Request) -> web.Response:
        key, pod = self._pod(req)
        if pod is None:
            return _status(404, "NotFound", f'pods "{key}" not found')
        binding = await req.json()
        node = (binding.get("target") or {}).get("name")
        if pod["spec"].get("nodeName"):
            return _status(
                409,
                "Conflict",
                f'pod {key} is already assigned to node "{pod["spec"]["nodeName"]}"',
            )
        pod = _copy(pod)
        _merge(
            pod["metadata"].setdefault("annotations", {}),
            (binding.get("metadata") or {}).get("annotations") or {},
        )
        pod["spec"]["nodeName"] = node
        self.pods[key] = pod
        self.stats.binds.append(time.time())
        self._changed("pods", "MODIFIED", pod)
        asyncio.get_running_loop().call_soon(self._allocate, key, str(node))
        return _status(201, "", "", success=True)

    def _allocate(self, key: str, node_name: str) -> None:
        """HAMi's device plugin: Allocate for the locked pod, then the lock released."""
        pod = _copy(self.pods[key])
        pod["metadata"].setdefault("annotations", {})["hami.io/bind-phase"] = "success"
        pod["status"] = {**pod.get("status", {}), "phase": "Running"}
        self.pods[key] = pod
        self._changed("pods", "MODIFIED", pod)
        i = self._index("nodes", node_name)
        if i is None:
            return
        node = self.node_object(i)
        lock = (node["metadata"].get("annotations") or {}).get(LOCK, "")
        if lock.endswith("," + key.replace("/", ",")):
            node = _copy(node)
            del node["metadata"]["annotations"][LOCK]
            self.nodes[node_name] = node
            self._changed("nodes", "MODIFIED", node)

    async def h_event(self, req: web.Request) -> web.Response:
        body = await req.json()
        self.stats.events_written += 1
        name = req.match_info.get("name") or str((body.get("metadata") or {}).get("name"))
        if req.method == "PATCH" and name not in self.events:
            return _status(404, "NotFound", f'events "{name}" not found')
        self.events[name] = {**self.events.get(name, {}), **body}
        return web.json_response(self.events[name], status=201)

    async def h_lease_get(self, req: web.Request) -> web.Response:
        if self.lease is None:
            return _status(404, "NotFound", "leases not found")
        return web.json_response(self.lease)

    async def h_lease_put(self, req: web.Request) -> web.Response:
        body = await req.json()
        if req.method == "POST" and self.lease is not None:
            return _status(409, "AlreadyExists", "lease exists")
        if req.method == "PUT":
            if self.lease is None:
                return _status(404, "NotFound", "leases not found")
            if (body.get("metadata") or {}).get("resourceVersion") != self.lease["metadata"][
                "resourceVersion"
            ]:
                return _status(409, "Conflict", "the object has been modified")
        self.rv += 1
        body.setdefault("metadata", {})["resourceVersion"] = str(self.rv)
        self.lease = body
        holder = str((body.get("spec") or {}).get("holderIdentity") or "")
        self.stats.renewals.append((time.time(), holder))
        return web.json_response(body, status=201 if req.method == "POST" else 200)


def _copy(obj: dict[str, Any]) -> dict[str, Any]:
    """A copy deep enough for the changes the server makes (metadata's maps, spec, status):
    what was sent or queued before stays as it was."""
    meta = dict(obj.get("metadata") or {})
    for k in ("annotations", "labels"):
        if k in meta:
            meta[k] = dict(meta[k])
    out = {**obj, "metadata": meta}
    for k in ("spec", "status"):
        if k in obj:
            out[k] = dict(obj[k])
    return out


def _merge(into: dict[str, Any], patch: dict[str, Any]) -> None:
    for k, v in patch.items():
        if v is None:
            into.pop(k, None)
        else:
            into[k] = v


def _status(code: int, reason: str, message: str, success: bool = False) -> web.Response:
    return web.json_response(
        {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success" if success else "Failure",
            "message": message,
            "reason": reason,
            "code": code,
        },
        status=code,
    )
