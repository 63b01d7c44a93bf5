"""ProvisioningRequests taken back by a rebuilt controller, against an in-memory API double:
a first controller makes requests and binds on a booking, the double keeps what it wrote, and
a second controller is built from those objects alone."""

from __future__ import annotations

import asyncio
import copy
import time
from typing import Any

import pytest
import yaml

from gpupool.config import load_queue_config
from gpupool.core.model import JobId
from gpupool.core.provisioning import CONSUME_ANNOTATION, REQUEST_LABEL, CheckState
from gpupool.core.quota import Resource
from gpupool.k8s.controller import Controller, Options
from gpupool.k8s.informer import object_key
from gpupool.k8s.provisioning import ProvisioningAdapter
from gpupool.k8s.provisioning_objects import (
    ATTEMPT_ANNOTATION,
    FLAVOR_ANNOTATION,
    JOB_ANNOTATION,
    attempt_of,
    marks_of,
    request_from_object,
)
from tests.k8s.kit import pod_body, register_json
from tests.k8s.test_provisioning_live import QUEUES

NS = "prov"


def _stamp(wall_s: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(wall_s))


class MemKube:
    """Keeps the pods, ProvisioningRequests and their writes a controller makes; answers
    everything else with ``{}``."""

    def __init__(self) -> None:
        self.pods: dict[str, dict[str, Any]] = {}
        self.prs: dict[str, dict[str, Any]] = {}
        self.nodes: dict[str, dict[str, Any]] = {}
        self.created: list[str] = []
        self.deleted: list[str] = []

    async def request(self, method: str, path: str, body: Any = None, **_: Any) -> dict[str, Any]:
        parts = path.strip("/").split("/")
        if "provisioningrequests" in parts:
            i = parts.index("provisioningrequests")
            ns = parts[i - 1]
            if method == "POST":
                key = f"{ns}/{body['metadata']['name']}"
                obj = copy.deepcopy(body)
                obj["metadata"].update(resourceVersion="1", creationTimestamp=_stamp(time.time()))
                self.prs[key] = obj
                self.created.append(key)
            elif method == "DELETE":
                key = f"{ns}/{parts[i + 1]}"
                self.prs.pop(key, None)
                self.deleted.append(key)
        elif "pods" in parts and method in ("PATCH", "POST"):
            i = parts.index("pods")
            key = f"{parts[i - 1]}/{parts[i + 1]}"
            pod = self.pods.get(key)
            if pod is None:
                return {}
            if method == "PATCH" and len(parts) == i + 2:
                ann = (body.get("metadata") or {}).get("annotations") or {}
                pod["metadata"].setdefault("annotations", {}).update(ann)
            elif method == "POST" and parts[-1] == "binding":
                pod["spec"]["nodeName"] = body["target"]["name"]
                ann = (body.get("metadata") or {}).get("annotations") or {}
                pod["metadata"].setdefault("annotations", {}).update(ann)
        return {}

    def condition(self, name: str, kind: str, at: float, reason: str = "") -> None:
        obj = self.prs[f"{NS}/{name}"]
        conds = obj.setdefault("status", {}).setdefault("conditions", [])
        conds.append(
            {
                "type": kind,
                "status": "True",
                "reason": reason or kind,
                "message": reason or kind,
                "lastTransitionTime": _stamp(at),
            }
        )


def node_obj(name: str, labels: dict[str, str], taint: str | None = None) -> dict[str, Any]:
    alloc = {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": "80", "pods": "110"}
    spec: dict[str, Any] = {}
    if taint:
        spec["taints"] = [{"key": REQUEST_LABEL, "value": taint, "effect": "NoSchedule"}]
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "resourceVersion": "1",
            "labels": labels,
            "annotations": {
                "hami.io/node-nvidia-register": register_json(name, 8, "NVIDIA-H100", 81920)
            },
        },
        "spec": spec,
        "status": {
            "allocatable": alloc,
            "capacity": alloc,
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def cloud_nodes(api: MemKube, request: str, count: int = 2) -> list[str]:
    names = [f"{request}-node-{i}" for i in range(count)]
    for n in names:
        api.nodes[n] = node_obj(
            n, {"pool": "h100", REQUEST_LABEL: f"{NS}.{request}"}, taint=f"{NS}.{request}"
        )
    return names


def add_gang(api: MemKube, name: str, size: int = 2, created: int | None = None) -> None:
    for i in range(size if created is None else created):
        pod = pod_body(
            f"{name}-{i}",
            ns=NS,
            limits={"nvidia.com/gpu": 8},
            labels={"gpupool.io/queue": "train"},
            annotations={"gpupool.io/gang": name, "gpupool.io/gang-size": str(size)},
        )
        pod["metadata"]["resourceVersion"] = "1"
        api.pods[f"{NS}/{name}-{i}"] = pod


def start(api: MemKube) -> tuple[Controller, ProvisioningAdapter]:
    """A controller (and its adapter) built from what the double holds now."""
    config = load_queue_config(list(yaml.safe_load_all(QUEUES)))
    ctl = Controller(api, config, Options(leader_elect=False))  # type: ignore[arg-type]
    ad = ProvisioningAdapter(api, ctl)  # type: ignore[arg-type]
    ctl.attach(provisioning=ad)
    ctl.node_informer.cache.update(copy.deepcopy(api.nodes))
    ctl.pod_informer.cache.update(copy.deepcopy(api.pods))
    ad.informer.cache.update(copy.deepcopy(api.prs))
    ctl.rebuild()
    return ctl, ad


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


def sync(api: MemKube, ctl: Controller, ad: ProvisioningAdapter) -> None:
    """The watches' events for what changed in the double."""
    for key, obj in api.nodes.items():
        if ctl.node_informer.cache.get(key) != obj:
            ctl.node_informer.cache[key] = copy.deepcopy(obj)
            ctl._on_node("ADDED", copy.deepcopy(obj), None)
    for key in [k for k in ad.informer.cache if k not in api.prs]:
        ad._on_request("DELETED", ad.informer.cache.pop(key), None)
    for key, obj in api.prs.items():
        if ad.informer.cache.get(key) != obj:
            ad.informer.cache[key] = copy.deepcopy(obj)
            ad._on_request("MODIFIED", copy.deepcopy(obj), None)
    for key, obj in api.pods.items():
        if ctl.pod_informer.cache.get(key) != obj:
            ctl.pod_informer.cache[key] = copy.deepcopy(obj)
            ctl._on_pod("MODIFIED", copy.deepcopy(obj), None)


def test_marks_and_attempts_are_read_back() -> None:
    assert attempt_of("prov-gang-a-3", "prov/gang:a") == 3
    assert attempt_of("prov-gang-a-3", "prov/gang:b") == 0
    assert attempt_of("prov-gang-a", "prov/gang:a") == 0
    assert marks_of({"metadata": {"annotations": {JOB_ANNOTATION: "x"}}}) is None
    assert marks_of({"metadata": {"labels": {"app.kubernetes.io/managed-by": "gpupool"}}}) is None
    m = marks_of(
        {
            "metadata": {
                "labels": {"app.kubernetes.io/managed-by": "gpupool"},
                "annotations": {
                    JOB_ANNOTATION: "prov/a",
                    FLAVOR_ANNOTATION: "",
                    ATTEMPT_ANNOTATION: "2",
                },
            }
        }
    )
    assert m is not None and (m.job, m.flavor, m.attempt) == ("prov/a", "", 2)


def test_conditions_are_read_back_on_the_controllers_clock() -> None:
    wall = time.time()
    obj = {
        "metadata": {
            "name": "prov-a-1",
            "namespace": NS,
            "creationTimestamp": _stamp(wall - 100),
            "labels": {"app.kubernetes.io/managed-by": "gpupool"},
            "annotations": {JOB_ANNOTATION: "prov/a"},
        },
        "spec": {
            "provisioningClassName": "queued-provisioning.gke.io",
            "parameters": {"maxRunDurationSeconds": "3600"},
            "podSets": [{"podTemplateRef": {"name": "ppt-prov-a-1"}, "count": 2}],
        },
        "status": {
            "conditions": [
                {
                    "type": "Provisioned",
                    "status": "True",
                    "reason": "Provisioned",
                    "lastTransitionTime": _stamp(wall - 60),
                },
                {
                    "type": "Accepted",
                    "status": "True",
                    "reason": "Accepted",
                    "lastTransitionTime": _stamp(wall - 90),
                },
                {"type": "SomethingElse", "status": "True"},
            ]
        },
    }

    def at(w: float | None) -> float:  # a clock 1,000 s behind the wall
        return (wall if w is None else w) - 1000.0

    req = request_from_object(obj, None, ["n0", "n1"], at)
    assert req.key == f"{NS}/prov-a-1" and req.job == "prov/a"
    assert req.pod_set.count == 2 and req.max_run_duration_s == 3600.0
    assert [c.type.value for c in req.conditions] == ["Accepted", "Provisioned"]
    assert req.provisioned_s == pytest.approx(wall - 1060.0, abs=1.5)
    assert req.booked and req.nodes == ("n0", "n1")


def test_a_rebuilt_controller_takes_its_requests_back() -> None:
    async def body() -> None:
        api = MemKube()
        api.nodes["fixed"] = node_obj("fixed", {"pool": "h100"})
        for g in ("a", "b", "c"):
            add_gang(api, g)
        ctl, ad = start(api)
        ctl.cycle()
        await settle()
        assert sorted(api.prs) == [f"{NS}/prov-gang-{g}-1" for g in "abc"]
        assert all(
            api.pods[f"{NS}/{g}-0"]["metadata"]["annotations"][CONSUME_ANNOTATION]
            == f"prov-gang-{g}-1"
            for g in "abc"
        )
        now = time.time()
        # a: provisioned and running there; b: failed, its retry made; c: provisioned
        cloud_nodes(api, "prov-gang-a-1")
        api.condition("prov-gang-a-1", "Provisioned", now)
        api.condition("prov-gang-b-1", "Failed", now, "CapacityNotAvailable")
        sync(api, ctl, ad)
        ctl.cycle()
        await settle()
        assert api.pods[f"{NS}/a-0"]["spec"].get("nodeName", "").startswith("prov-gang-a-1")
        assert f"{NS}/prov-gang-b-1" not in api.prs
        # the retry waits out its backoff (1 s)
        await asyncio.sleep(1.1)
        ctl.cycle()
        await settle()
        assert f"{NS}/prov-gang-b-2" in api.prs
        assert api.prs[f"{NS}/prov-gang-b-2"]["metadata"]["annotations"][ATTEMPT_ANNOTATION] == "2"
        cloud_nodes(api, "prov-gang-c-1")
        api.condition("prov-gang-c-1", "Provisioned", time.time())
        # left over from a crash: b's first request again; one made by hand; one of a gone job
        api.prs[f"{NS}/prov-gang-b-1"] = copy.deepcopy(api.prs[f"{NS}/prov-gang-b-2"])
        api.prs[f"{NS}/prov-gang-b-1"]["metadata"]["name"] = "prov-gang-b-1"
        hand = copy.deepcopy(api.prs[f"{NS}/prov-gang-b-2"])
        hand["metadata"] = {"name": "by-hand", "namespace": NS}
        api.prs[f"{NS}/by-hand"] = hand
        gone = copy.deepcopy(api.prs[f"{NS}/prov-gang-b-2"])
        gone["metadata"]["name"] = "prov-gang-gone-1"
        gone["metadata"]["annotations"][JOB_ANNOTATION] = "prov/gang:gone"
        api.prs[f"{NS}/prov-gang-gone-1"] = gone

        # the restart: everything from the double, nothing from the first controller
        api.created.clear()
        ctl2, ad2 = start(api)
        s = ctl2.sched
        assert s is not None and s.checks is not None
        ac = s.checks
        a, b, c = (JobId(f"{NS}/gang:{g}") for g in "abc")
        assert ac.export().bookings == {a: f"{NS}/prov-gang-a-1"}
        booked = ac.request(f"{NS}/prov-gang-a-1")
        assert booked is not None and booked.consumed_s is not None
        assert s.run_limit_s(a) is not None and s.run_limit_s(a) <= 3600  # type: ignore[operator]
        rb, rc = ac.record(b), ac.record(c)
        assert rb is not None and rb.state is CheckState.PENDING
        assert rb.request == f"{NS}/prov-gang-b-2"
        assert rb.attempts == 2 and ac.made(b) == 2
        assert rc is not None and rc.state is CheckState.READY
        assert ac.request(f"{NS}/by-hand") is None
        assert ad2.made == {f"{NS}/prov-gang-{x}" for x in ("a-1", "b-2", "c-1")}
        # the quota: a runs, b and c hold theirs
        assert s.usage("train")[("h100", Resource.GPU_MILLI)] == 48_000
        ctl2.cycle()
        await settle()
        assert api.created == []  # nothing asked again
        assert f"{NS}/prov-gang-b-1" not in api.prs  # b's older request
        assert f"{NS}/prov-gang-gone-1" not in api.prs  # its job is gone
        assert f"{NS}/by-hand" in api.prs  # not gpupool's
        assert all(
            api.pods[f"{NS}/c-{i}"]["spec"].get("nodeName", "").startswith("prov-gang-c-1")
            for i in range(2)
        )
        # a ends: its booking is deleted
        for i in range(2):
            api.pods[f"{NS}/a-{i}"]["status"] = {"phase": "Succeeded"}
        sync(api, ctl2, ad2)
        ctl2.cycle()
        await settle()
        assert f"{NS}/prov-gang-a-1" not in api.prs
        # b fails again: its next request is -3, never a name used before
        api.condition("prov-gang-b-2", "Failed", time.time(), "CapacityNotAvailable")
        sync(api, ctl2, ad2)
        ctl2.cycle()
        await settle()
        assert f"{NS}/prov-gang-b-2" not in api.prs
        (left,) = s.pending()
        assert left.reason is not None and "Rejected" in left.reason.message

    asyncio.run(body())


def test_a_gangs_request_waits_for_its_pods_and_names_move_past_the_pods_marks() -> None:
    async def body() -> None:
        api = MemKube()
        add_gang(api, "d")
        add_gang(api, "e")
        ctl, _ad = start(api)
        ctl.cycle()
        await settle()
        assert f"{NS}/prov-gang-d-1" in api.prs and f"{NS}/prov-gang-e-1" in api.prs
        api.condition("prov-gang-d-1", "Provisioned", time.time())
        # d lost a pod (a replacement is on its way); e's request was deleted while down
        del api.pods[f"{NS}/d-1"]
        del api.prs[f"{NS}/prov-gang-e-1"]
        ctl2, ad2 = start(api)
        s = ctl2.sched
        assert s is not None and s.checks is not None
        d, e = JobId(f"{NS}/gang:d"), JobId(f"{NS}/gang:e")
        assert s.checks.request(f"{NS}/prov-gang-d-1") is None and d in ad2.waiting
        assert s.checks.made(e) == 1 and s.checks.record(e) is None
        ctl2.cycle()
        await settle()
        assert f"{NS}/prov-gang-e-2" in api.prs  # not -1 again
        assert f"{NS}/prov-gang-d-1" in api.prs  # kept while the gang is incomplete
        add_gang(api, "d")
        sync(api, ctl2, ad2)
        rd = s.checks.record(d)
        assert rd is not None and rd.request == f"{NS}/prov-gang-d-1"
        assert rd.state is CheckState.READY
        assert not ad2.waiting

    asyncio.run(body())


def test_an_unconsumed_booking_of_a_gone_job_is_kept_for_its_queue() -> None:
    async def body() -> None:
        api = MemKube()
        add_gang(api, "f")
        ctl, _ = start(api)
        ctl.cycle()
        await settle()
        cloud_nodes(api, "prov-gang-f-1")
        api.condition("prov-gang-f-1", "Provisioned", time.time())
        for key in [k for k in api.pods if k.startswith(f"{NS}/f-")]:
            del api.pods[key]
        add_gang(api, "g")
        ctl2, _ = start(api)
        ctl2.cycle()
        await settle()
        assert api.created == [f"{NS}/prov-gang-f-1"]  # g took f's booking: none made
        bound = {object_key(p): p["spec"].get("nodeName") for p in api.pods.values()}
        assert all(n and n.startswith("prov-gang-f-1") for n in bound.values()), bound

    asyncio.run(body())
