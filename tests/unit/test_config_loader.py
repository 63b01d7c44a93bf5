"""Files in: multi-document YAML, dispatch by kind, syntax errors with lines, the examples."""

from __future__ import annotations

import types
from pathlib import Path

import pytest

import gpupool.config as config
from gpupool.config import load_cluster, load_documents, load_queue_config, parse_documents
from gpupool.core import ConfigError
from gpupool.core.quota import Resource
from gpupool.core.scheduler import Scheduler

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

CLUSTER = """\
kind: Cluster
nodePools:
- {name: gpu, count: 2, cpu: 32, memory: 128Gi, labels: {pool: gpu},
   gpus: {model: L4, count: 2, memory: 24Gi}}
"""
QUEUES = """\
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: l4}
spec: {nodeLabels: {pool: gpu}}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: q}
spec:
  resourceGroups:
  - flavors:
    - name: l4
      resources: [{name: nvidia.com/gpu, nominalQuota: 4}]
"""


def write(tmp_path: Path, text: str, name: str = "config.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_examples_load_cleanly() -> None:
    nodes = load_cluster(EXAMPLES / "cluster.yaml")
    assert len(nodes) == 12
    assert {g.model for n in nodes for g in n.gpus} == {
        "H100-80GB",
        "A100-80GB",
        "A100-40GB",
        "RTX-A6000",
        "T4",
    }
    assert any(g.is_mig for n in nodes for g in n.gpus)
    assert {n.gpu_count for n in nodes} == {0, 4, 8}

    queues = load_queue_config(EXAMPLES / "queues.yaml")
    labels = [dict(n.labels) for n in nodes]
    cloud = {fq.flavor for q in queues.cluster_queues if q.admission_checks for fq in q.flavors}
    for flavor in queues.flavors:  # every flavor selects some nodes, or the cloud makes them
        assert flavor.name in cloud or any(
            flavor.node_labels.items() <= node.items() for node in labels
        ), flavor.name
    cohorts = {c.name: c.parent for c in queues.cohorts}
    assert len(queues.cluster_queues) >= 3
    assert any(cohorts.get(q.cohort or "") is not None for q in queues.cluster_queues)
    quotas = [
        quota for q in queues.cluster_queues for fq in q.flavors for quota in fq.resources.values()
    ]
    assert any(q.borrowing_limit for q in quotas) and any(q.lending_limit for q in quotas)
    assert queues.local_queues and queues.priority_classes
    assert queues.settings.usage_half_life_s == 7 * 86400

    scheduler = Scheduler(nodes, queues)  # what the core needs, it accepts
    assert scheduler.resolve_queue("research/llm") == "llm"


def test_one_file_may_hold_cluster_and_queues(tmp_path: Path) -> None:
    path = write(tmp_path, CLUSTER + "---\n" + QUEUES)
    assert [n.name for n in load_cluster(path)] == ["gpu-0", "gpu-1"]
    queues = load_queue_config(path)
    assert queues.cluster_queues[0].flavors[0].resources[Resource.GPU_MILLI].nominal == 4000


def test_documents_may_come_as_dicts() -> None:
    docs = [
        None,
        {
            "apiVersion": "kueue.x-k8s.io/v1beta1",
            "kind": "ResourceFlavor",
            "metadata": {"name": "f"},
        },
    ]
    assert load_queue_config(docs).flavors[0].name == "f"
    with pytest.raises(ConfigError, match=r"^<documents>: document 1: expected a mapping"):
        load_queue_config([["not", "a", "mapping"]])  # type: ignore[list-item]


def test_load_documents_skips_empty_ones(tmp_path: Path) -> None:
    path = write(tmp_path, "---\na: 1\n---\n---\n# nothing\n---\nb: [2]\n")
    assert load_documents(path) == [{"a": 1}, {"b": [2]}]
    docs = parse_documents(path.read_text(), "x.yaml")
    assert [(d.index, d.line) for d in docs] == [(1, 2), (2, 7)]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("kind: Cluster\nnodePools:\n  - name: a\n   cpu: 2\n", r"config\.yaml:4: invalid YAML: "),
        ("a: [1, 2\n", r"config\.yaml:2: invalid YAML: "),
        (
            "a: 1\nb:\n  c: 1\n  c: 2\n",
            r'config\.yaml:4: invalid YAML: key "c" is given twice in one mapping \(column 3\)',
        ),
        (
            "kind: Cluster\n---\n- a\n- b\n",
            r"config\.yaml: document 2 \(line 3\): expected a mapping with a kind and its fields, "
            r"found a list",
        ),
        ("just text\n", r'document 1 \(line 1\): expected a mapping .* found the str "just'),
    ],
)
def test_yaml_problems_name_file_and_line(tmp_path: Path, text: str, expected: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError, match=expected) as info:
        load_documents(path)
    assert str(info.value).startswith(str(path))


def test_merge_keys_are_not_duplicates(tmp_path: Path) -> None:
    path = write(tmp_path, "base: &b {x: 1, y: 2}\nthing:\n  <<: *b\n  x: 3\n")
    assert load_documents(path)[0]["thing"] == {"x": 3, "y": 2}


def test_a_document_needs_a_kind(tmp_path: Path) -> None:
    path = write(tmp_path, "metadata: {name: x}\n")
    for load in (load_cluster, load_queue_config):
        with pytest.raises(ConfigError) as info:
            load(path)
        assert str(info.value) == (
            f"{path}: document 1 (x, line 1): kind: required field is missing; known kinds: "
            "Cluster, ResourceFlavor, ClusterQueue, Cohort, LocalQueue, WorkloadPriorityClass, "
            "PriorityClass, QueueSettings, AdmissionCheck, ProvisioningRequestConfig"
        )


def test_an_unknown_kind_is_an_error_for_both_loaders(tmp_path: Path) -> None:
    path = write(tmp_path, CLUSTER + "---\nkind: Clustre\nnodePools: []\n")
    for load in (load_cluster, load_queue_config):
        with pytest.raises(
            ConfigError,
            match=r'document 2 \(Clustre, line 6\): kind="Clustre" '
            r"is not a known kind",
        ):
            load(path)


def test_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"nope\.yaml: cannot read: No such file"):
        load_cluster(tmp_path / "nope.yaml")


def test_all_is_honest() -> None:
    exported = {
        name
        for name, value in vars(config).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    assert set(config.__all__) == exported
    assert len(config.__all__) == len(set(config.__all__))
