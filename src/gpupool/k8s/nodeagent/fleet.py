"""The node agents of a cluster: :class:`Fleet` starts one
:class:`~gpupool.k8s.nodeagent.agent.NodeAgent` per Node, feeds them the pods bound to
their node, and keeps the :class:`~gpupool.k8s.nodeagent.ledger.Ledger`.

The agents share one pod watch and one node watch (:class:`~gpupool.k8s.informer.Informer`)
and dispatch by ``spec.nodeName``, instead of one field-selected watch per node as kubelets
keep: the events each agent sees, and their order, are the same, at a fraction of the cost
for 100 nodes.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterable
from typing import Any

from gpupool.k8s.informer import Informer
from gpupool.k8s.kube import Kube
from gpupool.k8s.nodeagent import hami
from gpupool.k8s.nodeagent.agent import NodeAgent, obj_meta, pod_key
from gpupool.k8s.nodeagent.devices import agent_cards
from gpupool.k8s.nodeagent.kubelet import Rejection
from gpupool.k8s.nodeagent.ledger import Ledger

__all__ = ["Fleet"]


class Fleet:
    """The node agents of a cluster, their shared watches and their :class:`Ledger`.

    ``nodes``: the nodes to emulate (None: every node, including ones added later).
    ``device_plugin``: ``"hami"`` (HAMi's) or ``"nvidia"`` (NVIDIA's stock plugin).
    """

    def __init__(
        self,
        kube: Kube,
        *,
        nodes: Iterable[str] | None = None,
        device_plugin: str = "hami",
        start_delay_s: float = 0.1,
        register_interval_s: float = 30.0,
    ) -> None:
        if device_plugin not in ("hami", "nvidia"):
            raise ValueError(f"device_plugin={device_plugin!r} must be 'hami' or 'nvidia'")
        self.kube = kube
        self.only = set(nodes) if nodes is not None else None
        self.device_plugin = device_plugin
        self.start_delay_s = start_delay_s
        self.register_interval_s = register_interval_s
        self.ledger = Ledger()
        self.trace: list[str] = []  # what each node saw, in order: locks, binds, Allocate
        self._locks: dict[str, str | None] = {}
        self._t0 = time.monotonic()
        self.agents: dict[str, NodeAgent] = {}
        self.nodes: dict[str, dict[str, Any]] = {}
        self.pods: dict[str, dict[str, Any]] = {}
        self._node_informer = Informer(kube, "/api/v1/nodes", self._on_node, name="agent nodes")
        self._pod_informer = Informer(kube, "/api/v1/pods", self._on_pod, name="agent pods")
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        self._tasks.append(asyncio.create_task(self._node_informer.run()))
        await self._node_informer.synced.wait()
        self._tasks.append(asyncio.create_task(self._pod_informer.run()))
        await self._pod_informer.synced.wait()

    async def stop(self) -> None:
        for agent in self.agents.values():
            await agent.stop()
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t

    async def __aenter__(self) -> Fleet:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def _on_node(self, event: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        name = str(obj_meta(obj).get("name", ""))
        if event == "DELETED":
            self.nodes.pop(name, None)
            return
        self.nodes[name] = obj
        if self.only is not None and name not in self.only:
            return
        lock = (obj_meta(obj).get("annotations") or {}).get(hami.NODE_LOCK)
        if self._locks.get(name) != lock:
            self._locks[name] = lock
            self.note(name, f"lock {lock}")
        self.ledger.set_cards(name, agent_cards(obj))
        if name not in self.agents:
            agent = NodeAgent(self, name)
            self.agents[name] = agent
            agent.start()

    def _on_pod(self, event: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        key = pod_key(obj)
        node = str((obj.get("spec") or {}).get("nodeName") or "")
        if event == "DELETED":
            if self.pods.get(key, {}).get("metadata", {}).get("uid") == obj_meta(obj).get("uid"):
                self.pods.pop(key, None)
        else:
            self.pods[key] = obj
        agent = self.agents.get(node)
        if agent is None:
            return
        phase = (obj.get("status") or {}).get("phase")
        if event == "DELETED" or phase in ("Succeeded", "Failed"):
            agent.forget(obj)
        else:
            agent.offer(obj)

    def note(self, node: str, text: str) -> None:
        self.trace.append(f"{time.monotonic() - self._t0:8.3f} {node}: {text}")

    def node_trace(self, node: str) -> str:
        return "\n".join(t for t in self.trace if f" {node}: " in t)

    def agent(self, node: str) -> NodeAgent:
        return self.agents[node]

    async def settle(self, timeout_s: float = 30.0, quiet_s: float = 0.3) -> None:
        """Wait until every agent has admitted what it received and ``quiet_s`` passed with
        nothing new (pods still arriving through the watch)."""
        deadline = time.monotonic() + timeout_s
        calm_since: float | None = None
        while time.monotonic() < deadline:
            if all(a.idle for a in self.agents.values()):
                now = time.monotonic()
                calm_since = calm_since or now
                if now - calm_since >= quiet_s:
                    return
            else:
                calm_since = None
            await asyncio.sleep(0.05)

    async def occupy(
        self,
        node: str,
        cpu_pct: float,
        memory_pct: float = 0.0,
        *,
        namespace: str = "default",
        name: str | None = None,
    ) -> dict[str, Any]:
        """A pod of another scheduler bound straight to ``node`` (as a DaemonSet's are)
        holding ``cpu_pct`` % of its allocatable CPU and ``memory_pct`` % of its memory."""
        from gpupool.config.quantity import cpu_milli, parse_quantity

        obj = self.nodes.get(node) or await self.kube.request("GET", f"/api/v1/nodes/{node}")
        alloc = (obj.get("status") or {}).get("allocatable") or {}
        cpu = int(cpu_milli(alloc.get("cpu", 0)) * cpu_pct / 100)
        mem = int(parse_quantity(alloc.get("memory", 0)) * int(memory_pct * 100) // 10000)
        requests: dict[str, str] = {"cpu": f"{cpu}m"}
        if mem:
            requests["memory"] = str(mem)
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name or f"other-{node}",
                "namespace": namespace,
                "labels": {"nodeagent.gpupool.io/other": "true"},
            },
            "spec": {
                "nodeName": node,
                "schedulerName": "default-scheduler",
                "terminationGracePeriodSeconds": 0,
                "tolerations": [{"operator": "Exists"}],
                "containers": [
                    {
                        "name": "agent",
                        "image": "example.invalid/daemon:1",
                        "resources": {"requests": requests},
                    }
                ],
            },
        }
        return await self.kube.request("POST", f"/api/v1/namespaces/{namespace}/pods", body)

    def summary(self) -> dict[str, Any]:
        return self.ledger.summary()

    def rejections(self) -> list[tuple[str, Rejection]]:
        return list(self.ledger.rejections)
