"""Job documents with alternatives, and submission checks that accept a job when one of its
forms could run."""

from __future__ import annotations

import dataclasses

import pytest

from gpupool.config.jobs import parse_job
from gpupool.core import ClusterState, InvalidJobError, Validator
from gpupool.core.devices import DeviceClass, Division
from gpupool.core.model import Alternative, GpuRequest
from gpupool.core.quota import ClusterQueue, LocalQueue, QueueConfig
from gpupool.core.vendors import VENDOR_CLASSES
from tests.builders import gpus, job, node, share, whole

CONFIG = QueueConfig(
    cluster_queues=(ClusterQueue("q", ()),), local_queues=(LocalQueue("jobs", "q", "team"),)
)


def doc(**spec: object) -> dict[str, object]:
    base = {
        "queue": "jobs",
        "duration": "10m",
        "podSets": [{"name": "w", "count": 2, "gpu": {"count": 1, "models": ["H100"]}}],
    }
    return {
        "apiVersion": "gpupool.io/v1alpha1",
        "kind": "Job",
        "metadata": {"name": "j", "namespace": "team"},
        "spec": {**base, **spec},
    }


def test_a_job_document_carries_its_alternatives() -> None:
    req = parse_job(
        doc(
            alternatives=[
                {
                    "name": "ascend",
                    "gpu": {"count": 2, "models": ["Ascend910B3"]},
                    "image": "train:cann8",
                    "env": {"ASCEND_RT_VISIBLE_DEVICES": "auto"},
                },
                {"name": "dcu", "gpu": {"milli": 500, "memory": "16Gi", "models": ["K100"]}},
            ]
        ),
        CONFIG,
    )
    a, d = req.job.alternatives
    assert a == Alternative(
        "ascend",
        GpuRequest(count=2, models=frozenset({"Ascend910B3"})),
        "train:cann8",
        {"ASCEND_RT_VISIBLE_DEVICES": "auto"},
    )
    assert d.gpu == GpuRequest(gpu_milli=500, memory_mib=16384, models=frozenset({"K100"}))
    assert req.document["spec"]["alternatives"][0]["image"] == "train:cann8"


@pytest.mark.parametrize(
    ("alts", "field", "words"),
    [
        (
            [{"name": "a", "gpu": {"count": 1}}, {"name": "a", "gpu": {"count": 2}}],
            "spec.alternatives[1].name",
            "is used by another alternative",
        ),
        ([{"name": "Bad_Name", "gpu": {"count": 1}}], "spec.alternatives[0].name", ""),
        ([{"name": "a", "gpu": {}}], "spec.alternatives[0].gpu", "asks for no GPU"),
        (
            [{"name": "a", "gpu": {"count": 1}, "env": {"A=B": "1"}}],
            "spec.alternatives[0].env",
            "not an environment variable name",
        ),
    ],
)
def test_bad_alternatives_name_the_field(alts: list[object], field: str, words: str) -> None:
    with pytest.raises(InvalidJobError) as err:
        parse_job(doc(alternatives=alts), CONFIG)
    assert err.value.field == field and words in str(err.value)


def test_alternatives_need_a_gpu_pod_set() -> None:
    with pytest.raises(InvalidJobError, match="no pod set asks for a GPU"):
        parse_job(
            doc(
                podSets=[{"name": "cpu", "cpu": 1}],
                alternatives=[{"name": "a", "gpu": {"count": 1}}],
            ),
            CONFIG,
        )


def npu_cards() -> tuple:
    return tuple(
        dataclasses.replace(g, device=VENDOR_CLASSES["ascend"])
        for g in gpus(8, "Ascend910B3", 65536)
    )


def test_a_job_is_accepted_when_an_alternative_could_run() -> None:
    state = ClusterState([node("npu", cards=npu_cards())])
    pinned = job("j", gpu=whole(1, models=["H100"]))
    with pytest.raises(InvalidJobError, match="no node has GPU model H100"):
        Validator().check(pinned, state.table)
    fallback = dataclasses.replace(
        pinned, alternatives=(Alternative("npu", whole(2, models=["Ascend910B3"])),)
    )
    Validator().check(fallback, state.table)  # no error


def test_a_job_none_of_whose_forms_could_run_is_rejected_with_its_own_reason() -> None:
    state = ClusterState([node("npu", cards=npu_cards())])
    j = dataclasses.replace(
        job("j", gpu=whole(1, models=["H100"])),
        alternatives=(Alternative("big", whole(9, models=["Ascend910B3"])),),
    )
    with pytest.raises(InvalidJobError, match="no node has GPU model H100"):
        Validator().check(j, state.table)


def test_a_slice_no_card_can_be_divided_into_is_rejected() -> None:
    whole_only = tuple(
        dataclasses.replace(g, device=DeviceClass("acme", Division.WHOLE)) for g in gpus(2)
    )
    state = ClusterState([node("w", cards=whole_only)])
    with pytest.raises(InvalidJobError, match="no card here can be divided into this slice"):
        Validator().check(job("s", gpu=share(100, 1000)), state.table)
    state = ClusterState([node("npu", cards=npu_cards())])
    with pytest.raises(InvalidJobError, match="no card here can be divided"):
        Validator().check(job("s", gpu=share(600, 1000)), state.table)  # over every template
    Validator().check(job("s", gpu=share(400, 1000)), state.table)  # vir10_3c_32g holds it
