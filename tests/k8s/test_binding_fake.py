"""Binds, gates, backoff, evictions and the node lock against a scripted fake API server:
the answers a v1.20 test API server cannot give (``schedulingGates``, ``policy/v1``, a pod
affinity term's ``namespaceSelector``: v1.20 drops the field)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

import pytest

from gpupool.k8s.binding import BindItem, BindOutcome, PodBinder
from gpupool.k8s.controller import Controller, Options
from gpupool.k8s.kube import KubeError
from gpupool.k8s.main import default_config
from gpupool.k8s.nodelock import (
    LOCK_ANNOTATION,
    LockBusy,
    NodeLocks,
    format_lock,
    node_lock,
    parse_lock,
)
from gpupool.k8s.podview import reduce
from tests.k8s.kit import RecordingHost, pod_body
from tests.k8s.test_controller_fake import node_obj, pod_obj

Answer = Callable[[str, str, Any], dict[str, Any]]


class ScriptedKube:
    """Answers each request with ``answer(method, path, body)`` (``{}`` by default) and
    remembers them."""

    def __init__(self, answer: Answer | None = None) -> None:
        self.calls: list[tuple[str, str, Any]] = []
        self.answer = answer

    async def request(
        self, method: str, path: str, body: object = None, **_: Any
    ) -> dict[str, Any]:
        self.calls.append((method, path, body))
        await asyncio.sleep(0)
        return self.answer(method, path, body) if self.answer else {}

    def posts(self, suffix: str) -> list[Any]:
        return [b for m, p, b in self.calls if m == "POST" and p.endswith(suffix)]


def controller(kube: ScriptedKube, **options: Any) -> Controller:
    opts = Options(**{"leader_elect": False, **options})
    ctl = Controller(kube, default_config(), opts)  # type: ignore[arg-type]
    ctl.node_informer.cache["n1"] = node_obj("n1", 1)
    ctl.rebuild()
    return ctl


def add(ctl: Controller, pod: dict[str, Any], event: str = "ADDED") -> None:
    key = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
    ctl.pod_informer.cache[key] = pod
    ctl._on_pod(event, pod, None)


async def settle(n: int = 30) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


def gated(name: str, *gates: str) -> dict[str, Any]:
    pod = pod_obj(name)
    pod["spec"]["schedulingGates"] = [{"name": g} for g in gates]
    return pod


def test_gated_pod_is_not_bound_until_its_gates_are_removed() -> None:
    async def body() -> None:
        kube = ScriptedKube()
        ctl = controller(kube)
        add(ctl, gated("p", "kueue.x-k8s.io/admission"))
        ctl.cycle()
        await settle()
        assert kube.posts("/binding") == []
        assert ctl.sched is not None and ctl.sched.pending() == []  # not even submitted
        (status,) = [b for m, p, b in kube.calls if p.endswith("/p/status")]
        cond = status["status"]["conditions"][0]
        assert cond["reason"] == "SchedulingGated"
        assert "kueue.x-k8s.io/admission" in cond["message"]
        add(ctl, pod_obj("p"), "MODIFIED")  # Kueue admitted it: the gate is gone
        ctl.cycle()
        await settle()
        assert len(kube.posts("/binding")) == 1

    asyncio.run(body())


def conflict_on_bind(message: str, bound_to: str | None = None) -> Answer:
    def answer(method: str, path: str, body: Any) -> dict[str, Any]:
        if method == "POST" and path.endswith("/binding"):
            raise KubeError(409, "Conflict", message, f"POST {path}")
        if method == "GET" and "/pods/" in path:
            pod = pod_obj("p", bound_to)
            pod["metadata"]["uid"] = "uid-p"
            return pod
        return {}

    return answer


def test_a_refused_bind_backs_off_instead_of_retrying_hot() -> None:
    async def body() -> None:
        kube = ScriptedKube(conflict_on_bind("pod p has non-empty .spec.schedulingGates"))
        ctl = controller(kube, backoff_initial_s=0.3, node_lock=False)
        pod = pod_obj("p")
        pod["metadata"]["uid"] = "uid-p"
        add(ctl, pod)
        ctl.cycle()
        await settle()
        assert len(kube.posts("/binding")) == 1
        assert ctl.stats.bind_refusals == 1 and "team-a/p" in ctl.backoff
        # within its backoff the pod is not tried again, however many cycles run
        for _ in range(20):
            ctl.cycle()
            await settle(5)
        assert len(kube.posts("/binding")) == 1
        assert ctl.allocations() == {}  # the core holds no card for it meanwhile
        await asyncio.sleep(0.4)
        ctl.cycle()
        await settle()
        assert len(kube.posts("/binding")) == 2
        assert ctl.backoff["team-a/p"][1] == pytest.approx(0.6)  # doubled

    asyncio.run(body())


def test_pod_found_bound_elsewhere_releases_the_cores_card() -> None:
    async def body() -> None:
        kube = ScriptedKube(conflict_on_bind('pod p is already assigned to node "n2"', "n2"))
        ctl = controller(kube, node_lock=False)
        pod = pod_obj("p")
        pod["metadata"]["uid"] = "uid-p"
        add(ctl, pod)
        ctl.cycle()
        assert "team-a/p" in ctl.allocations()  # held while the bind is in flight
        await settle()
        assert ctl.stats.bound_elsewhere == 1
        assert ctl.allocations() == {} and ctl.sched is not None
        assert ctl.sched.running() == [] and ctl.sched.pending() == []

    asyncio.run(body())


def test_bind_carries_the_uid_the_decision_was_made_for() -> None:
    async def body() -> None:
        kube = ScriptedKube()
        ctl = controller(kube, node_lock=False)
        pod = pod_obj("p")
        pod["metadata"]["uid"] = "uid-1"
        add(ctl, pod)
        ctl.cycle()
        await settle()
        (binding,) = kube.posts("/binding")
        assert binding["metadata"]["uid"] == "uid-1"

    asyncio.run(body())


def test_eviction_uses_policy_v1_where_discovery_lists_it() -> None:
    def answer(method: str, path: str, body: Any) -> dict[str, Any]:
        if path == "/api/v1":
            return {
                "resources": [
                    {"name": "pods"},
                    {"name": "pods/eviction", "group": "policy", "version": "v1"},
                ]
            }
        return {}

    async def body() -> None:
        kube = ScriptedKube(answer)
        binder = PodBinder(kube, None, None)  # type: ignore[arg-type]
        assert await binder.evict("team-a/v", "test", lambda key: None)
        (eviction,) = kube.posts("/eviction")
        assert eviction["apiVersion"] == "policy/v1"

    asyncio.run(body())


# -- the node lock ------------------------------------------------------------------------


def test_lock_value_is_hamis_format() -> None:
    value = format_lock(1_700_000_000, "team-a", "p")
    assert value == "2023-11-14T22:13:20Z,team-a,p"
    lock = parse_lock(value)
    assert lock.at_s == 1_700_000_000 and lock.held_by("team-a", "p")
    assert parse_lock("2023-11-14T22:13:20Z").namespace == ""  # an older HAMi's bare time
    with pytest.raises(ValueError, match="expected"):
        parse_lock("2023-11-14T22:13:20Z,team-a")
    assert node_lock({"metadata": {"annotations": {LOCK_ANNOTATION: "junk,a,b"}}}) == parse_lock(
        "1970-01-01T00:00:00Z,,"
    )  # unreadable: stale at once


def locked_node(value: str, version: str = "7") -> dict[str, Any]:
    node = node_obj("n1", 1)
    node["metadata"]["resourceVersion"] = version
    if value:
        node["metadata"]["annotations"][LOCK_ANNOTATION] = value
    return node


@pytest.mark.parametrize(
    ("age_s", "exists", "taken"),
    [
        (10, True, False),  # fresh, its pod exists: busy
        (301, True, True),  # older than HAMi's 5 minutes: expired
        (10, False, True),  # its pod is gone: dangling
    ],
)
def test_a_lock_is_taken_over_only_when_expired_or_dangling(
    age_s: float, exists: bool, taken: bool
) -> None:
    now = 1_700_000_000.0
    node = locked_node(format_lock(now - age_s, "team-a", "other"))

    def answer(method: str, path: str, body: Any) -> dict[str, Any]:
        return locked_node("") if method == "GET" else {}

    async def pod_exists(ns: str, name: str) -> bool:
        return exists

    async def body() -> None:
        kube = ScriptedKube(answer)
        locks = NodeLocks(kube, lambda n: node, pod_exists, clock=lambda: now)  # type: ignore[arg-type]
        if not taken:
            with pytest.raises(LockBusy, match="team-a/other"):
                await locks.acquire("n1", "team-a", "p")
            assert [m for m, _, _ in kube.calls] == []
            return
        await locks.acquire("n1", "team-a", "p")
        patches = [b for m, _, b in kube.calls if m == "PATCH"]
        # released without the owner check (with the version read), then taken
        assert patches[0] == {
            "metadata": {"annotations": {LOCK_ANNOTATION: None}, "resourceVersion": "7"}
        }
        assert patches[-1]["metadata"]["annotations"][LOCK_ANNOTATION] == format_lock(
            now, "team-a", "p"
        )

    asyncio.run(body())


def test_release_leaves_another_pods_lock_alone() -> None:
    async def body() -> None:
        kube = ScriptedKube(lambda m, p, b: locked_node(format_lock(time.time(), "x", "q")))

        async def exists(ns: str, name: str) -> bool:
            return True

        locks = NodeLocks(kube, lambda n: None, exists, clock=time.time)  # type: ignore[arg-type]
        assert not await locks.release("n1", "team-a", "p")
        assert [m for m, _, _ in kube.calls] == ["GET"]

    asyncio.run(body())


def test_binder_waits_for_the_lock_then_binds() -> None:
    """One node, its lock held by another pod: the bind waits; the lock's release (a node
    event) lets it through."""
    state = {"locked": True}

    def node() -> dict[str, Any]:
        return (
            locked_node(format_lock(time.time(), "team-a", "first"))
            if state["locked"]
            else locked_node("")
        )

    async def exists(ns: str, name: str) -> bool:
        return True

    async def body() -> None:
        kube = ScriptedKube(lambda m, p, b: node())
        locks = NodeLocks(kube, lambda name: node(), exists, clock=time.time)  # type: ignore[arg-type]
        host = RecordingHost()
        binder = PodBinder(kube, locks, host, lock_poll_s=30)  # type: ignore[arg-type]
        binder.submit(BindItem("team-a/p", "uid-p", "n1"))
        await asyncio.sleep(0.05)
        assert kube.posts("/binding") == [] and binder.lock_waits == 1
        state["locked"] = False
        binder.node_changed("n1")
        await asyncio.sleep(0.05)
        assert len(kube.posts("/binding")) == 1 and host.outcomes == [BindOutcome.BOUND]
        await binder.close()

    asyncio.run(body())


def test_lock_is_taken_only_for_pods_with_hamis_device_annotations() -> None:
    """A node whose cards HAMi did not register has no HAMi device plugin to release a
    lock: its pods bind without one; a HAMi node's pods take it first."""

    async def body() -> None:
        kube = ScriptedKube()
        ctl = Controller(kube, default_config(), Options(leader_elect=False))  # type: ignore[arg-type]
        gfd = node_obj("gfd", 1)
        gfd["metadata"]["annotations"] = {}
        gfd["metadata"]["labels"] = {
            "nvidia.com/gpu.product": "A100",
            "nvidia.com/gpu.memory": "40960",
        }
        gfd["status"]["allocatable"]["nvidia.com/gpu"] = "1"
        ctl.node_informer.cache["gfd"] = gfd
        ctl.node_informer.cache["n1"] = node_obj("n1", 1)
        ctl.rebuild()
        for name in ("a", "b"):
            add(ctl, pod_obj(name))
        ctl.cycle()
        await settle(60)
        bound = {b["target"]["name"]: b for b in kube.posts("/binding")}
        assert set(bound) == {"gfd", "n1"}
        node_patches = [p for m, p, _ in kube.calls if m == "PATCH" and "/nodes/" in p]
        assert node_patches == ["/api/v1/nodes/n1"]  # the lock, on the HAMi node only
        assert "hami.io/vgpu-devices-to-allocate" in bound["n1"]["metadata"]["annotations"]
        assert "hami.io/vgpu-devices-to-allocate" not in bound["gfd"]["metadata"]["annotations"]

    asyncio.run(body())


def test_binds_of_a_lost_term_are_dropped_not_made_later() -> None:
    """A bind waiting for a node's lock when this replica stops leading is forgotten: if
    this replica leads again, it must not bind with the old term's decision."""

    async def body() -> None:
        kube = ScriptedKube()
        ctl = controller(kube)
        ctl.node_informer.cache["n1"] = locked_node(format_lock(time.time(), "x", "other"))
        add(ctl, pod_obj("p"))
        ctl.cycle()
        await settle()
        assert ctl.binder.lock_waits == 1 and kube.posts("/binding") == []
        await ctl._lost_leadership()
        await settle()
        ctl.node_informer.cache["n1"] = node_obj("n1", 1)  # the lock is released
        ctl.binder.node_changed("n1")
        await asyncio.sleep(0.05)
        assert kube.posts("/binding") == []

    asyncio.run(body())


def test_required_rules_not_honoured_are_told_to_the_pod() -> None:
    async def body() -> None:
        kube = ScriptedKube()
        ctl = controller(kube, node_lock=False)
        pod = pod_obj("p")
        pod["spec"]["affinity"] = {
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "topologyKey": "kubernetes.io/hostname",
                        "namespaceSelector": {"matchLabels": {"team": "a"}},
                        "labelSelector": {"matchLabels": {"app": "x"}},
                    }
                ]
            }
        }
        pod["spec"]["topologySpreadConstraints"] = [
            {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway"}
        ]
        add(ctl, pod)
        await settle()
        (event,) = kube.posts("/events")
        assert event["reason"] == "ConstraintIgnored"
        assert "podAntiAffinity" in event["message"] and "namespaceSelector" in event["message"]
        assert "topologySpread" not in event["message"]  # a preference: nothing to tell

    asyncio.run(body())


HOST = "kubernetes.io/hostname"


def test_a_namespace_selector_follows_the_namespaces_labels() -> None:
    """Anti-affinity to pods of namespaces labelled tier=prod keeps away from the node where
    another scheduler's pod of such a namespace runs; affinity to pods of namespaces labelled
    tier=gold waits, and goes beside that pod once its Namespace is relabelled."""

    async def body() -> None:
        kube = ScriptedKube()
        ctl = Controller(
            kube,
            default_config(),  # type: ignore[arg-type]
            Options(leader_elect=False, node_lock=False),
        )
        for n in ("n1", "n2"):
            node = node_obj(n, 2)
            node["metadata"]["labels"] = {HOST: n}
            ctl.node_informer.cache[n] = node
        ctl.rebuild()
        spaces = ctl.namespaces
        spaces.informer.synced.set()
        spaces.watched = True
        for name, labels in (("prod", {"tier": "prod"}), ("team-a", {})):
            spaces.informer.cache[name] = {"metadata": {"name": name, "labels": labels}}
            spaces._on_event("ADDED", spaces.informer.cache[name], None)
        db = pod_body("db", ns="prod", labels={"app": "db"}, scheduler="default-scheduler")
        db["spec"]["nodeName"] = "n1"
        add(ctl, db)

        def wanting(name: str, kind: str, tier: str) -> dict[str, Any]:
            pod = pod_obj(name)
            pod["spec"]["affinity"] = {
                kind: {
                    "requiredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "topologyKey": HOST,
                            "labelSelector": {"matchLabels": {"app": "db"}},
                            "namespaceSelector": {"matchLabels": {"tier": tier}},
                        }
                    ]
                }
            }
            return pod

        add(ctl, wanting("away", "podAntiAffinity", "prod"))
        add(ctl, wanting("near", "podAffinity", "gold"))

        def targets() -> dict[str, str]:
            return {b["metadata"]["name"]: b["target"]["name"] for b in kube.posts("/binding")}

        async def binds(n: int) -> None:
            for _ in range(200):  # the binder's tasks run on this loop
                if len(targets()) >= n:
                    return
                await asyncio.sleep(0.01)

        ctl.cycle()
        await binds(1)
        await settle()
        assert targets() == {"away": "n2"}
        # nothing told as not honoured
        assert not [e for e in kube.posts("/events") if e["reason"] == "ConstraintIgnored"]
        spaces._on_event(
            "MODIFIED", {"metadata": {"name": "prod", "labels": {"tier": "gold"}}}, None
        )
        ctl.cycle()
        await binds(2)
        assert targets() == {"away": "n2", "near": "n1"}

    asyncio.run(body())


def test_a_pod_whose_rules_fail_does_not_park_a_pod_without_them() -> None:
    """Pods with the same request decided in one cycle: one whose node affinity, pod
    affinity or extended resources fit no node does not stand for the others (the core's
    memo of failed shapes within a cycle keeps their rules apart)."""

    async def body() -> None:
        kube = ScriptedKube()
        ctl = controller(kube, node_lock=False)
        picky = pod_obj("a-picky")
        picky["spec"]["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchFields": [
                                {"key": "metadata.name", "operator": "In", "values": ["elsewhere"]}
                            ]
                        }
                    ]
                }
            }
        }
        lonely = pod_obj("b-lonely")
        lonely["spec"]["affinity"] = {
            "podAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"topologyKey": HOST, "labelSelector": {"matchLabels": {"app": "none"}}}
                ]
            }
        }
        rdma = pod_obj("c-rdma")
        rdma["spec"]["containers"][0]["resources"]["limits"]["rdma/hca"] = "1"
        for pod in (picky, lonely, rdma, pod_obj("d-plain")):
            add(ctl, pod)
        ctl.cycle()
        for _ in range(200):
            if kube.posts("/binding"):
                break
            await asyncio.sleep(0.01)
        assert [b["metadata"]["name"] for b in kube.posts("/binding")] == ["d-plain"]
        assert ctl.sched is not None
        reasons = ctl.last_reason
        assert "node affinity" in reasons["team-a/a-picky"]
        assert "pod affinity" in reasons["team-a/b-lonely"]
        assert "rdma/hca" in reasons["team-a/c-rdma"]

    asyncio.run(body())


MIG_REGISTER = json.dumps(
    [
        {
            "id": "GPU-m",
            "index": 0,
            "count": 7,
            "devmem": 40960,
            "devcore": 100,
            "type": "NVIDIA-A100-SXM4-40GB",
            "mode": "mig",
            "health": True,
            "migProfiles": [
                {
                    "name": "1g.5gb",
                    "memoryMB": 4864,
                    "core": 15,
                    "sliceCount": 1,
                    "placements": [{"start": i, "size": 1} for i in range(7)],
                },
                {
                    "name": "3g.20gb",
                    "memoryMB": 19968,
                    "core": 43,
                    "sliceCount": 3,
                    "placements": [{"start": 0, "size": 4}, {"start": 4, "size": 4}],
                },
            ],
        }
    ]
)


def test_mig_instances_hamis_scheduler_placed_are_left_alone() -> None:
    """Pods HAMi's own scheduler bound hold a 3g at slices 4..7 and a 1g at slice 0 (read
    from their reduced copies): a 3g pod of gpupool's waits (both 3g placements are
    blocked), a 1g pod gets the highest free slice, 3."""

    async def body() -> None:
        kube = ScriptedKube()
        ctl = Controller(
            kube,
            default_config(),  # type: ignore[arg-type]
            Options(leader_elect=False, node_lock=False),
        )
        node = node_obj("m1", 1)
        node["metadata"]["annotations"]["hami.io/node-nvidia-register"] = MIG_REGISTER
        ctl.node_informer.cache["m1"] = node
        ctl.rebuild()
        for name, profile, start, size in (("h3", "3g.20gb", 4, 4), ("h1", "1g.5gb", 0, 1)):
            other = pod_body(name, ns="team-b", scheduler="hami-scheduler")
            other["spec"]["nodeName"] = "m1"
            other["metadata"]["annotations"] = {
                "hami.io/vgpu-mig-allocations": json.dumps(
                    [
                        {
                            "containerIndex": 0,
                            "deviceIndex": 0,
                            "gpuUUID": "GPU-m",
                            "profile": profile,
                            "placement": {"start": start, "size": size},
                            "migUUID": f"MIG-{name}",
                            "gpuInstanceID": 1,
                            "computeInstanceID": 0,
                        }
                    ]
                )
            }
            add(ctl, reduce(other))
        for name, mib in (("want-3g", 15000), ("want-1g", 4000)):
            pod = pod_obj(name)
            pod["metadata"]["annotations"] = {"nvidia.com/vgpu-mode": "mig"}
            pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpumem"] = mib
            add(ctl, pod)
        ctl.cycle()
        for _ in range(200):
            if kube.posts("/binding"):
                break
            await asyncio.sleep(0.01)
        (binding,) = kube.posts("/binding")
        assert binding["metadata"]["name"] == "want-1g"
        (chosen,) = json.loads(binding["metadata"]["annotations"]["hami.io/vgpu-mig-allocations"])
        assert (chosen["profile"], chosen["placement"]) == ("1g.5gb", {"start": 3, "size": 1})
        assert "MIG 3g.20gb" in ctl.last_reason["team-a/want-3g"]

    asyncio.run(body())
