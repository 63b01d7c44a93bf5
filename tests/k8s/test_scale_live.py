"""Scale behaviour against a real API server: paginated lists (and a continue token that
expires mid-list), slim caches, a watch line longer than aiohttp's limit, the Lease held while
the main loop is blocked, and pending reasons written at a bounded rate."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from gpupool.k8s import slim
from gpupool.k8s.events import COMBINED
from gpupool.k8s.informer import Informer, object_key
from gpupool.k8s.kube import Kube, KubeError
from gpupool.k8s.lease_thread import LeaseThread
from gpupool.k8s.status import StatusWriter
from tests.k8s.conftest import ControlPlane
from tests.k8s.kit import delete_pod, ensure_namespace, events_for, list_pods, make_pod, wait_for
from tests.k8s.test_scheduler_live import NS, live

pytestmark = pytest.mark.k8s


class BetweenPages:
    """The API server connection, with ``hook`` run once before the first continued page
    of a list (the moment a list is half read)."""

    def __init__(self, kube: Kube, hook: Callable[[], Awaitable[None]]) -> None:
        self.kube = kube
        self.hook = hook
        self.fired = False
        self.lists: list[dict[str, str]] = []

    async def request(
        self, method: str, path: str, body: object = None, **kw: Any
    ) -> dict[str, Any]:
        params = dict(kw.get("params") or {})
        if method == "GET" and "limit" in params:
            self.lists.append(params)
        if "continue" in params and not self.fired:
            self.fired = True
            await self.hook()
        return await self.kube.request(method, path, body, **kw)

    def watch(self, path: str, params: dict[str, str], *args: Any) -> Any:
        return self.kube.watch(path, params, *args)


def pod_keys(pods: list[dict[str, Any]]) -> set[str]:
    return {f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in pods}


def test_list_in_pages_with_slim_objects(control_plane: ControlPlane) -> None:
    async def body(kube: Kube) -> None:
        for i in range(11):
            await make_pod(
                kube,
                f"p{i}",
                ns=NS,
                scheduler="nobody",
                annotations={slim.LAST_APPLIED: "{" + "x" * 2000 + "}"},
            )
        seen: list[str] = []
        conn = BetweenPages(kube, lambda: asyncio.sleep(0))
        inf = Informer(
            conn,
            f"/api/v1/namespaces/{NS}/pods",  # type: ignore[arg-type]
            lambda ev, obj, old: seen.append(ev),
            page_size=4,
        )
        task = asyncio.create_task(inf.run())
        try:
            await asyncio.wait_for(inf.synced.wait(), 20)
            assert inf.pages == 3  # 4 + 4 + 3
            assert [p.get("limit") for p in conn.lists] == ["4"] * 3
            assert set(inf.cache) == pod_keys(await list_pods(kube, NS))
            assert seen == ["ADDED"] * 11
            for obj in inf.cache.values():  # slim: the default transform
                meta = obj["metadata"]
                assert "managedFields" not in meta
                assert slim.LAST_APPLIED not in (meta.get("annotations") or {})
                assert meta["name"] and meta["resourceVersion"]
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    live(control_plane, body)


def test_continue_token_expired_mid_list(control_plane: ControlPlane) -> None:
    """Between two pages a pod goes away, another arrives and etcd compacts the list's
    version: the next page is 410 Gone, and the list starts again. The cache is then exactly
    the pods that exist: no ghost (the deleted one, read on the first page) and no pod lost
    (the new one, which the old list's version could not show)."""

    async def body(kube: Kube) -> None:
        for i in range(9):
            await make_pod(kube, f"p{i}", ns=NS, scheduler="nobody")

        async def meanwhile() -> None:
            await delete_pod(kube, NS, "p0")  # on the first page, already read
            await make_pod(kube, "late", ns=NS, scheduler="nobody")
            control_plane.compact_etcd()

        conn = BetweenPages(kube, meanwhile)
        inf = Informer(
            conn,
            f"/api/v1/namespaces/{NS}/pods",  # type: ignore[arg-type]
            lambda ev, obj, old: None,
            page_size=3,
        )
        task = asyncio.create_task(inf.run())
        try:
            await asyncio.wait_for(inf.synced.wait(), 30)
            assert conn.fired and inf.expired_lists == 1
            truth = pod_keys(await list_pods(kube, NS))
            assert f"{NS}/p0" not in inf.cache  # no ghost
            assert f"{NS}/late" in inf.cache  # no pod lost
            assert set(inf.cache) == truth
            # the list that started again began from the first page, without a token
            assert sum(1 for p in conn.lists if "continue" not in p) == 2
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    live(control_plane, body)


def test_watch_line_longer_than_aiohttp_limit(control_plane: ControlPlane) -> None:
    """A ConfigMap of ~1 MiB (etcd takes at most 1.5 MiB a request) is one watch line eight
    times aiohttp's 128 KiB line limit; the informer reads it, and the next event too."""

    async def body(kube: Kube) -> None:
        path = f"/api/v1/namespaces/{NS}/configmaps"
        for cm in (await kube.request("GET", path)).get("items") or ():
            if cm["metadata"]["name"].startswith("big"):
                await kube.request("DELETE", f"{path}/{cm['metadata']['name']}")
        inf = Informer(kube, path, lambda ev, obj, old: None)
        task = asyncio.create_task(inf.run())
        try:
            await asyncio.wait_for(inf.synced.wait(), 20)
            data = "y" * (1000 * 1024)
            for name in ("big-1", "big-2"):
                await kube.request(
                    "POST",
                    path,
                    {
                        "apiVersion": "v1",
                        "kind": "ConfigMap",
                        "metadata": {"name": name},
                        "data": {"blob": data},
                    },
                )

            async def both() -> bool:
                return all(f"{NS}/{n}" in inf.cache for n in ("big-1", "big-2"))

            await wait_for(both, 20, "both large ConfigMaps through the watch")
            assert inf.cache[f"{NS}/big-1"]["data"]["blob"] == data
            assert not task.done()
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            for name in ("big-1", "big-2"):
                with contextlib.suppress(KubeError):
                    await kube.request("DELETE", f"{path}/{name}")

    live(control_plane, body)


LEASE_NS = "gpupool-scale-test"


def test_lease_held_while_the_main_loop_is_blocked(control_plane: ControlPlane) -> None:
    """The leader's loop is blocked (a cycle, a huge JSON parse) for longer than the lease's
    duration; its lease thread keeps renewing, so a second replica, trying all along, never
    takes the Lease, and the leader is still leader afterwards."""

    async def body(kube: Kube) -> None:
        await ensure_namespace(kube, LEASE_NS)
        path = f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NS}/leases/scale"
        with contextlib.suppress(KubeError):
            await kube.request("DELETE", path)
        started: list[str] = []

        async def a_started() -> None:
            started.append("a")

        async def b_started() -> None:
            started.append("b")

        a = LeaseThread(
            kube, LEASE_NS, "scale", "a", lease_s=3, renew_s=0.5, margin_s=1, on_started=a_started
        )
        ta = asyncio.create_task(a.run())
        await wait_for(lambda: _true(a.is_leader()), 20, "a leads")
        b = LeaseThread(
            kube, LEASE_NS, "scale", "b", lease_s=3, renew_s=0.5, margin_s=1, on_started=b_started
        )
        tb = asyncio.create_task(b.run())
        await asyncio.sleep(0.5)
        before = await kube.request("GET", path)
        t0 = time.monotonic()
        time.sleep(7.0)  # the loop is blocked: more than twice the lease's 3 s
        blocked = time.monotonic() - t0
        assert blocked >= 7.0
        assert a.is_leader() and not b.is_leader()
        after = await kube.request("GET", path)
        assert after["spec"]["holderIdentity"] == "a"
        assert after["spec"]["renewTime"] != before["spec"]["renewTime"]  # renewed meanwhile
        assert after["spec"].get("leaseTransitions", 0) == before["spec"].get("leaseTransitions", 0)
        await asyncio.sleep(0.2)
        assert started == ["a"] and b.transitions == 0
        for t in (tb, ta):
            t.cancel()
            await asyncio.gather(t, return_exceptions=True)
        # cancelled, the leader gave the lease up at once
        final = await kube.request("GET", path)
        assert final["spec"]["holderIdentity"] in ("", None)

    live(control_plane, body)


async def _true(value: bool) -> bool:
    return value


def test_reason_writes_coalesced_and_bounded(control_plane: ControlPlane) -> None:
    """200 reason changes in 2 s for one pod, written at most 5 times a second: a handful of
    PATCHes, the last reason on the pod, and its Events aggregated (a repeat counted, more
    than ten different messages combined)."""

    async def body(kube: Kube) -> None:
        pod = await make_pod(kube, "waits", ns=NS, scheduler="nobody")
        key = object_key(pod)
        writer = StatusWriter(
            kube,
            component="gpupool",
            identity="test",
            pod=lambda k: pod if k == key else None,
            is_leader=lambda: True,
            still_waiting=lambda k: True,
            writes_per_s=5,
            concurrency=2,
        )
        try:
            t0 = time.monotonic()
            for i in range(200):
                writer.park(key, f"0/3 nodes fit: reason {i}")
                await asyncio.sleep(0.01)
            spent = time.monotonic() - t0
            await wait_for(lambda: _true(writer.queued() == 0), 30, "the queue drained")
            await asyncio.sleep(0.5)
            total = time.monotonic() - t0
            st = writer.stats
            writes = st.conditions + st.events_created + st.events_repeated
            assert writes <= 5 * total + 2, (writes, total)
            assert st.conditions < 30 and st.coalesced > 150, st
            got = await kube.request("GET", f"/api/v1/namespaces/{NS}/pods/waits")
            (cond,) = [c for c in got["status"]["conditions"] if c["type"] == "PodScheduled"]
            assert cond["message"] == "0/3 nodes fit: reason 199"  # the last value won
            assert spent < 10
            # the same reason again is not written again
            before = st.conditions
            writer.park(key, "0/3 nodes fit: reason 199")
            await asyncio.sleep(0.5)
            assert st.conditions == before
            # the same Event three times: one object, count 3
            for _ in range(3):
                writer.record(pod, "Normal", "Probe", "the same message")
                await wait_for(lambda: _true(writer.queued() == 0), 10, "written")
            evs = [e for e in await events_for(kube, NS, "waits") if e["reason"] == "Probe"]
            assert len(evs) == 1 and evs[0]["count"] == 3, evs
            failed = [
                e for e in await events_for(kube, NS, "waits") if e["reason"] == "FailedScheduling"
            ]
            assert len(failed) <= 11 + 1
            if len(failed) > 10:
                assert any(e["message"].startswith(COMBINED) for e in failed)
        finally:
            await writer.close()

    live(control_plane, body)
