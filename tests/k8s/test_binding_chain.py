"""What a node's chain of locked binds writes while the lock is held, against a scripted
API server: every write under HAMi's node lock delays the node's next pod, so under it there
are only the lock and the Binding; the label is written while the pod waits its turn, and a
locked bind never waits for permits other nodes' writes hold."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from gpupool.k8s.binding import BindItem, BindOutcome, PodBinder
from gpupool.k8s.hami.devices import VGPU_NODE
from gpupool.k8s.kube import KubeError
from gpupool.k8s.nodelock import LOCK_ANNOTATION, NodeLocks, format_lock
from tests.k8s.test_binding_fake import ScriptedKube, locked_node


class Host:
    def __init__(self) -> None:
        self.outcomes: dict[str, BindOutcome] = {}

    def is_leader(self) -> bool:
        return True

    def pod_alive(self, key: str, uid: str) -> bool:
        return True

    def bind_done(self, item: BindItem, outcome: BindOutcome, reason: str, pod: Any) -> None:
        self.outcomes[item.key] = outcome


async def exists(ns: str, name: str) -> bool:
    return True


def item(name: str, node: str = "n1", *, lock: bool = True) -> BindItem:
    return BindItem(f"team-a/{name}", f"uid-{name}", node, {VGPU_NODE: node}, lock=lock)


def test_the_label_is_written_while_the_pod_waits_not_under_the_lock() -> None:
    """Node n1 is locked for another pod: the queued pod's label patch goes out at once;
    once the lock is released the only writes are the lock and the Binding."""
    state = {"locked": True}

    def node() -> dict[str, Any]:
        return (
            locked_node(format_lock(time.time(), "team-a", "first"))
            if state["locked"]
            else locked_node("")
        )

    async def body() -> None:
        kube = ScriptedKube(lambda m, p, b: node())
        locks = NodeLocks(kube, lambda name: node(), exists, clock=time.time)  # type: ignore[arg-type]
        host = Host()
        binder = PodBinder(kube, locks, host, lock_poll_s=30)  # type: ignore[arg-type]
        binder.submit(item("p"))
        await asyncio.sleep(0.05)
        assert binder.lock_waits == 1
        (label,) = [(m, p, b) for m, p, b in kube.calls]
        assert label[:2] == ("PATCH", "/api/v1/namespaces/team-a/pods/p")
        assert label[2]["metadata"] == {"labels": {VGPU_NODE: "n1"}, "uid": "uid-p"}
        state["locked"] = False
        binder.node_changed("n1")
        await asyncio.sleep(0.05)
        under_lock = [(m, p) for m, p, _ in kube.calls[1:]]
        assert under_lock == [
            ("PATCH", "/api/v1/nodes/n1"),
            ("POST", "/api/v1/namespaces/team-a/pods/p/binding"),
        ]
        lock_patch = kube.calls[1][2]["metadata"]
        assert lock_patch["annotations"][LOCK_ANNOTATION].endswith(",team-a,p")
        assert host.outcomes == {"team-a/p": BindOutcome.BOUND}
        await binder.close()

    asyncio.run(body())


def test_a_label_patch_refused_ahead_is_the_binds_answer() -> None:
    """The label patch made ahead fails with the pod gone (404): the bind reports GONE,
    posts no Binding, and gives the lock back."""
    free = {"held": ""}

    def answer(method: str, path: str, body: Any) -> dict[str, Any]:
        if method == "PATCH" and "/pods/" in path:
            raise KubeError(404, "NotFound", 'pods "p" not found', f"PATCH {path}")
        if method == "PATCH" and "/nodes/" in path:
            free["held"] = body["metadata"]["annotations"][LOCK_ANNOTATION] or ""
        return locked_node(free["held"])

    async def body() -> None:
        kube = ScriptedKube(answer)
        locks = NodeLocks(kube, lambda name: None, exists, clock=time.time)  # type: ignore[arg-type]
        host = Host()
        binder = PodBinder(kube, locks, host)  # type: ignore[arg-type]
        binder.submit(item("p"))
        await asyncio.sleep(0.05)
        assert host.outcomes == {"team-a/p": BindOutcome.GONE}
        assert kube.posts("/binding") == []
        assert free["held"] == ""  # taken, then released by gpupool itself
        await binder.close()

    asyncio.run(body())


class StuckKube(ScriptedKube):
    """Every write for pod ``stuck`` hangs until ``go`` is set."""

    def __init__(self) -> None:
        super().__init__(lambda m, p, b: locked_node(""))
        self.go = asyncio.Event()

    async def request(
        self, method: str, path: str, body: object = None, **kw: Any
    ) -> dict[str, Any]:
        if "/pods/stuck" in path:
            await self.go.wait()
        return await super().request(method, path, body, **kw)


def test_a_locked_bind_does_not_wait_behind_other_writes_permits() -> None:
    """With one permit, held by another pod's hanging bind, a pod under a node's lock is
    still bound: its node's lock must not stay held waiting for unrelated writes."""

    async def body() -> None:
        kube = StuckKube()
        locks = NodeLocks(kube, lambda name: None, exists, clock=time.time)  # type: ignore[arg-type]
        host = Host()
        binder = PodBinder(kube, locks, host, concurrency=1)  # type: ignore[arg-type]
        binder.submit(BindItem("team-a/stuck", "uid-s", "n2", {}, lock=False))
        await asyncio.sleep(0.02)
        binder.submit(BindItem("team-a/p", "uid-p", "n1", {}, lock=True))
        await asyncio.sleep(0.05)
        assert host.outcomes == {"team-a/p": BindOutcome.BOUND}
        kube.go.set()
        await asyncio.sleep(0.05)
        assert host.outcomes["team-a/stuck"] is BindOutcome.BOUND
        await binder.close()

    asyncio.run(body())


def test_the_next_pods_label_is_written_while_the_one_before_holds_the_lock() -> None:
    """Four pods queued for one node: while the first holds the lock the second waits for
    it and the third's label goes out too, the fourth's not yet (not the whole queue's at
    once); under each lock only the lock and the Binding are written."""
    state: dict[str, str] = {"lock": ""}

    def answer(method: str, path: str, body: Any) -> dict[str, Any]:
        if method == "PATCH" and path == "/api/v1/nodes/n1":
            state["lock"] = body["metadata"]["annotations"][LOCK_ANNOTATION] or ""
        return locked_node(state["lock"])

    async def body() -> None:
        kube = ScriptedKube(answer)
        locks = NodeLocks(
            kube,
            lambda name: locked_node(state["lock"]),
            exists,  # type: ignore[arg-type]
            clock=time.time,
        )
        host = Host()
        binder = PodBinder(kube, locks, host, lock_poll_s=30)  # type: ignore[arg-type]
        for name in ("a", "b", "c", "d"):
            binder.submit(item(name))
        await asyncio.sleep(0.05)
        assert host.outcomes == {"team-a/a": BindOutcome.BOUND}  # b waits for a's release
        labelled = [p.rsplit("/", 1)[1] for m, p, _ in kube.calls if m == "PATCH" and "/pods/" in p]
        assert sorted(labelled) == ["a", "b", "c"]
        for turn in ("b", "c", "d"):
            state["lock"] = ""  # the device plugin released it
            binder.node_changed("n1")
            await asyncio.sleep(0.05)
            assert host.outcomes[f"team-a/{turn}"] is BindOutcome.BOUND
        writes = [(m, p.rsplit("/", 2)[-2:]) for m, p, _ in kube.calls]
        # each pod: its label ahead, then (lock, Binding) under its lock
        b_lock = writes.index(("PATCH", ["nodes", "n1"]), 2)
        assert writes[b_lock + 1] == ("POST", ["b", "binding"])
        assert sorted(w[1][1] for w in writes if w[0] == "PATCH" and w[1][0] == "pods") == [
            "a",
            "b",
            "c",
            "d",
        ]  # one label each
        await binder.close()

    asyncio.run(body())
