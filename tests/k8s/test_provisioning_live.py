"""Queued provisioning on a real API server: cluster-autoscaler's ProvisioningRequest CRD
installed, gpupool making the requests and PodTemplates a provisioning admission check asks
for, and the test playing cluster-autoscaler's ``best-effort-atomic-scale-up`` class: it
reads the request's PodTemplates, sets ``Accepted`` then ``Provisioned`` (reason
``CapacityIsProvisioned``) as soon as the scale-up is asked for, and the nodes register
afterwards with their node group's labels and taint only, never a label naming the
request."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpupool.config import load_queue_config
from gpupool.core.errors import InvalidJobError
from gpupool.core.model import GpuRequest, Job, JobId, PodSet, QueueName
from gpupool.core.provisioning import BEST_EFFORT_ATOMIC_CLASS, CLASS_ANNOTATION, CONSUME_ANNOTATION
from gpupool.core.quota import QueueConfig
from gpupool.k8s.controller import Controller, Options
from gpupool.k8s.kube import MERGE_PATCH, Kube, KubeError
from gpupool.k8s.provisioning import ProvisioningAdapter
from tests.k8s.conftest import ControlPlane
from tests.k8s.kit import get_pod, make_node, pod_body, set_phase, wait_for
from tests.k8s.test_scheduler_live import live

pytestmark = pytest.mark.k8s

NS = "prov"
DATA = Path(__file__).parent / "data"
PR = f"/apis/autoscaling.x-k8s.io/v1/namespaces/{NS}/provisioningrequests"

QUEUES = """
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: h100}
spec: {nodeLabels: {pool: h100}}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ProvisioningRequestConfig
metadata: {name: dws-config}
spec:
  provisioningClassName: best-effort-atomic-scale-up.autoscaling.x-k8s.io
  parameters: {maxRunDurationSeconds: "3600"}
  retryStrategy: {backoffLimitCount: 1, backoffBaseSeconds: 1, backoffMaxSeconds: 1}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: AdmissionCheck
metadata: {name: dws}
spec:
  controllerName: kueue.x-k8s.io/provisioning-request
  parameters: {apiGroup: kueue.x-k8s.io, kind: ProvisioningRequestConfig, name: dws-config}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: train}
spec:
  admissionChecks: [dws]
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: h100
      resources: [{name: nvidia.com/gpu, nominalQuota: 64}]
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: train, namespace: prov}
spec: {clusterQueue: train}
"""


def install_crd(cp: ControlPlane) -> None:
    cp.kubectl("apply", "-f", str(DATA / "provisioningrequests.autoscaling.x-k8s.io.yaml"))
    cp.kubectl(
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "crd/provisioningrequests.autoscaling.x-k8s.io",
    )


@contextlib.asynccontextmanager
async def prov_running(
    kube: Kube, config: QueueConfig
) -> AsyncIterator[tuple[Controller, ProvisioningAdapter]]:
    ctl = Controller(kube, config, Options(leader_elect=False, cycle_interval_s=0.2))
    ad = ProvisioningAdapter(kube, ctl)
    ctl.attach(provisioning=ad)
    tasks = [asyncio.create_task(ctl.run()), asyncio.create_task(ad.run())]
    try:

        async def ready() -> bool:
            for t in tasks:
                if t.done():
                    t.result()
            return ctl.sched is not None and ad.informer.synced.is_set()

        await wait_for(ready, 20, "controller sync")
        yield ctl, ad
    finally:
        for t in tasks:
            t.cancel()
        async with asyncio.timeout(30):  # a loop that ignores cancel fails here
            await asyncio.gather(*tasks, return_exceptions=True)


POOL_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
"""The taint of the H100 node group: GPU pods tolerate it, nothing else lands there."""
TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


async def make_pod(kube: Kube, name: str, **kwargs: Any) -> dict[str, Any]:
    """A GPU pod of the pool: it tolerates the pool's taint."""
    body = pod_body(name, **kwargs)
    body["spec"]["tolerations"] = [TOLERATION]
    return await kube.request("POST", f"/api/v1/namespaces/{NS}/pods", body)


async def gang(
    kube: Kube, name: str, size: int, gpus: int = 8, limits: list[dict[str, Any]] | None = None
) -> list[str]:
    """``size`` pods of one gang; ``limits`` per pod (different ones: several pod sets)."""
    names = [f"{name}-{i}" for i in range(size)]
    for i, n in enumerate(names):
        await make_pod(
            kube,
            n,
            ns=NS,
            limits=limits[i] if limits else {"nvidia.com/gpu": gpus},
            labels={"gpupool.io/queue": "train"},
            annotations={"gpupool.io/gang": name, "gpupool.io/gang-size": str(size)},
        )
    return names


async def requests(kube: Kube) -> dict[str, dict[str, Any]]:
    items = (await kube.request("GET", PR)).get("items") or []
    return {i["metadata"]["name"]: i for i in items}


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


async def set_condition(kube: Kube, name: str, kind: str, reason: str, message: str = "") -> None:
    """What the autoscaler writes: one more condition on the request's status."""
    obj = await kube.request("GET", f"{PR}/{name}")
    conds = [c for c in (obj.get("status") or {}).get("conditions") or () if c["type"] != kind]
    conds.append(
        {
            "type": kind,
            "status": "True",
            "reason": reason,
            "message": message or reason,
            "lastTransitionTime": _now(),
        }
    )
    await kube.request(
        "PATCH", f"{PR}/{name}/status", {"status": {"conditions": conds}}, content_type=MERGE_PATCH
    )


async def provision_nodes(kube: Kube, prefix: str, count: int) -> list[str]:
    """What the node group does once the autoscaler scaled it up: ``count`` nodes register
    with the group's labels and taint, and nothing that names a request."""
    names = [f"{prefix}-node-{i}" for i in range(count)]
    for n in names:
        await make_node(kube, n, gpus=8, model="NVIDIA-H100", labels={"pool": "h100"})
        await kube.request(
            "PATCH",
            f"/api/v1/nodes/{n}",
            {"spec": {"taints": [POOL_TAINT]}},
            content_type=MERGE_PATCH,
        )
    return names


async def _nodes_recorded(kube: Kube, name: str, count: int) -> bool:
    pr = await _get(kube, name) or {}
    value = ((pr.get("metadata") or {}).get("annotations") or {}).get("gpupool.io/nodes", "")
    return len([n for n in value.split(",") if n]) == count


async def templates(kube: Kube, pr: dict[str, Any]) -> list[dict[str, Any]]:
    """The PodTemplates a request's pod sets point to (what the autoscaler simulates)."""
    return [
        await kube.request(
            "GET", f"/api/v1/namespaces/{NS}/podtemplates/{ps['podTemplateRef']['name']}"
        )
        for ps in pr["spec"]["podSets"]
    ]


def test_provisioning_request_lifecycle(control_plane: ControlPlane) -> None:
    install_crd(control_plane)
    config = load_queue_config(list(yaml.safe_load_all(QUEUES)))

    async def body(kube: Kube) -> None:
        # a free node of the pool where one pod fits: nothing starts there before the
        # request is Provisioned; then the autoscaler counts it and scales up one node only
        await provision_nodes(kube, "fixed", 1)
        async with prov_running(kube, config) as (ctl, _ad):
            pods = await gang(kube, "pretrain", 2)

            async def made() -> dict[str, Any] | None:
                return (await requests(kube)).get("prov-gang-pretrain-1")

            pr = await wait_for(made, 20, "ProvisioningRequest made")
            assert pr["spec"]["provisioningClassName"] == BEST_EFFORT_ATOMIC_CLASS
            assert pr["spec"]["parameters"] == {"maxRunDurationSeconds": "3600"}
            (ps,) = pr["spec"]["podSets"]
            assert ps["count"] == 2
            (tpl,) = await templates(kube, pr)
            spec = tpl["template"]["spec"]
            res = spec["containers"][0]["resources"]
            assert res["limits"] == {"nvidia.com/gpu": "8"}
            assert res["requests"]["nvidia.com/gpu"] == "8"  # the autoscaler fits requests
            assert spec["nodeSelector"] == {"pool": "h100"}
            assert TOLERATION in spec["tolerations"]  # the pool's taint: its group can scale
            assert "nodeName" not in spec and spec.get("schedulerName") != "gpupool"

            # the pods are marked as the request's consumers, and wait
            async def annotated() -> bool:
                for n in pods:
                    ann = (await get_pod(kube, NS, n))["metadata"]["annotations"]
                    if ann.get(CONSUME_ANNOTATION) != "prov-gang-pretrain-1":
                        return False
                    assert ann[CLASS_ANNOTATION] == BEST_EFFORT_ATOMIC_CLASS
                return True

            await wait_for(annotated, 20, "pods annotated to consume the request")
            await set_condition(kube, "prov-gang-pretrain-1", "Accepted", "Accepted")
            await asyncio.sleep(0.5)
            for n in pods:
                assert not (await get_pod(kube, NS, n))["spec"].get("nodeName")
            # best-effort-atomic-scale-up: Provisioned as soon as the scale-up is asked for;
            # the gang cannot start on the one free node alone
            await set_condition(
                kube, "prov-gang-pretrain-1", "Provisioned", "CapacityIsProvisioned"
            )
            await asyncio.sleep(0.5)
            for n in pods:
                assert not (await get_pod(kube, NS, n))["spec"].get("nodeName")
            # the core's booking (and its 10 minutes) starts when every node is there
            assert ctl.sched is not None and ctl.sched.checks is not None
            (early,) = [
                r for r in ctl.sched.provisioning_requests() if r.name == "prov-gang-pretrain-1"
            ]
            assert early.provisioned_s is None
            # the node group's new node registers (pool labels and taint, no request label)
            nodes = await provision_nodes(kube, "pretrain", 1)

            async def both_bound() -> list[str] | None:
                got = [(await get_pod(kube, NS, n))["spec"].get("nodeName") for n in pods]
                return got if all(got) else None

            placed = await wait_for(both_bound, 20, "gang bound on the provisioned nodes")
            assert sorted(placed) == sorted(["fixed-node-0", *nodes])
            ann = (await get_pod(kube, NS, pods[0]))["metadata"]["annotations"]
            assert ann[CONSUME_ANNOTATION] == "prov-gang-pretrain-1"
            assert ctl.sched is not None
            job = ctl.pod_job[f"{NS}/{pods[0]}"]
            assert ctl.sched.run_limit_s(job) is not None
            assert ctl.sched.run_limit_s(job) <= 3600  # type: ignore[operator]

            async def recorded() -> bool:
                got = (await requests(kube))["prov-gang-pretrain-1"]
                return (got["metadata"].get("annotations") or {}).get(
                    "gpupool.io/nodes"
                ) == ",".join(sorted(placed))

            await wait_for(recorded, 20, "the booking recorded on the request")
            # the nodes carry nothing gpupool wrote: the booking lives in gpupool's view
            for n in placed:
                node = await kube.request("GET", f"/api/v1/nodes/{n}")
                assert node["metadata"]["labels"] == {"pool": "h100"}
                assert node["spec"]["taints"] == [POOL_TAINT]
            # done: the request and its template are deleted; the nodes are the pool's again
            for n in pods:
                await set_phase(kube, NS, n, "Succeeded")

            async def gone() -> bool:
                return "prov-gang-pretrain-1" not in await requests(kube)

            await wait_for(gone, 20, "request deleted after the job")
            with pytest.raises(KubeError):
                await kube.request(
                    "GET", f"/api/v1/namespaces/{NS}/podtemplates/{ps['podTemplateRef']['name']}"
                )
            assert all(
                "gpupool.io/provisioning-request" not in ctl.nodes_by_name[n].labels for n in placed
            )

            # Failed: quota released, request deleted, a new request after the backoff; a
            # second failure spends the retries: the job stays parked, rejected
            pods = await gang(kube, "second", 2)
            await wait_for(lambda: _has(kube, "prov-gang-second-1"), 20, "first request")
            await set_condition(
                kube, "prov-gang-second-1", "Failed", "CapacityNotAvailable", "no H100 in any zone"
            )
            await wait_for(lambda: _has(kube, "prov-gang-second-2"), 20, "retried request")
            assert "prov-gang-second-1" not in await requests(kube)
            await set_condition(kube, "prov-gang-second-2", "BookingExpired", "BookingExpired")

            async def rejected() -> str | None:
                assert ctl.sched is not None
                for p in ctl.sched.pending():
                    msg = p.reason.message if p.reason is not None else ""
                    if "second" in str(p.job.id) and "Rejected" in msg:
                        return msg
                return None

            msg = await wait_for(rejected, 20, "check rejected after the retries")
            assert "BookingExpired" in msg
            await wait_for(lambda: _lacks(kube, "prov-gang-second-2"), 20, "request deleted")
            for n in pods:
                assert not (await get_pod(kube, NS, n))["spec"].get("nodeName")

    try:
        live(control_plane, body, namespaces=(NS,))
    finally:
        control_plane.kubectl(
            "delete", "provisioningrequests.autoscaling.x-k8s.io", "--all", "-n", NS, check=False
        )
        control_plane.kubectl("delete", "podtemplates", "--all", "-n", NS, check=False)


async def _has(kube: Kube, name: str) -> bool:
    return name in await requests(kube)


async def _lacks(kube: Kube, name: str) -> bool:
    return name not in await requests(kube)


def test_bad_requests_refused(control_plane: ControlPlane) -> None:
    """A request over 1,000 nodes: refused with the reason, nothing made (the gang is
    rejected when submitted; the API server's schema also refuses a request without a pod
    set)."""
    install_crd(control_plane)
    config = load_queue_config(list(yaml.safe_load_all(QUEUES)))

    async def body(kube: Kube) -> None:
        async with prov_running(kube, config) as (ctl, _ad):
            # over 1,000 nodes: the gang size alone says so, before its pods exist
            big = ctl.sched
            assert big is not None
            job = Job(
                JobId(f"{NS}/huge"),
                (PodSet("w", 1001, 1000, 1024, gpu=GpuRequest(count=8)),),
                queue=QueueName(f"{NS}/train"),
            )
            with pytest.raises(InvalidJobError) as err:
                big.submit(job, 0.0)
            assert "1000" in str(err.value)
            assert await requests(kube) == {}
        with pytest.raises(KubeError) as schema:
            await kube.request(
                "POST",
                PR,
                {
                    "apiVersion": "autoscaling.x-k8s.io/v1",
                    "kind": "ProvisioningRequest",
                    "metadata": {"name": "empty", "namespace": NS},
                    "spec": {"provisioningClassName": BEST_EFFORT_ATOMIC_CLASS, "podSets": []},
                },
            )
        assert schema.value.status == 422

    live(control_plane, body, namespaces=(NS,))


def test_several_pod_sets_in_one_request(control_plane: ControlPlane) -> None:
    """A gang of one 8-GPU pod and two HAMi slices: one request of two pod sets, each with
    its PodTemplate; the slices' template asks only for what a node advertises; the
    autoscaler scales two nodes and the whole gang starts on them."""
    install_crd(control_plane)
    config = load_queue_config(list(yaml.safe_load_all(QUEUES)))
    slice_ = {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 20000, "nvidia.com/gpucores": 50}

    async def body(kube: Kube) -> None:
        async with prov_running(kube, config) as (ctl, _ad):
            pods = await gang(kube, "mixed", 3, limits=[{"nvidia.com/gpu": 8}, slice_, slice_])
            pr = await wait_for(lambda: _get(kube, "prov-gang-mixed-1"), 20, "request made")
            assert [ps["count"] for ps in pr["spec"]["podSets"]] == [1, 2]
            whole, sliced = await templates(kube, pr)
            assert whole["template"]["spec"]["containers"][0]["resources"]["limits"] == {
                "nvidia.com/gpu": "8"
            }
            res = sliced["template"]["spec"]["containers"][0]["resources"]
            assert res["limits"] == {"nvidia.com/gpu": "1"}
            assert res["requests"] == {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"}
            for t in (whole, sliced):
                assert t["template"]["spec"]["nodeSelector"] == {"pool": "h100"}
                assert TOLERATION in t["template"]["spec"]["tolerations"]
            await set_condition(kube, "prov-gang-mixed-1", "Accepted", "Accepted")
            await set_condition(kube, "prov-gang-mixed-1", "Provisioned", "CapacityIsProvisioned")
            # the autoscaler ends its booking 10 minutes after Provisioned, whether the nodes
            # it asked for have registered or not: while they have not, the job still waits
            await set_condition(
                kube, "prov-gang-mixed-1", "BookingExpired", "CapacityReservationTimeExpired"
            )
            await asyncio.sleep(0.5)
            assert ctl.sched is not None and ctl.sched.checks is not None
            (rec,) = ctl.sched.checks.records()
            assert rec.state.value == "Pending" and rec.request.endswith("prov-gang-mixed-1")
            nodes = await provision_nodes(kube, "mixed", 2)
            placed = await wait_for(lambda: _bound_to(kube, pods), 20, "gang bound")
            assert set(placed) <= set(nodes)
            # the request's later events (gpupool records its nodes on it) still carry the
            # ignored BookingExpired: they must not end the booking
            await wait_for(
                lambda: _nodes_recorded(kube, "prov-gang-mixed-1", 2),
                20,
                "the booking recorded on the request",
            )
            await asyncio.sleep(0.5)
            assert _ad.booking.nodes("prov/prov-gang-mixed-1") == sorted(nodes)

    try:
        live(control_plane, body, namespaces=(NS,))
    finally:
        control_plane.kubectl(
            "delete", "provisioningrequests.autoscaling.x-k8s.io", "--all", "-n", NS, check=False
        )
        control_plane.kubectl("delete", "podtemplates", "--all", "-n", NS, check=False)


def test_nodes_named_by_provisioning_class_details(control_plane: ControlPlane) -> None:
    """A class that labels its nodes per request and says the value in
    ``provisioningClassDetails`` (GKE's ``ResizeRequestName``), with the config's
    podSetUpdates naming that detail: the gang starts on the nodes carrying it, not on free
    nodes of the pool that were there before."""
    install_crd(control_plane)
    base = load_queue_config(list(yaml.safe_load_all(QUEUES)))
    (check,) = base.admission_checks
    key = "autoscaling.gke.io/provisioning-request"
    config = replace(
        base,
        admission_checks=(
            replace(
                check,
                config=replace(
                    check.config,
                    provisioning_class_name="queued-provisioning.gke.io",
                    node_selector_details={key: "ResizeRequestName"},
                ),
            ),
        ),
    )

    async def body(kube: Kube) -> None:
        older = await provision_nodes(kube, "older", 2)
        async with prov_running(kube, config) as (_ctl, _ad):
            pods = await gang(kube, "tagged", 2)
            await wait_for(lambda: _has(kube, "prov-gang-tagged-1"), 20, "request made")
            await set_condition(kube, "prov-gang-tagged-1", "Accepted", "Accepted")
            obj = await kube.request("GET", f"{PR}/prov-gang-tagged-1")
            await kube.request(
                "PATCH",
                f"{PR}/prov-gang-tagged-1/status",
                {
                    "status": {
                        "conditions": obj["status"]["conditions"]
                        + [
                            {
                                "type": "Provisioned",
                                "status": "True",
                                "reason": "Provisioned",
                                "message": "resize request rr-7 done",
                                "lastTransitionTime": _now(),
                            }
                        ],
                        "provisioningClassDetails": {"ResizeRequestName": "rr-7"},
                    }
                },
                content_type=MERGE_PATCH,
            )
            await asyncio.sleep(0.5)
            for n in pods:  # the free older nodes are not the request's
                assert not (await get_pod(kube, NS, n))["spec"].get("nodeName")
            names = [f"rr-7-node-{i}" for i in range(2)]
            for n in names:
                await make_node(
                    kube, n, gpus=8, model="NVIDIA-H100", labels={"pool": "h100", key: "rr-7"}
                )
            placed = await wait_for(lambda: _bound_to(kube, pods), 20, "gang bound")
            assert sorted(placed) == names and not set(placed) & set(older)

    try:
        live(control_plane, body, namespaces=(NS,))
    finally:
        control_plane.kubectl(
            "delete", "provisioningrequests.autoscaling.x-k8s.io", "--all", "-n", NS, check=False
        )
        control_plane.kubectl("delete", "podtemplates", "--all", "-n", NS, check=False)


async def _get(kube: Kube, name: str) -> dict[str, Any] | None:
    return (await requests(kube)).get(name)


async def _uid(kube: Kube, path: str) -> str:
    return str((await kube.request("GET", path))["metadata"]["uid"])


async def _bound_to(kube: Kube, pods: list[str]) -> list[str] | None:
    got = [(await get_pod(kube, NS, n))["spec"].get("nodeName") for n in pods]
    return got if all(got) else None


def _other_request(name: str, job: str = "") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": NS}
    if job:
        meta["labels"] = {"app.kubernetes.io/managed-by": "gpupool"}
        meta["annotations"] = {"gpupool.io/job": job, "gpupool.io/queue": "train"}
    return {
        "apiVersion": "autoscaling.x-k8s.io/v1",
        "kind": "ProvisioningRequest",
        "metadata": meta,
        "spec": {
            "provisioningClassName": BEST_EFFORT_ATOMIC_CLASS,
            "podSets": [{"podTemplateRef": {"name": f"ppt-{name}"}, "count": 1}],
        },
    }


def test_requests_taken_back_after_a_restart(control_plane: ControlPlane) -> None:
    """A controller makes requests for two gangs and stops; the next one makes no request
    again: the gang provisioned while no controller ran starts at once on its nodes, the
    other when its request is Provisioned. A request made by hand is left alone; one of
    gpupool's whose job is gone is deleted."""
    install_crd(control_plane)
    config = load_queue_config(list(yaml.safe_load_all(QUEUES)))

    async def body(kube: Kube) -> None:
        async with prov_running(kube, config) as (_ctl, _ad):
            alpha = await gang(kube, "alpha", 2)
            gamma = await gang(kube, "gamma", 2)
            await wait_for(lambda: _has(kube, "prov-gang-alpha-1"), 20, "alpha's request")
            await wait_for(lambda: _has(kube, "prov-gang-gamma-1"), 20, "gamma's request")
        uids = {
            r: await _uid(kube, f"{PR}/{r}") for r in ("prov-gang-alpha-1", "prov-gang-gamma-1")
        }
        tpl = f"/api/v1/namespaces/{NS}/podtemplates/ppt-prov-gang-alpha-1-ps0"
        tpl_uid = await _uid(kube, tpl)
        # while no controller runs: gamma's capacity arrives; other requests appear
        gamma_nodes = await provision_nodes(kube, "prov-gang-gamma-1", 2)
        await set_condition(kube, "prov-gang-gamma-1", "Accepted", "Accepted")
        await set_condition(kube, "prov-gang-gamma-1", "Provisioned", "Provisioned")
        await kube.request("POST", PR, _other_request("by-hand"))
        await kube.request("POST", PR, _other_request("prov-gang-gone-1", f"{NS}/gang:gone"))

        async with prov_running(kube, config) as (ctl, _ad):
            assert ctl.sched is not None and ctl.sched.checks is not None
            records = {r.job.id: r for r in ctl.sched.checks.records()}
            assert records[JobId(f"{NS}/gang:alpha")].request == f"{NS}/prov-gang-alpha-1"
            placed = await wait_for(
                lambda: _bound_to(kube, gamma),
                20,
                "gamma bound on the nodes provisioned while down",
            )
            assert sorted(placed) == sorted(gamma_nodes)
            await wait_for(
                lambda: _lacks(kube, "prov-gang-gone-1"), 20, "the request of a gone job deleted"
            )
            await asyncio.sleep(1.0)  # cycles run (every 0.2 s): nothing is asked again
            assert sorted(await requests(kube)) == [
                "by-hand",
                "prov-gang-alpha-1",
                "prov-gang-gamma-1",
            ]
            for r, uid in uids.items():
                assert await _uid(kube, f"{PR}/{r}") == uid
            assert await _uid(kube, tpl) == tpl_uid
            for n in alpha:
                assert not (await get_pod(kube, NS, n))["spec"].get("nodeName")
            # alpha's request is Provisioned now: it starts on those nodes
            alpha_nodes = await provision_nodes(kube, "prov-gang-alpha-1", 2)
            await set_condition(kube, "prov-gang-alpha-1", "Provisioned", "Provisioned")
            placed = await wait_for(
                lambda: _bound_to(kube, alpha), 20, "alpha bound on its provisioned nodes"
            )
            assert sorted(placed) == sorted(alpha_nodes)
            assert "by-hand" in await requests(kube)

    try:
        live(control_plane, body, namespaces=(NS,))
    finally:
        control_plane.kubectl(
            "delete", "provisioningrequests.autoscaling.x-k8s.io", "--all", "-n", NS, check=False
        )
        control_plane.kubectl("delete", "podtemplates", "--all", "-n", NS, check=False)


def test_booking_of_a_running_job_taken_back_after_a_restart(control_plane: ControlPlane) -> None:
    """A gang runs on its booking when its controller restarts: the next controller keeps
    the booking (run limit cut to it) and deletes the request when the gang ends."""
    install_crd(control_plane)
    config = load_queue_config(list(yaml.safe_load_all(QUEUES)))

    async def body(kube: Kube) -> None:
        async with prov_running(kube, config) as (_ctl, _ad):
            pods = await gang(kube, "beta", 2)
            await wait_for(lambda: _has(kube, "prov-gang-beta-1"), 20, "request made")
            await provision_nodes(kube, "prov-gang-beta-1", 2)
            await set_condition(kube, "prov-gang-beta-1", "Provisioned", "Provisioned")
            await wait_for(lambda: _bound_to(kube, pods), 20, "beta bound")
        for n in pods:
            await set_phase(kube, NS, n, "Running")
        async with prov_running(kube, config) as (ctl, _ad):
            assert ctl.sched is not None and ctl.sched.checks is not None
            job = JobId(f"{NS}/gang:beta")
            assert ctl.sched.checks.export().bookings == {job: f"{NS}/prov-gang-beta-1"}
            limit = ctl.sched.run_limit_s(job)
            assert limit is not None and limit <= 3600
            await asyncio.sleep(1.0)
            assert "prov-gang-beta-1" in await requests(kube)
            for n in pods:
                await set_phase(kube, NS, n, "Succeeded")
            await wait_for(
                lambda: _lacks(kube, "prov-gang-beta-1"), 20, "request deleted after the job"
            )

    try:
        live(control_plane, body, namespaces=(NS,))
    finally:
        control_plane.kubectl(
            "delete", "provisioningrequests.autoscaling.x-k8s.io", "--all", "-n", NS, check=False
        )
        control_plane.kubectl("delete", "podtemplates", "--all", "-n", NS, check=False)
