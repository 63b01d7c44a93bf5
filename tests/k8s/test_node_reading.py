"""What the controller reads per watch event: a Node read once per change gpupool reads
(not once per node-lock write), watch events parsed whole for gpupool's own pods, the
inventory pod requests are read against, and the bench's cost figures."""

from __future__ import annotations

import copy
import json
import os
from typing import Any

from gpupool.k8s import projection
from gpupool.k8s.bench_cost import process_cpu_s, request_counts
from gpupool.k8s.extended import ExtendedLedger
from gpupool.k8s.inventory import NodeMemo, card_modes, inventory
from gpupool.k8s.nodelock import LOCK_ANNOTATION
from gpupool.k8s.podview import NodeUsage
from gpupool.k8s.translate import node_from_k8s
from tests.k8s.kit import hami_node_object, pod_body, register_json


def node_obj(name: str, register: str) -> dict[str, Any]:
    return hami_node_object(name, register, 80)


def with_modes(node: str, modes: list[str]) -> str:
    devices = json.loads(register_json(node, len(modes), "A100", 40960))
    for d, m in zip(devices, modes, strict=True):
        d["mode"] = m
    return json.dumps(devices)


def test_a_lock_write_reuses_the_node_read_before() -> None:
    memo = NodeMemo()
    obj = node_obj("n1", register_json("n1", 8, "A100", 40960))
    first, _, fresh = memo.read(obj)
    assert fresh and first == node_from_k8s(obj)
    locked = copy.deepcopy(obj)
    locked["metadata"]["resourceVersion"] = "2"
    locked["metadata"]["annotations"][LOCK_ANNOTATION] = "2026-01-01T00:00:00Z,ns,p"
    again, _, fresh = memo.read(locked)
    assert not fresh and again is first  # not parsed again
    cordoned = copy.deepcopy(locked)
    cordoned["metadata"]["annotations"]["hami.io/device-cordon"] = "GPU-n1-0"
    node, _, fresh = memo.read(cordoned)
    assert fresh and not node.gpus[0].healthy  # what gpupool reads changed: read anew
    unready = copy.deepcopy(cordoned)
    unready["status"]["conditions"][0]["status"] = "False"
    node, _, fresh = memo.read(unready)
    assert fresh and not node.schedulable
    memo.forget("n1")
    assert memo.read(unready)[2]


def test_card_modes_name_the_cards_not_in_hami_core() -> None:
    obj = node_obj("n1", with_modes("n1", ["hami-core", "mps", "hami-core", "mps"]))
    assert card_modes(obj) == {"GPU-n1-1": "mps", "GPU-n1-3": "mps"}
    assert card_modes(node_obj("n2", register_json("n2", 2, "A100", 40960))) == {}
    memo = NodeMemo()
    memo.read(obj)
    inv = inventory([node_from_k8s(obj)], memo.modes())
    assert inv.modes == {"GPU-n1-1": "mps", "GPU-n1-3": "mps"}
    assert inv.models == frozenset({"A100"}) and inv.card_mib == {"A100": 40960}


def test_own_pod_events_parsed_whole_and_other_pods_projected() -> None:
    shape = projection.pod_shape(frozenset({"gpupool"}))
    own = pod_body("p", ns="team-a", limits={"nvidia.com/gpu": 1})
    own["spec"]["schedulerName"] = "gpupool"
    ev = {"type": "MODIFIED", "object": own}
    assert projection.event(json.dumps(ev).encode(), shape) == ev
    other = copy.deepcopy(own)
    other["spec"]["schedulerName"] = "default-scheduler"
    other["spec"]["volumes"] = [{"name": "v"}]
    got = projection.event(json.dumps({"type": "ADDED", "object": other}).encode(), shape)
    assert "volumes" not in got["object"]["spec"]  # cut to POD_OTHER
    assert got["object"]["metadata"]["name"] == "p"


def test_request_counts_by_verb_and_resource() -> None:
    text = "\n".join(
        [
            "# HELP apiserver_request_total Counter",
            'apiserver_request_total{code="201",component="apiserver",resource="pods",'
            'scope="resource",subresource="binding",verb="POST",version="v1"} 7',
            'apiserver_request_total{code="200",resource="nodes",verb="PATCH",version="v1"} 3',
            'apiserver_request_total{code="409",resource="nodes",verb="PATCH",version="v1"} 2',
            'apiserver_request_duration_seconds_count{resource="nodes",verb="PATCH"} 99',
        ]
    )
    assert request_counts(text) == {"POST pods/binding": 7, "PATCH nodes": 5}


def test_process_cpu_of_this_process() -> None:
    mine = process_cpu_s(os.getpid())
    assert mine is not None and mine > 0
    assert process_cpu_s(None) is None
    assert process_cpu_s(2**22 + 12345) is None  # no such process


def test_a_node_event_changing_no_extended_resource_keeps_the_version() -> None:
    """A node-lock write changes only an annotation: the extended-resources filter's caches
    (keyed by the ledger's version) stay valid. Before, every node event bumped it."""
    ledger = ExtendedLedger(NodeUsage())
    obj = node_obj("n1", register_json("n1", 1, "A100", 40960))
    obj["status"]["allocatable"]["rdma/hca"] = "4"
    ledger.set_node("n1", obj)
    version = ledger.version
    locked = copy.deepcopy(obj)
    locked["metadata"]["annotations"][LOCK_ANNOTATION] = "2026-01-01T00:00:00Z,ns,p"
    ledger.set_node("n1", locked)
    assert ledger.version == version
    locked["status"]["allocatable"]["rdma/hca"] = "2"
    ledger.set_node("n1", locked)
    assert ledger.version > version
    ledger.set_node("gone", None)  # never seen: nothing changes
    assert ledger.version == version + 1
