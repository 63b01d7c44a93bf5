"""A Job's pods as one gang, with kube-controller-manager's Job controller creating them."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gpupool.k8s.kube import Kube
from gpupool.k8s.main import default_config
from tests.k8s.conftest import ControlPlane
from tests.k8s.kit import list_pods, make_node, running, set_phase, wait_for
from tests.k8s.test_scheduler_live import NS, live

pytestmark = pytest.mark.k8s


def job_body(name: str, parallelism: int, gpus: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "parallelism": parallelism,
            "completions": parallelism,
            "backoffLimit": 0,
            "template": {
                "metadata": {"annotations": {"gpupool.io/gang": "job"}},
                "spec": {
                    "schedulerName": "gpupool",
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": 0,
                    "containers": [
                        {
                            "name": "train",
                            "image": "example.invalid/train:1",
                            "resources": {"limits": {"nvidia.com/gpu": gpus}},
                        }
                    ],
                },
            },
        },
    }


async def job_pods(kube: Kube, job: str) -> list[dict[str, Any]]:
    return [
        p
        for p in await list_pods(kube, NS)
        if p["metadata"].get("labels", {}).get("job-name") == job
    ]


def test_job_pods_start_as_one_gang(control_plane: ControlPlane) -> None:
    control_plane.script("start-kcm", extra={"GPUPOOL_K8S_CONTROLLERS": "job"})

    async def body(kube: Kube) -> None:
        await make_node(kube, "gpu-1", gpus=2)
        await make_node(kube, "gpu-2", gpus=2)
        async with running(kube, default_config()) as ctl:
            await kube.request("POST", f"/apis/batch/v1/namespaces/{NS}/jobs", job_body("train", 3))

            async def all_bound() -> list[dict[str, Any]] | None:
                pods = await job_pods(kube, "train")
                ok = len(pods) == 3 and all(p["spec"].get("nodeName") for p in pods)
                return pods if ok else None

            pods = await wait_for(all_bound, 60, "the Job's 3 pods bound")
            records = [
                json.loads(p["metadata"]["annotations"]["gpupool.io/placement"]) for p in pods
            ]
            assert {r["job"] for r in records} == {f"{NS}/gang:job-train"}
            assert {r["gang"] for r in records} == {3}
            assert (
                len(
                    {
                        (p["spec"]["nodeName"], r["cards"][0][0])
                        for p, r in zip(pods, records, strict=True)
                    }
                )
                == 3
            )

            # a gang of 3 more does not fit in the one card left: none of it starts
            await kube.request("POST", f"/apis/batch/v1/namespaces/{NS}/jobs", job_body("wide", 3))

            async def waiting() -> bool:
                pods = await job_pods(kube, "wide")
                conds = [
                    c
                    for p in pods
                    for c in p.get("status", {}).get("conditions") or ()
                    if c["type"] == "PodScheduled" and c["status"] == "False"
                ]
                return len(pods) == 3 and len(conds) == 3

            await wait_for(waiting, 60, "the wide gang parked")
            assert not any(p["spec"].get("nodeName") for p in await job_pods(kube, "wide"))
            # the first Job finishes: the second starts, whole
            for p in pods:
                await set_phase(kube, NS, p["metadata"]["name"], "Succeeded")

            async def wide_bound() -> bool:
                wide = await job_pods(kube, "wide")
                return len(wide) == 3 and all(p["spec"].get("nodeName") for p in wide)

            await wait_for(wide_bound, 60, "the wide gang bound")
            assert ctl.stats.bind_failures == 0

    live(control_plane, body)
