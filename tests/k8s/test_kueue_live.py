"""Kueue's objects as the queues, on a real API server with CRDs for Kueue's kinds
(``data/kueue.x-k8s.io-crds.yaml``, v1beta2 and v1beta1 with Kueue's defaults): objects as a
live install exports them drive admission; a bad edit is marked and scheduling goes on with
the last good version; a change is applied in place, the Lease kept."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpupool.core.model import JobId
from gpupool.k8s.controller import Options
from gpupool.k8s.kube import MERGE_PATCH, Kube, KubeError
from gpupool.k8s.kueue import KueueController, KueueSource
from gpupool.k8s.kueue.source import ACCEPTED, IGNORED
from tests.k8s.conftest import ControlPlane
from tests.k8s.kit import (
    clean,
    device_plugins,
    ensure_namespace,
    events_for,
    get_pod,
    make_node,
    make_pod,
    pod_body,
    wait_for,
)

pytestmark = pytest.mark.k8s

DATA = Path(__file__).parent / "data"
CRDS = DATA / "kueue.x-k8s.io-crds.yaml"
KUEUE = "/apis/kueue.x-k8s.io/v1beta2"
NAMESPACES = ["kq-research", "kq-inference", "kq-batch"]
PLURALS = {
    "ResourceFlavor": "resourceflavors",
    "Cohort": "cohorts",
    "ClusterQueue": "clusterqueues",
    "LocalQueue": "localqueues",
    "WorkloadPriorityClass": "workloadpriorityclasses",
    "AdmissionCheck": "admissionchecks",
    "ProvisioningRequestConfig": "provisioningrequestconfigs",
}
GPU = {"nvidia.com/gpu": 1}
QUEUE_NAME = "kueue.x-k8s.io/queue-name"


@pytest.fixture
def kueue_crds(control_plane: ControlPlane) -> Iterator[ControlPlane]:
    """Kueue's CRDs installed for one test, and removed after it (other tests of the session
    must not find Kueue's API served)."""
    control_plane.kubectl("apply", "-f", str(CRDS))
    for plural in PLURALS.values():
        control_plane.kubectl(
            "wait", "--for=condition=Established", "--timeout=60s", f"crd/{plural}.kueue.x-k8s.io"
        )
    try:
        yield control_plane
    finally:
        control_plane.kubectl(
            "delete", "-f", str(CRDS), "--wait=true", "--timeout=60s", check=False
        )


def exported() -> list[dict[str, Any]]:
    """The v1beta2 objects of the export, as the file holds them."""
    first = next(yaml.safe_load_all(DATA.joinpath("kueue-export.yaml").read_text()))
    return list(first["items"])


def path_of(obj: dict[str, Any]) -> str:
    meta = obj["metadata"]
    plural = PLURALS[obj["kind"]]
    if meta.get("namespace"):
        return f"{KUEUE}/namespaces/{meta['namespace']}/{plural}"
    return f"{KUEUE}/{plural}"


async def create(kube: Kube, obj: dict[str, Any]) -> dict[str, Any]:
    """An exported object created again: what the server fills in (uid, resourceVersion,
    managedFields, status, ...) left out, as ``kubectl apply`` of an export does."""
    body = copy.deepcopy(obj)
    meta = body["metadata"]
    body["metadata"] = {k: meta[k] for k in ("name", "namespace", "labels") if k in meta}
    body.pop("status", None)
    return await kube.request("POST", path_of(body), body)


async def conditions(kube: Kube, path: str) -> dict[str, dict[str, Any]]:
    obj = await kube.request("GET", path)
    return {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or ()}


async def events(kube: Kube, name: str, ns: str = "default") -> list[tuple[str, str]]:
    return [(e["reason"], e["message"]) for e in await events_for(kube, ns, name)]


async def bound(kube: Kube, ns: str, name: str) -> bool:
    return bool((await get_pod(kube, ns, name))["spec"].get("nodeName"))


@contextlib.asynccontextmanager
async def scheduling(
    kube: Kube, **options: Any
) -> AsyncIterator[tuple[KueueController, KueueSource]]:
    """What ``gpupool k8s run`` starts where Kueue is installed, in this event loop."""
    source = await KueueSource.discover(kube, debounce_s=0.05, interval_s=0.1)
    assert source is not None, "Kueue's API is not served"
    config = await source.start()
    controller = KueueController(kube, config, Options(**{"leader_elect": False, **options}))
    source.attach(controller)
    tasks = [asyncio.create_task(controller.run()), asyncio.create_task(source.run())]
    try:
        await wait_for(lambda: _ready(controller, tasks), 30, "controller sync")
        yield controller, source
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def _ready(controller: KueueController, tasks: list[asyncio.Task[None]]) -> bool:
    for t in tasks:
        if t.done():
            t.result()
    return controller.sched is not None


def live(cp: ControlPlane, body: Any) -> None:
    async def main() -> None:
        kube = await Kube.connect(cp.kubeconfig)
        try:
            for ns in NAMESPACES:
                await ensure_namespace(kube, ns)
            await clean(kube, [*NAMESPACES, "default"])
            async with device_plugins(kube):  # HAMi's plugin releases each node lock
                await body(kube)
        finally:
            await clean(kube, [*NAMESPACES, "default"])
            await kube.close()

    asyncio.run(main())


def test_objects_as_exported_from_a_kueue_install_drive_admission(kueue_crds: ControlPlane) -> None:
    async def body(kube: Kube) -> None:
        for obj in exported():
            await create(kube, obj)
        # what Kueue's own controller writes stays beside gpupool's conditions
        cq = f"{KUEUE}/clusterqueues/research"
        await kube.request(
            "PATCH",
            f"{cq}/status",
            {
                "status": {
                    "conditions": [
                        {
                            "type": "Active",
                            "status": "True",
                            "reason": "Ready",
                            "observedGeneration": 1,
                            "message": "Can admit new workloads",
                            "lastTransitionTime": "2026-11-02T09:14:23Z",
                        }
                    ]
                }
            },
            content_type=MERGE_PATCH,
        )
        await make_node(kube, "gpu-1", gpus=8, labels={"gpupool.io/flavor": "a100"})
        job = await kube.request(
            "POST",
            "/apis/batch/v1/namespaces/kq-inference/jobs",
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {
                    "name": "serve",
                    "labels": {QUEUE_NAME: "serve", "kueue.x-k8s.io/priority-class": "urgent"},
                },
                "spec": {
                    "suspend": True,
                    "template": {
                        "spec": {
                            "restartPolicy": "Never",
                            "containers": [{"name": "main", "image": "example.invalid/x"}],
                        }
                    },
                },
            },
        )
        async with scheduling(kube) as (controller, _):
            # no label on the pod: its Job names the queue and the priority class
            pod = pod_body("s0", ns="kq-inference", limits=GPU)
            pod["metadata"]["ownerReferences"] = [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": "serve",
                    "uid": job["metadata"]["uid"],
                    "controller": True,
                }
            ]
            await kube.request("POST", "/api/v1/namespaces/kq-inference/pods", pod)
            await wait_for(lambda: bound(kube, "kq-inference", "s0"), 30, "s0 bound")
            for i in range(7):
                await make_pod(
                    kube, f"r{i}", ns="kq-research", limits=GPU, labels={QUEUE_NAME: "team"}
                )
            # a LocalQueue of another namespace is not this pod's queue
            await make_pod(
                kube, "stray", ns="kq-inference", limits=GPU, labels={QUEUE_NAME: "team"}
            )
            # research: its 4 GPUs and the 1 inference does not use (borrowing limit 2)
            await wait_for(
                lambda: _count_bound(kube, "kq-research", 7, at_least=5),
                30,
                "research's pods bound",
            )
            await asyncio.sleep(1.0)
            assert await _count_bound(kube, "kq-research", 7, at_least=0) == 5
            sched = controller.sched
            assert sched is not None
            (s0,) = [r for r in sched.running() if r.job.id == JobId("kq-inference/s0")]
            assert (s0.queue, s0.job.priority) == ("inference", 1000)
            assert not await bound(kube, "kq-inference", "stray")
            msgs = [m for _, m in await events(kube, "stray", "kq-inference")]
            assert any(
                "LocalQueue 'team' does not exist in namespace 'kq-inference'" in m for m in msgs
            ), msgs
            # every object told; the fields gpupool does not act on named
            cond = await wait_for(lambda: _with(kube, cq, IGNORED), 20, "research's conditions")
            assert cond[ACCEPTED]["status"] == "True"
            assert cond["Active"]["reason"] == "Ready"  # Kueue's condition kept
            assert cond[IGNORED]["status"] == "True"
            assert "spec.preemption.withinClusterQueue" in cond[IGNORED]["message"]
            assert "spec.preemption.borrowWithinCohort" in cond[IGNORED]["message"]
            flavor = await wait_for(
                lambda: _with(kube, f"{KUEUE}/resourceflavors/a100", IGNORED),
                20,
                "a100's conditions",
            )
            assert "spec.topologyName" in flavor[IGNORED]["message"]
            reasons = dict(await wait_for(lambda: events(kube, "research"), 10, "events"))
            assert "spec.preemption.withinClusterQueue" in reasons["FieldsIgnored"]
            # WorkloadPriorityClass has no status: Events only, and only when there is news
            assert await events(kube, "urgent") == []

    live(kueue_crds, body)


async def _count_bound(kube: Kube, ns: str, n: int, at_least: int) -> int:
    count = sum([await bound(kube, ns, f"r{i}") for i in range(n)])
    return count if count >= at_least else 0


async def _with(kube: Kube, path: str, kind: str) -> dict[str, dict[str, Any]] | None:
    cond = await conditions(kube, path)
    return cond if kind in cond else None


async def _status(kube: Kube, path: str, kind: str, status: str) -> bool:
    cond = await conditions(kube, path)
    return kind in cond and cond[kind]["status"] == status


SMALL = [
    {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ResourceFlavor",
        "metadata": {"name": "a100"},
        "spec": {"nodeLabels": {"gpupool.io/flavor": "a100"}},
    },
    {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": "research"},
        "spec": {
            "namespaceSelector": {},
            "resourceGroups": [
                {
                    "coveredResources": ["nvidia.com/gpu"],
                    "flavors": [
                        {
                            "name": "a100",
                            "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 2}],
                        }
                    ],
                }
            ],
        },
    },
    {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": "batch"},
        "spec": {
            "namespaceSelector": {},
            "resourceGroups": [
                {
                    "coveredResources": ["nvidia.com/gpu"],
                    "flavors": [
                        {
                            "name": "a100",
                            "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 2}],
                        }
                    ],
                }
            ],
        },
    },
    {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "LocalQueue",
        "metadata": {"name": "team", "namespace": "kq-research"},
        "spec": {"clusterQueue": "research"},
    },
    {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "LocalQueue",
        "metadata": {"name": "team", "namespace": "kq-batch"},
        "spec": {"clusterQueue": "batch"},
    },
]


async def set_quota(kube: Kube, cq: str, resource: dict[str, Any]) -> None:
    await kube.request(
        "PATCH",
        f"{KUEUE}/clusterqueues/{cq}",
        {
            "spec": {
                "resourceGroups": [
                    {
                        "coveredResources": ["nvidia.com/gpu"],
                        "flavors": [{"name": "a100", "resources": [resource]}],
                    }
                ]
            }
        },
        content_type=MERGE_PATCH,
    )


def test_a_bad_clusterqueue_edit_is_marked_and_scheduling_goes_on(kueue_crds: ControlPlane) -> None:
    async def body(kube: Kube) -> None:
        for obj in SMALL:
            await create(kube, obj)
        # the API server fills in Kueue's defaults, as in a Kueue install
        spec = (await kube.request("GET", f"{KUEUE}/clusterqueues/research"))["spec"]
        assert spec["preemption"] == {
            "withinClusterQueue": "Never",
            "reclaimWithinCohort": "Never",
            "borrowWithinCohort": {"policy": "Never"},
        }
        assert (spec["stopPolicy"], spec["queueingStrategy"]) == ("None", "BestEffortFIFO")
        assert spec["flavorFungibility"] == {
            "whenCanBorrow": "MayStopSearch",
            "whenCanPreempt": "TryNextFlavor",
        }
        lq = await kube.request("GET", f"{KUEUE}/namespaces/kq-research/localqueues/team")
        assert lq["spec"]["stopPolicy"] == "None"
        await make_node(kube, "gpu-1", gpus=8, labels={"gpupool.io/flavor": "a100"})
        cq = f"{KUEUE}/clusterqueues/research"
        async with scheduling(kube) as (controller, source):
            sched = controller.sched
            assert sched is not None
            (research,) = [q for q in sched.config.cluster_queues if q.name == "research"]
            assert (
                research.preemption.within_cluster_queue,
                research.preemption.reclaim_within_cohort,
            ) == ("Never", "Never")
            await make_pod(kube, "r0", ns="kq-research", limits=GPU, labels={QUEUE_NAME: "team"})
            await wait_for(lambda: bound(kube, "kq-research", "r0"), 30, "r0 bound")
            # lending more than one has: a rule the schema cannot check
            await set_quota(
                kube, "research", {"name": "nvidia.com/gpu", "nominalQuota": 6, "lendingLimit": 9}
            )
            cond = await wait_for(lambda: _false(kube, cq), 20, "research marked")
            message = cond[ACCEPTED]["message"]
            assert cond[ACCEPTED]["reason"] == "InvalidField"
            assert "lendingLimit=9" in message and "last applied version stays in use" in message, (
                message
            )
            reasons = dict(await wait_for(lambda: events(kube, "research"), 10, "an Event"))
            assert "lendingLimit=9" in reasons["InvalidConfiguration"]
            # the last good version (2 GPUs) stays in force, and every queue keeps scheduling
            for name in ("r1", "r2"):
                await make_pod(
                    kube, name, ns="kq-research", limits=GPU, labels={QUEUE_NAME: "team"}
                )
            await make_pod(kube, "b0", ns="kq-batch", limits=GPU, labels={QUEUE_NAME: "team"})
            await wait_for(lambda: bound(kube, "kq-batch", "b0"), 30, "b0 bound")
            await wait_for(lambda: _one_of(kube, "r1", "r2"), 30, "r1 or r2 bound")
            await asyncio.sleep(1.0)
            assert not (
                await bound(kube, "kq-research", "r1") and await bound(kube, "kq-research", "r2")
            )
            # a new object that is bad from the start is marked and left out
            await create(
                kube,
                {
                    **SMALL[1],
                    "metadata": {"name": "ghost"},
                    "spec": {
                        "resourceGroups": [
                            {
                                "coveredResources": ["nvidia.com/gpu"],
                                "flavors": [
                                    {
                                        "name": "h100",
                                        "resources": [
                                            {"name": "nvidia.com/gpu", "nominalQuota": 1}
                                        ],
                                    }
                                ],
                            }
                        ]
                    },
                },
            )
            ghost = await wait_for(
                lambda: _false(kube, f"{KUEUE}/clusterqueues/ghost"), 20, "ghost marked"
            )
            assert "is not a ResourceFlavor" in ghost[ACCEPTED]["message"]
            assert "it is not in use" in ghost[ACCEPTED]["message"]
            # the fix applies in place: the waiting pod starts, the object is good again
            await set_quota(kube, "research", {"name": "nvidia.com/gpu", "nominalQuota": 3})
            await wait_for(lambda: _count(kube, ("r0", "r1", "r2"), 3), 30, "r1 and r2 bound")
            cond = await wait_for(lambda: _true(kube, cq), 20, "research good again")
            assert cond[ACCEPTED]["reason"] == "Applied"
            assert controller.sched is sched  # never rebuilt
            assert source.applied >= 1

    live(kueue_crds, body)


async def _false(kube: Kube, path: str) -> dict[str, dict[str, Any]] | None:
    cond = await conditions(kube, path)
    return cond if cond.get(ACCEPTED, {}).get("status") == "False" else None


async def _true(kube: Kube, path: str) -> dict[str, dict[str, Any]] | None:
    cond = await conditions(kube, path)
    return cond if cond.get(ACCEPTED, {}).get("status") == "True" else None


async def _one_of(kube: Kube, *names: str) -> bool:
    return any([await bound(kube, "kq-research", n) for n in names])


async def _count(kube: Kube, names: tuple[str, ...], n: int) -> bool:
    return sum([await bound(kube, "kq-research", x) for x in names]) >= n


LEASE_NS = "gpupool-kueue-test"
LEASE = f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NS}/leases/gpupool-scheduler"


def test_a_queue_change_applies_in_place_without_a_lease_transition(
    kueue_crds: ControlPlane, tmp_path: Path
) -> None:
    """``gpupool k8s run`` as deployed (no --queues): it finds Kueue's API and reads its
    objects; raising a quota admits waiting pods with the same process, Lease and holder."""
    log = tmp_path / "run.log"
    proc: subprocess.Popen[bytes] | None = None

    async def body(kube: Kube) -> None:
        nonlocal proc
        await ensure_namespace(kube, LEASE_NS)
        with contextlib.suppress(KubeError):
            await kube.request("DELETE", LEASE)
        for obj in SMALL:
            await create(kube, obj)
        await set_quota(kube, "research", {"name": "nvidia.com/gpu", "nominalQuota": 1})
        await make_node(kube, "gpu-1", gpus=8, labels={"gpupool.io/flavor": "a100"})
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gpupool.k8s",
                "run",
                "--kubeconfig",
                kueue_crds.kubeconfig,
                "--identity",
                "only",
                "--lease-namespace",
                LEASE_NS,
                "--lease-duration",
                "4",
                "--renew-interval",
                "0.5",
            ],
            stdout=log.open("wb"),
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        lease = await wait_for(lambda: _held(kube), 30, "the Lease held")
        for i in range(3):
            await make_pod(kube, f"r{i}", ns="kq-research", limits=GPU, labels={QUEUE_NAME: "team"})
        await wait_for(lambda: _count(kube, ("r0", "r1", "r2"), 1), 30, "one pod bound")
        await asyncio.sleep(1.0)
        assert not await _count(kube, ("r0", "r1", "r2"), 2)  # quota 1
        await set_quota(kube, "research", {"name": "nvidia.com/gpu", "nominalQuota": 3})
        await wait_for(lambda: _count(kube, ("r0", "r1", "r2"), 3), 30, "all three bound")
        after = (await kube.request("GET", LEASE))["spec"]
        assert after["holderIdentity"] == "only"
        assert after["acquireTime"] == lease["acquireTime"]
        assert int(after.get("leaseTransitions") or 0) == int(lease.get("leaseTransitions") or 0)
        assert proc.poll() is None

    try:
        live(kueue_crds, body)
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=20)
    text = log.read_text()
    assert "configuration applied" in text
    assert "rebuilding" not in text


async def _held(kube: Kube) -> dict[str, Any] | None:
    try:
        spec = (await kube.request("GET", LEASE)).get("spec") or {}
    except KubeError:
        return None
    return spec if spec.get("holderIdentity") else None


KUEUE_READER = {
    "apiVersion": "rbac.authorization.k8s.io/v1",
    "kind": "ClusterRole",
    "metadata": {"name": "gpupool-kueue-test-reader"},
    "rules": [
        {
            "apiGroups": ["kueue.x-k8s.io"],
            "resources": list(PLURALS.values()),
            "verbs": ["get", "list", "watch"],
        },
        {
            "apiGroups": ["kueue.x-k8s.io"],
            "resources": [f"{p}/status" for p in PLURALS.values()],
            "verbs": ["get", "patch"],
        },
    ],
}


def limited_kubeconfig(cp: ControlPlane, path: Path) -> str:
    """The fixture's kubeconfig with the token of ``gpupool-limited`` (no group, no rights
    but those bound to it)."""
    text = Path(cp.kubeconfig).read_text()
    admin = cp.token(0)
    path.write_text(text.replace(admin, cp.token(1)))
    return str(path)


def test_the_service_accounts_rights_are_enough_and_missing_ones_do_not_stop_it(
    kueue_crds: ControlPlane, tmp_path: Path
) -> None:
    """As ``gpupool-limited`` with deploy/'s ClusterRole less some rights (Jobs: get only)
    and read access to Kueue's kinds: Kueue's objects are read and pods bind; without the
    Job list right the queue comes from the pod's own label. Without read access to Kueue's
    kinds, gpupool falls back to its own queue objects instead of waiting forever on a
    forbidden watch."""
    roles = yaml.safe_load_all((Path(__file__).parents[2] / "deploy" / "rbac.yaml").read_text())
    (full_role,) = [r for r in roles if r and r["kind"] == "ClusterRole"]
    # deploy/'s ClusterRole grants all of it; this test takes some rights away to show that
    # gpupool goes on without them: Jobs only `get`, and Kueue's kinds only through the
    # separate KUEUE_READER role (taken away half-way)
    rules = []
    for rule in full_role["rules"]:
        if "kueue.x-k8s.io" in rule["apiGroups"]:
            continue
        if "batch" in rule["apiGroups"]:
            rule = {**rule, "verbs": ["get"]}
        rules.append(rule)
    scheduler_role = {**full_role, "rules": rules}
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "subjects": [
            {"kind": "User", "name": "gpupool-limited", "apiGroup": "rbac.authorization.k8s.io"}
        ],
    }
    rbac = "/apis/rbac.authorization.k8s.io/v1"

    async def body(kube: Kube) -> None:
        for role in (scheduler_role, KUEUE_READER):
            with contextlib.suppress(KubeError):
                await kube.request("DELETE", f"{rbac}/clusterroles/{role['metadata']['name']}")
            await kube.request("POST", f"{rbac}/clusterroles", role)
            name = role["metadata"]["name"]
            with contextlib.suppress(KubeError):
                await kube.request("DELETE", f"{rbac}/clusterrolebindings/{name}")
            await kube.request(
                "POST",
                f"{rbac}/clusterrolebindings",
                {
                    **binding,
                    "metadata": {"name": name},
                    "roleRef": {
                        "apiGroup": "rbac.authorization.k8s.io",
                        "kind": "ClusterRole",
                        "name": name,
                    },
                },
            )
        for obj in SMALL:
            await create(kube, obj)
        await make_node(kube, "gpu-1", gpus=8, labels={"gpupool.io/flavor": "a100"})
        limited = await Kube.connect(limited_kubeconfig(kueue_crds, tmp_path / "limited"))
        try:

            async def forbidden_jobs() -> bool:
                try:
                    await limited.request("GET", "/apis/batch/v1/jobs", params={"limit": "1"})
                except KubeError as exc:
                    return exc.status == 403
                return False

            await wait_for(forbidden_jobs, 10, "RBAC in force")
            async with scheduling(limited) as (controller, _):
                await make_pod(
                    kube, "r0", ns="kq-research", limits=GPU, labels={QUEUE_NAME: "team"}
                )
                await wait_for(lambda: bound(kube, "kq-research", "r0"), 30, "r0 bound")
                assert not controller.job_informer.synced.is_set()
            reader = KUEUE_READER["metadata"]["name"]
            await kube.request("DELETE", f"{rbac}/clusterrolebindings/{reader}")

            async def unreadable() -> bool:
                return await KueueSource.discover(limited) is None

            await wait_for(unreadable, 10, "Kueue's kinds unreadable")
        finally:
            await limited.close()
            for role in (scheduler_role, KUEUE_READER):
                name = role["metadata"]["name"]
                with contextlib.suppress(KubeError):
                    await kube.request("DELETE", f"{rbac}/clusterrolebindings/{name}")
                with contextlib.suppress(KubeError):
                    await kube.request("DELETE", f"{rbac}/clusterroles/{name}")

    live(kueue_crds, body)


def test_a_namespace_selector_decides_which_namespaces_may_use_a_queue(
    kueue_crds: ControlPlane,
) -> None:
    """research admits namespaces labelled team=research: a LocalQueue of kq-batch pointing at
    it gets nothing until kq-batch is labelled; then its pod is offered again and binds."""

    async def body(kube: Kube) -> None:
        research = copy.deepcopy(SMALL[1])
        research["spec"]["namespaceSelector"] = {"matchLabels": {"team": "research"}}
        for obj in (SMALL[0], research, SMALL[3], lq_body("sneaky", "kq-batch", "research")):
            await create(kube, obj)
        ns = "/api/v1/namespaces"
        await kube.request(
            "PATCH",
            f"{ns}/kq-research",
            {"metadata": {"labels": {"team": "research"}}},
            content_type=MERGE_PATCH,
        )
        await kube.request(
            "PATCH",
            f"{ns}/kq-batch",
            {"metadata": {"labels": {"team": None}}},
            content_type=MERGE_PATCH,
        )
        await make_node(kube, "gpu-1", gpus=8, labels={"gpupool.io/flavor": "a100"})
        try:
            async with scheduling(kube) as (controller, _):
                assert controller.enforce_selectors
                await make_pod(
                    kube, "r0", ns="kq-research", limits=GPU, labels={QUEUE_NAME: "team"}
                )
                await make_pod(kube, "b0", ns="kq-batch", limits=GPU, labels={QUEUE_NAME: "sneaky"})
                await wait_for(lambda: bound(kube, "kq-research", "r0"), 30, "r0 bound")
                msgs = await wait_for(lambda: events(kube, "b0", "kq-batch"), 20, "b0 refused")
                assert any(
                    "ClusterQueue research does not admit namespace 'kq-batch'" in m
                    for _, m in msgs
                ), msgs
                assert not await bound(kube, "kq-batch", "b0")
                # the selector is acted on: not reported as ignored, once Namespaces are
                # watched (a report written before that says it was not acted on yet)
                await wait_for(
                    lambda: _status(kube, f"{KUEUE}/clusterqueues/research", IGNORED, "False"),
                    20,
                    "research's conditions",
                )
                await kube.request(
                    "PATCH",
                    f"{ns}/kq-batch",
                    {"metadata": {"labels": {"team": "research"}}},
                    content_type=MERGE_PATCH,
                )
                await wait_for(lambda: bound(kube, "kq-batch", "b0"), 30, "b0 bound")
        finally:
            await kube.request(
                "PATCH",
                f"{ns}/kq-batch",
                {"metadata": {"labels": {"team": None}}},
                content_type=MERGE_PATCH,
            )

    live(kueue_crds, body)


def lq_body(name: str, ns: str, cq: str) -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "LocalQueue",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"clusterQueue": cq},
    }
