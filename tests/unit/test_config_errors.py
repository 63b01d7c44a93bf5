"""ConfigError carries its field, value and rule, and every reader takes them from there, never
from the message; one parser checks a quantity's syntax wherever a document holds one."""

from __future__ import annotations

import pickle

import pytest

from gpupool.config.documents import Document, parse
from gpupool.config.elastic import (
    claim_from_json,
    claim_to_json,
    class_from_json,
    gpu_from_json,
)
from gpupool.config.jobs import parse_job
from gpupool.config.quantity import QUANTITY_RULE
from gpupool.config.queue_shapes import ClusterQueueDoc
from gpupool.core import ConfigError, InvalidJobError
from gpupool.core.elastic import ClaimPhase, ClaimRequests, ElasticGPUClaim, ServingModel
from gpupool.core.quota import ClusterQueue, LocalQueue, QueueConfig

CONFIG = QueueConfig(
    cluster_queues=(ClusterQueue("q", ()),), local_queues=(LocalQueue("jobs", "q", "team"),)
)


def test_a_structured_error_reads_as_one_line_and_keeps_its_parts() -> None:
    exc = ConfigError("spec.gpuQuota", 0, "must be 1 or more", where="cloud.yaml: document 1")
    assert str(exc) == "cloud.yaml: document 1: spec.gpuQuota=0 must be 1 or more"
    assert (exc.field, exc.value, exc.rule) == ("spec.gpuQuota", 0, "must be 1 or more")
    assert exc.as_details() == {"field": "spec.gpuQuota", "value": 0, "rule": "must be 1 or more"}
    bare = ConfigError("memory", "64Gx", QUANTITY_RULE)
    assert str(bare) == f'memory="64Gx" {QUANTITY_RULE}' and bare.where is None


def test_the_one_message_form_still_works_with_or_without_structure() -> None:
    plain = ConfigError("profile default: a filter is listed twice")
    assert str(plain) == "profile default: a filter is listed twice"
    assert plain.field is None and plain.as_details() == {}
    worded = ConfigError(
        "ClusterQueue q: weight=0 must be positive",
        field="weight",
        value=0,
        rule="must be positive",
        where="ClusterQueue q",
        document=("ClusterQueue", "q"),
    )
    assert str(worded) == "ClusterQueue q: weight=0 must be positive"
    assert worded.document == ("ClusterQueue", "q")
    with pytest.raises(TypeError):
        ConfigError("field", "value")  # type: ignore[call-overload]


def test_a_config_error_survives_pickling_with_its_parts() -> None:
    exc = ConfigError("spec.x", [1, 2], "is wrong", where="f.yaml", document=("Cloud", "c"))
    again = pickle.loads(pickle.dumps(exc))
    assert str(again) == str(exc)
    assert (again.field, again.value, again.rule, again.where, again.document) == (
        "spec.x",
        [1, 2],
        "is wrong",
        "f.yaml",
        ("Cloud", "c"),
    )


def test_details_come_from_the_fields_even_when_the_value_holds_a_colon() -> None:
    # The message's text once was parsed back: a value with ": " in it was cut there.
    with pytest.raises(ConfigError) as info:
        class_from_json(
            {"name": "k", "provisioner": "physical", "parameters": {"profiles": "1g.5gb: 7"}}
        )
    details = info.value.as_details()
    assert details["field"] == "parameters.profiles"
    assert details["value"] == "1g.5gb: 7"
    assert str(details["rule"]).startswith("is not a parameter of provisioner physical")


def test_a_document_error_names_its_document() -> None:
    doc = Document(
        "queues.yaml",
        2,
        {
            "apiVersion": "kueue.x-k8s.io/v1beta1",
            "kind": "ClusterQueue",
            "metadata": {"name": "q"},
            "spec": {"colour": "red"},
        },
        line=7,
    )
    with pytest.raises(ConfigError) as info:
        parse(ClusterQueueDoc, doc)
    assert info.value.document == ("ClusterQueue", "q")
    assert info.value.field == "spec.colour"
    assert info.value.where == "queues.yaml: document 2 (ClusterQueue q, line 7)"


def test_the_core_says_which_object_a_whole_configuration_rule_is_about() -> None:
    bad = QueueConfig(cluster_queues=(ClusterQueue("q", (), weight=0.0),))
    with pytest.raises(ConfigError) as info:
        bad.validate()
    assert info.value.document == ("ClusterQueue", "q")
    twice = QueueConfig(cluster_queues=(ClusterQueue("q", ()), ClusterQueue("q", ())))
    with pytest.raises(ConfigError) as info:
        twice.validate()
    assert info.value.document == ("ClusterQueue", "q")
    assert info.value.rule == "is defined twice"


def _job(cpu: object) -> dict[str, object]:
    return {
        "apiVersion": "gpupool.io/v1alpha1",
        "kind": "Job",
        "metadata": {"name": "j", "namespace": "team"},
        "spec": {"queue": "jobs", "duration": "10m", "podSets": [{"name": "w", "cpu": cpu}]},
    }


@pytest.mark.parametrize("cpu", ["12 x", "1 2", "64 Gx"])
def test_a_bad_quantity_with_a_space_keeps_its_whole_rule(cpu: str) -> None:
    # The rule was once the message's text after its first space.
    with pytest.raises(InvalidJobError) as info:
        parse_job(_job(cpu), CONFIG)
    assert info.value.field == "spec.podSets[0].cpu"
    assert info.value.value == cpu
    assert info.value.rule == QUANTITY_RULE


def test_a_negative_quantity_is_refused_with_the_parsers_rule() -> None:
    with pytest.raises(InvalidJobError) as info:
        parse_job(_job("-2"), CONFIG)
    assert info.value.field == "spec.podSets[0].cpu"
    assert info.value.rule == "must be zero or more"


def test_a_claim_comes_back_with_its_status() -> None:
    c = ElasticGPUClaim(
        "c",
        ClaimRequests(tflops=100.0),
        namespace="ns",
        class_name="k",
        phase=ClaimPhase.BOUND,
        elastic_gpus=("g0", "g1"),
        node="n0",
        serving_models=(ServingModel("A100", 312.0, 0, 321),),
        message="bound",
    )
    body = claim_to_json(c)
    assert claim_from_json(body, with_status=True) == c
    spec_only = claim_from_json(body)
    assert spec_only.phase is ClaimPhase.PENDING and spec_only.elastic_gpus == ()
    body["servingModels"][0]["peakTflops"] = "fast"
    with pytest.raises(InvalidJobError) as info:
        claim_from_json(body, with_status=True)
    assert info.value.field == "servingModels[0].peakTflops"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "g", "source": "slice", "node": "n", "card": "1"}, "card"),
        ({"name": "g", "source": "slice", "node": "n", "card": 1, "capacity": 5}, "capacity"),
        ({"name": "g", "source": "slice", "node": "n", "card": 1, "size": 5}, "size"),
        (
            {
                "name": "g",
                "source": "slice",
                "node": "n",
                "card": 1,
                "capacity": {"gpuMilli": True},
            },
            "capacity.gpuMilli",
        ),
        ({"name": "g", "source": "tpu", "node": "n", "card": 1}, "source"),
    ],
)
def test_a_bad_elastic_gpu_names_the_field(body: dict[str, object], field: str) -> None:
    with pytest.raises(ConfigError) as info:
        gpu_from_json(body)
    assert info.value.field == field
    assert info.value.document == ("ElasticGPU", "g")
    assert str(info.value).startswith(f"ElasticGPU g: {field}=")


def test_an_unknown_priority_class_is_named_once_in_the_jobs_error() -> None:
    body = _job(1)
    spec = body["spec"]
    assert isinstance(spec, dict)
    spec["priorityClassName"] = "urgent"
    with pytest.raises(InvalidJobError) as info:
        parse_job(body, CONFIG)
    assert (info.value.field, info.value.value) == ("spec.priorityClassName", "urgent")
    assert info.value.rule == "is not a PriorityClass; known: none"
