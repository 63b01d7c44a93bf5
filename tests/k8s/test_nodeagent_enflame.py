"""Enflame's gcushare device plugin in DRS mode (``k8s/nodeagent/enflame.py``): which pod and
container its ``Allocate`` serves, from the pod's ``enflame.com/gcu-assigned-time`` and
``assigned-containers``."""

from __future__ import annotations

import json
from typing import Any

from gpupool.k8s.nodeagent.enflame import assume_order, bindable_container


def drs_pod(
    name: str,
    time_ns: str | None,
    containers: dict[str, int],
    records: dict[str, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    ann = {} if time_ns is None else {"enflame.com/gcu-assigned-time": time_ns}
    if records is not None:
        ann["assigned-containers"] = json.dumps(records)
    return {
        "metadata": {"name": name, "namespace": "ns", "annotations": ann},
        "spec": {
            "containers": [
                {"name": c, "resources": {"limits": {"enflame.com/drs-gcu": str(n)}}}
                for c, n in containers.items()
            ]
        },
    }


# The pod recorded on an S60 node after Allocate (the record HAMi's enflame package follows):
# one container, 3 slices, its instance made.
RECORDED = {
    "pod-gcu-example1": {
        "allocated": True,
        "request": 3,
        "profileID": "1",
        "profileName": "3g.20gb",
        "instanceID": "2",
        "instanceUUID": "7325501d-02bd-4da2-9289-24d8521736b9",
    }
}


def test_candidates_are_the_assigned_drs_pods_oldest_first() -> None:
    a = drs_pod("a", "300", {"c": 1})
    b = drs_pod("b", "100", {"c": 1})
    unassigned = drs_pod("u", None, {"c": 1})
    other = {
        "metadata": {"name": "o", "annotations": {"enflame.com/gcu-assigned-time": "1"}},
        "spec": {"containers": [{"name": "c"}]},
    }
    assert [p["metadata"]["name"] for p in assume_order([a, unassigned, other, b])] == ["b", "a"]


def test_the_container_asking_those_slices_not_yet_allocated() -> None:
    records = {"x": {"allocated": True, "request": 3}, "y": {"allocated": False, "request": 3}}
    pod = drs_pod("p", "1", {"x": 3, "y": 3, "z": 1}, records)
    assert bindable_container(pod, 3) == ("y", False)  # z is left after it
    assert bindable_container(pod, 1) == ("z", False)
    assert bindable_container(pod, 6) is None
    done = drs_pod("p", "1", {"pod-gcu-example1": 3}, RECORDED)
    assert bindable_container(done, 3) is None  # already served: the next pod is looked at
    fresh = drs_pod(
        "p", "1", {"pod-gcu-example1": 3}, {"pod-gcu-example1": {"allocated": False, "request": 3}}
    )
    assert bindable_container(fresh, 3) == ("pod-gcu-example1", True)  # the last one
