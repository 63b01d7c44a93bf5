"""Helpers for the tests against a real API server: nodes without kubelets, pods, waiting."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from gpupool.core.quota import QueueConfig
from gpupool.k8s.binding import BindItem, BindOutcome
from gpupool.k8s.controller import Controller, Options
from gpupool.k8s.informer import Informer
from gpupool.k8s.kube import MERGE_PATCH, Kube, KubeError
from gpupool.k8s.nodelock import LOCK_ANNOTATION, parse_lock
from gpupool.k8s.wakeup import wait_event


def register_json(node: str, gpus: int, model: str, memory_mib: int) -> str:
    return json.dumps(
        [
            {
                "id": f"GPU-{node}-{i}",
                "index": i,
                "count": 10,
                "devmem": memory_mib,
                "devcore": 100,
                "type": model,
                "mode": "hami-core",
                "health": True,
            }
            for i in range(gpus)
        ]
    )


def hami_node_object(
    name: str,
    register: str,
    gpu_allocatable: int,
    labels: dict[str, str] | None = None,
    taints: list[dict[str, str]] | None = None,
) -> dict[str, Any]:
    """A Ready Node as a watch delivers it, with HAMi's register annotation ``register``, for
    the tests that feed objects to the controller without a server."""
    metadata: dict[str, Any] = {"name": name, "resourceVersion": "1"}
    if labels is not None:
        metadata["labels"] = labels
    metadata["annotations"] = {"hami.io/node-nvidia-register": register}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": metadata,
        "spec": {} if taints is None else {"taints": taints},
        "status": {
            "allocatable": {"cpu": "64", "memory": "256Gi", "nvidia.com/gpu": str(gpu_allocatable)},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def register_colon(node: str, gpus: int, model: str, memory_mib: int) -> str:
    return "".join(f"GPU-{node}-{i},10,{memory_mib},100,{model},0,true:" for i in range(gpus))


async def make_node(
    kube: Kube,
    name: str,
    *,
    gpus: int = 8,
    model: str = "NVIDIA-A100",
    memory_mib: int = 40960,
    form: str = "json",
    cpu: str = "64",
    memory: str = "512Gi",
    labels: dict[str, str] | None = None,
) -> None:
    """A Node as a kubelet and HAMi's device plugin would leave it (Ready, untainted)."""
    annotations = {}
    if form == "json":
        annotations["hami.io/node-nvidia-register"] = register_json(name, gpus, model, memory_mib)
    elif form == "colon":
        annotations["hami.io/node-nvidia-register"] = register_colon(name, gpus, model, memory_mib)
    await kube.request(
        "POST",
        "/api/v1/nodes",
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": labels or {}, "annotations": annotations},
        },
    )
    alloc = {"cpu": cpu, "memory": memory, "pods": "220", "nvidia.com/gpu": str(gpus * 10)}
    await kube.request(
        "PATCH",
        f"/api/v1/nodes/{name}/status",
        {
            "status": {
                "capacity": alloc,
                "allocatable": alloc,
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True",
                        "reason": "KubeletReady",
                        "message": "no kubelet: a test node",
                    }
                ],
            }
        },
        content_type=MERGE_PATCH,
    )
    # The API server's admission taints a new node not-ready; no kubelet will lift it.
    await kube.request(
        "PATCH", f"/api/v1/nodes/{name}", {"spec": {"taints": None}}, content_type=MERGE_PATCH
    )


def pod_body(
    name: str,
    *,
    ns: str = "default",
    limits: dict[str, Any] | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    scheduler: str = "gpupool",
    cpu: str = "1",
    memory: str = "1Gi",
    init: bool = False,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": ns,
            "labels": labels or {},
            "annotations": annotations or {},
        },
        "spec": {
            "schedulerName": scheduler,
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "main",
                    "image": "example.invalid/cuda:12",
                    "resources": {
                        "requests": {"cpu": cpu, "memory": memory},
                        "limits": limits or {},
                    },
                }
            ],
        },
    }
    if init:
        body["spec"]["initContainers"] = [{"name": "setup", "image": "example.invalid/x"}]
    return body


async def make_pod(kube: Kube, name: str, **kwargs: Any) -> dict[str, Any]:
    body = pod_body(name, **kwargs)
    ns = body["metadata"]["namespace"]
    return await kube.request("POST", f"/api/v1/namespaces/{ns}/pods", body)


async def get_pod(kube: Kube, ns: str, name: str) -> dict[str, Any]:
    return await kube.request("GET", f"/api/v1/namespaces/{ns}/pods/{name}")


async def list_pods(kube: Kube, ns: str) -> list[dict[str, Any]]:
    return (await kube.request("GET", f"/api/v1/namespaces/{ns}/pods")).get("items") or []


async def set_phase(kube: Kube, ns: str, name: str, phase: str) -> None:
    """What a kubelet would report: the pod ran, or finished."""
    await kube.request(
        "PATCH",
        f"/api/v1/namespaces/{ns}/pods/{name}/status",
        {"status": {"phase": phase}},
        content_type=MERGE_PATCH,
    )


async def delete_pod(kube: Kube, ns: str, name: str) -> None:
    with contextlib.suppress(KubeError):
        await kube.request(
            "DELETE",
            f"/api/v1/namespaces/{ns}/pods/{name}",
            {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0},
        )


async def ensure_namespace(kube: Kube, ns: str) -> None:
    try:
        await kube.request(
            "POST",
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}},
        )
    except KubeError as exc:
        if exc.status != 409:
            raise


async def clean(kube: Kube, namespaces: list[str]) -> None:
    """Deletes every pod of the namespaces, every Job there, and every node."""
    for ns in namespaces:
        with contextlib.suppress(KubeError):
            await kube.request(
                "DELETE",
                f"/apis/batch/v1/namespaces/{ns}/jobs",
                params={"propagationPolicy": "Background"},
            )
        for pod in await list_pods(kube, ns):
            await delete_pod(kube, ns, pod["metadata"]["name"])
        with contextlib.suppress(KubeError):
            await kube.request("DELETE", f"/api/v1/namespaces/{ns}/events")
    nodes = (await kube.request("GET", "/api/v1/nodes")).get("items") or []
    for n in nodes:
        with contextlib.suppress(KubeError):
            await kube.request("DELETE", f"/api/v1/nodes/{n['metadata']['name']}")


async def wait_for(
    check: Callable[[], Awaitable[Any]], timeout_s: float = 20.0, what: str = "condition"
) -> Any:
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        last = await check()
        if last:
            return last
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}; last: {last!r}")


async def events_for(kube: Kube, ns: str, name: str) -> list[dict[str, Any]]:
    body = await kube.request(
        "GET",
        f"/api/v1/namespaces/{ns}/events",
        params={"fieldSelector": f"involvedObject.name={name}"},
    )
    return body.get("items") or []


@contextlib.asynccontextmanager
async def running(kube: Kube, config: QueueConfig, **options: Any) -> AsyncIterator[Controller]:
    """A controller running in this event loop for the duration of the block."""
    opts = Options(**{"leader_elect": False, **options})
    controller = Controller(kube, config, opts)
    task = asyncio.create_task(controller.run())
    try:
        await wait_for(lambda: _ready(controller, task), 20, "controller sync")
        yield controller
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def _ready(controller: Controller, task: asyncio.Task[None]) -> bool:
    if task.done():
        task.result()
    return controller.sched is not None


class DevicePluginLocks:
    """Plays HAMi's device plugin's part in the node lock, and nothing else: once a node's
    ``hami.io/mutex.lock`` names a pod bound to that node, the plugin's ``Allocate`` has
    run for it (``hami.io/bind-phase`` becomes ``success``) and the lock is released, with
    the node's ``resourceVersion`` as HAMi writes it. It watches nodes and pods. At each
    release it records which pods of the node were still ``allocating``: with one
    allocating pod per node that is only the locked one, so ``Allocate`` could not have
    picked another pod."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self.released: list[tuple[str, str, frozenset[str]]] = []  # node, pod, allocating
        self.paused: set[str] = set()  # nodes whose plugin is not answering
        self.nodes = Informer(kube, "/api/v1/nodes", self._changed, name="plugin nodes")
        self.pods = Informer(kube, "/api/v1/pods", self._changed, name="plugin pods")
        self._wake = asyncio.Event()
        self._busy: set[str] = set()
        self._done: dict[str, str] = {}  # node -> the version whose lock was released

    def allocating_overlaps(self) -> list[tuple[str, str, frozenset[str]]]:
        """Releases at which another pod of the node was allocating too."""
        return [r for r in self.released if r[2] != frozenset({r[1]})]

    def _changed(self, event: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        self._wake.set()

    async def run(self) -> None:
        tasks = [asyncio.create_task(i.run()) for i in (self.nodes, self.pods)]
        try:
            while True:
                await wait_event(self._wake, 0.2)  # also when a paused node is resumed
                self._wake.clear()
                for name, node in list(self.nodes.cache.items()):
                    if name not in self._busy and name not in self.paused:
                        self._check(name, node)
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    def _check(self, name: str, node: dict[str, Any]) -> None:
        value = (node["metadata"].get("annotations") or {}).get(LOCK_ANNOTATION)
        if not value or self._done.get(name) == node["metadata"]["resourceVersion"]:
            return  # free, or released already (the watch has not shown it yet)
        lock = parse_lock(value)
        key = f"{lock.namespace}/{lock.name}"
        pod = self.pods.cache.get(key)
        if pod is None or pod["spec"].get("nodeName") != name:
            return  # not bound yet: the kubelet has not asked
        allocating = frozenset(
            k
            for k, p in self.pods.cache.items()
            if p["spec"].get("nodeName") == name
            and (p["metadata"].get("annotations") or {}).get("hami.io/bind-phase") == "allocating"
        )
        self._busy.add(name)
        task = asyncio.create_task(self._release(name, node, key, allocating))
        task.add_done_callback(lambda _: self._busy.discard(name))

    async def _release(
        self, name: str, node: dict[str, Any], key: str, allocating: frozenset[str]
    ) -> None:
        ns, pod = key.split("/", 1)
        try:
            await self.kube.request(
                "PATCH",
                f"/api/v1/namespaces/{ns}/pods/{pod}",
                {"metadata": {"annotations": {"hami.io/bind-phase": "success"}}},
                content_type=MERGE_PATCH,
            )
            await self.kube.request(
                "PATCH",
                f"/api/v1/nodes/{name}",
                {
                    "metadata": {
                        "annotations": {LOCK_ANNOTATION: None},
                        "resourceVersion": node["metadata"]["resourceVersion"],
                    }
                },
                content_type=MERGE_PATCH,
            )
        except KubeError:
            self._wake.set()  # the node or pod changed meanwhile: look again
            return
        self._done[name] = node["metadata"]["resourceVersion"]
        self.released.append((name, key, allocating))


@contextlib.asynccontextmanager
async def device_plugins(kube: Kube) -> AsyncIterator[DevicePluginLocks]:
    plugin = DevicePluginLocks(kube)
    task = asyncio.create_task(plugin.run())
    try:
        yield plugin
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


class RecordingHost:
    """A binder's host that leads, keeps every pod alive and records each outcome."""

    def __init__(self) -> None:
        self.outcomes: list[BindOutcome] = []

    def is_leader(self) -> bool:
        return True

    def pod_alive(self, key: str, uid: str) -> bool:
        return True

    def bind_done(self, item: BindItem, outcome: BindOutcome, reason: str, pod: Any) -> None:
        self.outcomes.append(outcome)
