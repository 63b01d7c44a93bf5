"""The emulated node side checked against HAMi's and the kubelet's rules, without an API
server: the node lock, which pod ``Allocate`` serves, the device annotation, kubelet
admission reasons, and the ledger's counts."""

from __future__ import annotations

import asyncio
import copy
import json
from datetime import UTC, datetime
from typing import Any

import pytest

from gpupool.k8s.kube import KubeError
from gpupool.k8s.nodeagent import hami
from gpupool.k8s.nodeagent.hami import Device
from gpupool.k8s.nodeagent.kubelet import admit, node_affinity_matches, pod_requests
from gpupool.k8s.nodeagent.ledger import ContainerAllocation, Ledger, RegisteredCard
from gpupool.k8s.nodeagent.plugin import AllocateError, HamiDevicePlugin, cards_of

NODE = "gpu-1"


def bound_pod(
    name: str,
    devices: str,
    *,
    phase: str = "Pending",
    bind_phase: str = "allocating",
    node: str = NODE,
    ns: str = "team-a",
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": ns,
            "uid": f"uid-{name}",
            "annotations": {
                hami.ASSIGNED_NODE: node,
                hami.BIND_TIME: "1700000000",
                hami.BIND_PHASE: bind_phase,
                hami.DEVICES_TO_ALLOCATE: devices,
            },
        },
        "spec": {"nodeName": node},
        "status": {"phase": phase},
    }


# -- the node lock -------------------------------------------------------------------------


def test_lock_value_round_trips_and_names_its_pod() -> None:
    value = hami.format_lock(datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC), "team-a", "p1")
    assert value == "2026-01-02T03:04:05Z,team-a,p1"
    parsed = hami.parse_lock(value)
    assert (parsed.namespace, parsed.name) == ("team-a", "p1")
    assert parsed.taken == datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert hami.lock_names(value, "team-a", "p1")
    assert not hami.lock_names(value, "team-a", "p")  # the suffix is ",ns,name", whole
    assert not hami.lock_names(value, "team-b", "p1")
    assert hami.parse_lock("2026-01-02T03:04:05Z").name == ""  # the older, time-only form


@pytest.mark.parametrize("value", ["2026-01-02T03:04:05Z,a", "a,b,c", "x,y,z,w"])
def test_malformed_lock_is_an_error_naming_the_annotation(value: str) -> None:
    with pytest.raises(hami.ProtocolError, match=r"hami\.io/mutex\.lock"):
        hami.parse_lock(value)


# -- which pod the scan takes --------------------------------------------------------------


def test_scan_takes_the_first_listed_allocating_or_success_pending_pod() -> None:
    pods = [
        bound_pod("a-running", "x", phase="Running"),
        bound_pod("b-failed", "x", bind_phase="failed"),
        bound_pod("c-elsewhere", "x", node="gpu-2"),
        {
            **bound_pod("d-no-time", "x"),
            "metadata": {
                "name": "d",
                "annotations": {hami.ASSIGNED_NODE: NODE, hami.BIND_PHASE: "allocating"},
            },
        },
        bound_pod("e-success", "x", bind_phase="success"),
        bound_pod("f-allocating", "x"),
    ]
    first = hami.first_pending(pods, NODE)
    assert first is not None and first["metadata"]["name"] == "e-success"
    assert hami.first_pending(pods[:4], NODE) is None


# -- the device annotation -----------------------------------------------------------------


def test_allocate_walks_the_slots_init_containers_first() -> None:
    text = ";GPU-a,NVIDIA,1000,30:;GPU-b,NVIDIA,40960,100:GPU-c,NVIDIA,40960,100:;"
    assert hami.next_request(text) == (1, [Device("GPU-a", "NVIDIA", 1000, 30)])
    text = hami.erase_next(text)
    assert text == ";;GPU-b,NVIDIA,40960,100:GPU-c,NVIDIA,40960,100:;"
    assert not hami.allocation_done(text)
    slot, devices = hami.next_request(text) or (None, [])
    assert slot == 2 and [d.uuid for d in devices] == ["GPU-b", "GPU-c"]
    text = hami.erase_next(text)
    assert hami.next_request(text) is None and hami.allocation_done(text)


def test_unreadable_device_entry_names_the_annotation() -> None:
    with pytest.raises(hami.ProtocolError, match=r"vgpu-devices-to-allocate slot 0"):
        hami.decode_slots("GPU-a,NVIDIA,lots,30:;")


# -- Allocate through an in-memory API server ------------------------------------------------


class FakeApi:
    """Nodes and pods in memory, answering the requests HAMi's device plugin makes."""

    def __init__(self, pods: list[dict[str, Any]], lock: str | None = None) -> None:
        self.node = {"metadata": {"name": NODE, "resourceVersion": "1", "annotations": {}}}
        if lock:
            self.node["metadata"]["annotations"][hami.NODE_LOCK] = lock
        self.pods = {p["metadata"]["name"]: p for p in pods}  # kept in name order on list
        self.calls: list[str] = []

    async def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        params: dict[str, str] | None = None,
        content_type: str = "",
    ) -> Any:
        self.calls.append(f"{method} {path}")
        await asyncio.sleep(0)
        if path == f"/api/v1/nodes/{NODE}":
            if method == "GET":
                return copy.deepcopy(self.node)
            meta = body["metadata"]
            if (
                meta.get("resourceVersion", self.node["metadata"]["resourceVersion"])
                != self.node["metadata"]["resourceVersion"]
            ):
                raise KubeError(409, "Conflict", "stale", path)
            for k, v in meta["annotations"].items():
                if v is None:
                    self.node["metadata"]["annotations"].pop(k, None)
                else:
                    self.node["metadata"]["annotations"][k] = v
            self.node["metadata"]["resourceVersion"] = str(
                int(self.node["metadata"]["resourceVersion"]) + 1
            )
            return self.node
        if path == "/api/v1/pods":
            return {"items": [copy.deepcopy(self.pods[n]) for n in sorted(self.pods)]}
        name = path.rsplit("/", 1)[1]
        if name not in self.pods:
            raise KubeError(404, "NotFound", name, path)
        if method == "PATCH":
            self.pods[name]["metadata"]["annotations"].update(body["metadata"]["annotations"])
        return copy.deepcopy(self.pods[name])


def allocate(api: FakeApi, n: int = 1) -> tuple[dict[str, Any], list[Device]]:
    plugin = HamiDevicePlugin(api, NODE)  # type: ignore[arg-type]
    return asyncio.run(plugin.allocate(n))


def test_allocate_serves_the_lock_holder_and_releases_the_lock() -> None:
    api = FakeApi(
        [bound_pod("a", "GPU-0,NVIDIA,40960,100:;"), bound_pod("b", "GPU-1,NVIDIA,40960,100:;")],
        lock="2026-01-02T03:04:05Z,team-a,b",
    )
    served, devices = allocate(api)
    assert served["metadata"]["name"] == "b" and [d.uuid for d in devices] == ["GPU-1"]
    assert api.pods["b"]["metadata"]["annotations"][hami.BIND_PHASE] == "success"
    assert api.pods["b"]["metadata"]["annotations"][hami.DEVICES_TO_ALLOCATE] == ";"
    assert api.pods["a"]["metadata"]["annotations"][hami.BIND_PHASE] == "allocating"
    assert hami.NODE_LOCK not in api.node["metadata"]["annotations"]


def test_without_a_lock_allocate_serves_the_first_listed_pod() -> None:
    """The kubelet is admitting ``b`` but HAMi cannot know: it reads ``a``'s card."""
    api = FakeApi(
        [bound_pod("a", "GPU-0,NVIDIA,40960,100:;"), bound_pod("b", "GPU-1,NVIDIA,40960,100:;")]
    )
    served, devices = allocate(api)
    assert served["metadata"]["name"] == "a" and devices[0].uuid == "GPU-0"
    # a is now "success" but still Pending: the kubelet's Allocate for a reads a again,
    # finds nothing left, and fails it
    with pytest.raises(AllocateError, match="device request not found"):
        allocate(api)
    assert api.pods["a"]["metadata"]["annotations"][hami.BIND_PHASE] == "failed"


def test_a_lock_of_another_pod_is_not_released() -> None:
    api = FakeApi(
        [bound_pod("a", "GPU-0,NVIDIA,40960,100:GPU-1,NVIDIA,40960,100:;")],
        lock="2026-01-02T03:04:05Z,team-a,a",
    )
    with pytest.raises(AllocateError, match="device number not matched"):
        allocate(api, n=1)  # the kubelet asks one device; the annotation names two
    assert api.pods["a"]["metadata"]["annotations"][hami.BIND_PHASE] == "failed"
    assert hami.NODE_LOCK not in api.node["metadata"]["annotations"]
    api.node["metadata"]["annotations"][hami.NODE_LOCK] = "2026-01-02T03:04:05Z,team-a,z"
    asyncio.run(HamiDevicePlugin(api, NODE).release_lock("team-a", "a"))  # type: ignore[arg-type]
    assert api.node["metadata"]["annotations"][hami.NODE_LOCK].endswith(",z")


def test_multi_container_pod_stays_locked_until_its_last_container() -> None:
    api = FakeApi(
        [bound_pod("a", "GPU-0,NVIDIA,1000,10:;GPU-0,NVIDIA,2000,20:;")],
        lock="2026-01-02T03:04:05Z,team-a,a",
    )
    _, first = allocate(api)
    assert first[0].used_mib == 1000
    assert api.node["metadata"]["annotations"].get(hami.NODE_LOCK)
    assert api.pods["a"]["metadata"]["annotations"][hami.BIND_PHASE] == "allocating"
    _, second = allocate(api)
    assert second[0].used_mib == 2000
    assert hami.NODE_LOCK not in api.node["metadata"]["annotations"]


def test_no_pod_to_serve_is_an_allocate_error() -> None:
    with pytest.raises(AllocateError, match=f"no binding pod found on node {NODE}"):
        allocate(FakeApi([bound_pod("a", "x", phase="Running")]))


# -- kubelet admission ------------------------------------------------------------------------


def node_obj(
    cpu: str = "10", memory: str = "16Gi", gpus: int = 80, labels: dict[str, str] | None = None
) -> dict[str, Any]:
    return {
        "metadata": {"name": NODE, "labels": labels or {}},
        "status": {
            "allocatable": {
                "cpu": cpu,
                "memory": memory,
                "pods": "110",
                "nvidia.com/gpu": str(gpus),
            }
        },
    }


def pod_obj(cpu: str = "1", memory: str = "1Gi", gpus: int = 0, **spec: Any) -> dict[str, Any]:
    limits: dict[str, Any] = {"nvidia.com/gpumem": 4000}
    if gpus:
        limits["nvidia.com/gpu"] = gpus
    return {
        "metadata": {"name": "p"},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "resources": {"requests": {"cpu": cpu, "memory": memory}, "limits": limits},
                }
            ],
            **spec,
        },
    }


def test_kubelet_rejects_cpu_with_its_reason_and_message() -> None:
    others = [pod_requests(pod_obj(cpu="9"))]
    r = admit(pod_obj(cpu="1500m"), node_obj(), others)
    assert r is not None and r.reason == "OutOfcpu"
    assert r.message == (
        "Node didn't have enough resource: cpu, requested: 1500, used: 9000, capacity: 10000"
    )
    assert admit(pod_obj(cpu="1"), node_obj(), others) is None


def test_kubelet_rejects_memory_in_bytes_and_extended_resources() -> None:
    r = admit(pod_obj(memory="10Gi"), node_obj(), [pod_requests(pod_obj(memory="8Gi"))])
    assert r is not None and r.reason == "OutOfmemory"
    assert "requested: 10737418240, used: 8589934592, capacity: 17179869184" in r.message
    r = admit(pod_obj(gpus=2), node_obj(gpus=1), [])
    assert r is not None and r.reason == "OutOfnvidia.com/gpu"
    # nvidia.com/gpumem is not advertised by the node: dropped, as the kubelet does
    assert admit(pod_obj(gpus=1), node_obj(gpus=1), []) is None


def test_pod_request_is_max_of_sum_and_largest_init_container() -> None:
    pod = pod_obj(cpu="1")
    pod["spec"]["containers"].append({"name": "side", "resources": {"limits": {"cpu": "2"}}})
    pod["spec"]["initContainers"] = [{"name": "init", "resources": {"requests": {"cpu": "4"}}}]
    assert pod_requests(pod).cpu_milli == 4000
    pod["spec"]["initContainers"][0]["resources"]["requests"]["cpu"] = "500m"
    assert pod_requests(pod).cpu_milli == 3000  # limits stand in for absent requests


def test_kubelet_checks_node_selector_and_required_affinity() -> None:
    term = {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}]}
    pod = pod_obj(
        affinity={
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
            }
        }
    )
    r = admit(pod, node_obj(labels={"zone": "c"}), [])
    assert r is not None and r.reason == "NodeAffinity"
    assert r.message == "Predicate NodeAffinity failed: node(s) didn't match Node selector"
    assert admit(pod, node_obj(labels={"zone": "b"}), []) is None
    sel = pod_obj(nodeSelector={"pool": "train"})
    assert not node_affinity_matches(sel, node_obj(labels={"zone": "b"}))
    assert node_affinity_matches(sel, node_obj(labels={"pool": "train"}))
    gt = {
        "matchExpressions": [{"key": "gen", "operator": "Gt", "values": ["7"]}],
        "matchFields": [{"key": "metadata.name", "operator": "In", "values": [NODE]}],
    }
    pod = pod_obj(
        affinity={
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [gt]}
            }
        }
    )
    assert node_affinity_matches(pod, node_obj(labels={"gen": "9"}))
    assert not node_affinity_matches(pod, node_obj(labels={"gen": "7"}))


def test_resources_are_checked_before_affinity() -> None:
    pod = pod_obj(cpu="11", nodeSelector={"pool": "x"})
    r = admit(pod, node_obj(), [])
    assert r is not None and r.reason == "OutOfcpu"


# -- the ledger ---------------------------------------------------------------------------------


def alloc(pod: str, uuid: str, mib: int, served: str | None = None) -> ContainerAllocation:
    served = served or pod
    return ContainerAllocation(
        pod=f"ns/{pod}",
        uid=pod,
        container="main",
        devices=(Device(uuid, "NVIDIA", mib, 10),),
        served=f"ns/{served}",
        served_uid=served,
    )


def test_ledger_counts_swaps_misdirections_and_cards_over_their_limits() -> None:
    ledger = Ledger()
    ledger.set_cards(NODE, [RegisteredCard("GPU-0", 2, 10000), RegisteredCard("GPU-1", 10, 10000)])
    ledger.begin("p", "ns/p", NODE, frozenset({"GPU-0"}))
    ledger.allocated(alloc("p", "GPU-0", 4000))
    ledger.admit("p")
    ledger.begin("q", "ns/q", NODE, frozenset({"GPU-1"}))
    ledger.allocated(alloc("q", "GPU-0", 4000, served="r"))  # r's annotation, r's card
    ledger.admit("q")
    s = ledger.summary()
    assert (s["swapped_allocations"], s["misdirected_allocations"]) == (1, 1)
    assert (s["cards_over_split"], s["cards_over_memory"]) == (0, 0)
    ledger.begin("r", "ns/r", NODE, None)  # not gpupool's: never counted as a swap
    ledger.allocated(alloc("r", "GPU-0", 4000))
    ledger.admit("r")
    s = ledger.summary()
    assert s["swapped_allocations"] == 1
    assert (s["cards_over_split"], s["cards_over_memory"]) == (1, 1)


def test_ended_pods_free_their_share_of_a_card() -> None:
    ledger = Ledger()
    ledger.set_cards(NODE, [RegisteredCard("GPU-0", 1, 10000)])
    for name in ("a", "b"):
        ledger.begin(name, f"ns/{name}", NODE, frozenset({"GPU-0"}))
        ledger.allocated(alloc(name, "GPU-0", 5000))
        ledger.admit(name)
        ledger.end(name)
    assert ledger.summary()["cards_over_split"] == 0


def test_cards_are_read_from_either_register_form() -> None:
    reg = json.dumps([{"id": "GPU-a", "count": 10, "devmem": 40960}])
    assert cards_of({"metadata": {"annotations": {hami.REGISTER: reg}}}) == [
        RegisteredCard("GPU-a", 10, 40960)
    ]
    colon = "GPU-a,10,40960,100,A100,0,true:GPU-b,4,81920,100,H100,0,true:"
    assert cards_of({"metadata": {"annotations": {hami.REGISTER: colon}}}) == [
        RegisteredCard("GPU-a", 10, 40960),
        RegisteredCard("GPU-b", 4, 81920),
    ]


@pytest.mark.parametrize(
    ("kwargs", "text"),
    [
        ({"other_cpu_pct": 150.0}, "--other-cpu-pct=150.0 must be at least 0 and below 100"),
        (
            {"other_cpu_pct": 50.0, "node_agents": False},
            "--other-cpu-pct=50.0 needs the node agents",
        ),
    ],
)
def test_bench_refuses_bad_node_side_options(kwargs: dict[str, Any], text: str) -> None:
    from gpupool.core.errors import ConfigError
    from gpupool.k8s.bench import run_bench

    with pytest.raises(ConfigError) as err:
        asyncio.run(run_bench(None, 1, 1, 1, "x", **kwargs))
    assert text in str(err.value)


def test_init_containers_hold_a_card_only_before_the_app_containers() -> None:
    ledger = Ledger()
    ledger.set_cards(NODE, [RegisteredCard("GPU-0", 2, 10000)])
    ledger.begin("p", "ns/p", NODE, frozenset({"GPU-0"}))
    for name, mib, init in (("warm", 8000, True), ("c0", 4000, False), ("c1", 4000, False)):
        ledger.allocated(
            ContainerAllocation(
                pod="ns/p",
                uid="p",
                container=name,
                devices=(Device("GPU-0", "NVIDIA", mib, 10),),
                served="ns/p",
                served_uid="p",
                init=init,
            )
        )
    ledger.admit("p")
    s = ledger.summary()  # 8000 MiB and 2 slices at most, not 16000 and 3
    assert (s["cards_over_split"], s["cards_over_memory"]) == (0, 0)
    ledger.begin("q", "ns/q", NODE, frozenset({"GPU-0"}))
    ledger.allocated(alloc("q", "GPU-0", 4000))
    ledger.admit("q")
    s = ledger.summary()
    assert (s["cards_over_split"], s["cards_over_memory"]) == (1, 1)
