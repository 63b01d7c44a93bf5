"""Per-event work does not grow with the number of pods: a pod event never walks every
cached pod (checked by making the walk fail), and what it finds through the indexes is what a
walk would have found."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from gpupool.k8s.controller import Controller
from tests.k8s.test_controller_fake import FakeKube, controller, node_obj, pod_obj


def placed(name: str, job: str, gang: int, card: int) -> dict[str, Any]:
    """A pod another leader bound: its placement recorded, one card of n1."""
    pod = pod_obj(name, "n1")
    pod["metadata"]["annotations"]["gpupool.io/placement"] = json.dumps(
        {
            "job": job,
            "task": f"{job}/t{card}",
            "queue": "default",
            "flavor": "",
            "node": "n1",
            "cpu": 1000,
            "mem": 1024,
            "start": 0.0,
            "gang": gang,
            "cards": [[card, 1000, 40960, None]],
        }
    )
    return pod


def no_walks(ctl: Controller, monkeypatch: pytest.MonkeyPatch) -> None:
    def walk() -> list[tuple[str, dict[str, Any]]]:
        raise AssertionError("a pod event walked every cached pod")

    monkeypatch.setattr(ctl, "all_pods", walk)


def test_gang_bound_elsewhere_taken_back_without_walking_pods(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def body() -> None:
        ctl = controller(FakeKube())
        ctl.node_informer.cache["n1"] = node_obj("n1", 4)
        ctl.rebuild()
        for i in range(500):  # many other pods in the cache
            other = pod_obj(f"x{i}", "n1")
            other["spec"]["schedulerName"] = "default-scheduler"
            ctl.pod_informer.cache[f"team-a/x{i}"] = other
        no_walks(ctl, monkeypatch)
        a, b = placed("g0", "team-a/g", 2, 0), placed("g1", "team-a/g", 2, 1)
        for pod in (a, b):
            ctl.pod_informer.cache[f"team-a/{pod['metadata']['name']}"] = pod
        ctl._on_pod("MODIFIED", a, None)
        assert "team-a/g" not in {str(j) for j in ctl.jobs}  # half a gang: not yet
        assert set(ctl.unclaimed_job) == {"team-a/g0"}
        ctl._on_pod("MODIFIED", b, None)
        assert ctl.allocations() == {
            "team-a/g0": ("n1", ((0, 1000, 40960),)),
            "team-a/g1": ("n1", ((1, 1000, 40960),)),
        }
        assert not ctl.unclaimed and not ctl.unclaimed_job
        # a half-seen gang whose pod ends leaves nothing behind
        c = placed("h0", "team-a/h", 2, 2)
        ctl.pod_informer.cache["team-a/h0"] = c
        ctl._on_pod("MODIFIED", c, None)
        ctl._on_pod("DELETED", c, None)
        assert not ctl.unclaimed and not ctl.unclaimed_job

    asyncio.run(body())


def test_gang_membership_is_a_lookup(monkeypatch: pytest.MonkeyPatch) -> None:
    async def body() -> None:
        ctl = controller(FakeKube())
        members = []
        for i in range(3):
            pod = pod_obj(f"m{i}")
            pod["metadata"]["annotations"].update(
                {"gpupool.io/gang": "train", "gpupool.io/gang-size": "4"}
            )
            ctl.pod_informer.cache[f"team-a/m{i}"] = pod
            members.append(pod)
        no_walks(ctl, monkeypatch)
        for pod in members:
            ctl._on_pod("ADDED", pod, None)
        assert set(ctl.gang_of) == {"team-a/m0", "team-a/m1", "team-a/m2"}
        assert all(ctl._in_gang(k) for k in ctl.gang_of)
        ctl._on_pod("DELETED", members[0], None)
        assert "team-a/m0" not in ctl.gang_of and ctl._in_gang("team-a/m1")
        for pod in members[1:]:
            ctl._on_pod("DELETED", pod, None)
        assert not ctl.gang_of and not ctl.gangs

    asyncio.run(body())
