"""Kueue's objects with Kueue's defaults: an export of a live install loads, omitted fields mean
what they mean to Kueue, fields gpupool does not act on are reported, and errors are
structured (field, value, rule)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from gpupool.config import QueueRead, read_queue_config
from gpupool.core import ConfigError
from gpupool.core.quota import PreemptionPolicy, Reclaim, WithinQueue

DATA = Path(__file__).resolve().parents[1] / "k8s" / "data"
FLAVOR = """\
apiVersion: {api}
kind: ResourceFlavor
metadata: {{name: a100}}
"""
QUEUE = """\
apiVersion: {api}
kind: ClusterQueue
metadata: {{name: q}}
spec:
{spec}  resourceGroups:
  - flavors:
    - name: a100
      resources: [{{name: nvidia.com/gpu, nominalQuota: 4}}]
"""
KUEUE, GPUPOOL = "kueue.x-k8s.io/v1beta2", "gpupool.io/v1alpha1"


def load(tmp_path: Path, spec: str = "", api: str = KUEUE, extra: str = "") -> QueueRead:
    text = (
        FLAVOR.format(api=api)
        + "---\n"
        + QUEUE.format(api=api, spec=textwrap.indent(textwrap.dedent(spec), "  "))
    )
    if extra:
        text += "---\n" + textwrap.dedent(extra)
    path = tmp_path / "q.yaml"
    path.write_text(text)
    return read_queue_config(path)


def test_an_export_of_a_live_install_loads_with_its_meaning() -> None:
    read = read_queue_config(DATA / "kueue-export.yaml")
    cfg = read.config
    queues = {q.name: q for q in cfg.cluster_queues}
    assert set(queues) == {"research", "inference", "batch"}
    assert queues["research"].preemption == PreemptionPolicy(
        WithinQueue.LOWER_PRIORITY, Reclaim.ANY, True
    )
    assert queues["research"].cohort == "org" and queues["batch"].cohort == "org"
    assert queues["inference"].preemption == PreemptionPolicy(
        WithinQueue.NEVER, Reclaim.NEVER, False
    )
    # admissionChecksStrategy is read; a check of another controller is left out
    assert queues["research"].admission_checks == ()
    assert queues["batch"].admission_checks == ("dws",)
    assert {c.name for c in cfg.admission_checks} == {"dws", "dws-v1beta1"}
    assert [(p.name, p.value) for p in cfg.priority_classes] == [("urgent", 1000)]
    assert {(lq.namespace, lq.name, lq.cluster_queue) for lq in cfg.local_queues} == {
        ("kq-research", "team", "research"),
        ("kq-inference", "serve", "inference"),
        ("kq-batch", "batch", "batch"),
    }
    reported = {(i.object, i.path) for i in read.ignored}
    assert reported == {
        ("ResourceFlavor a100", "spec.nodeTaints"),
        ("ResourceFlavor a100", "spec.tolerations"),
        ("ResourceFlavor a100", "spec.topologyName"),
        ("ClusterQueue research", "spec.preemption.withinClusterQueue"),
        ("ClusterQueue research", "spec.preemption.borrowWithinCohort"),
        ("ClusterQueue research", "spec.admissionChecks"),
        ("AdmissionCheck multikueue", "spec.controllerName"),
        ("ProvisioningRequestConfig dws-config", "spec.managedResources"),
        ("ProvisioningRequestConfig dws-config", "spec.podSetUpdates"),
        ("ProvisioningRequestConfig dws-config", "spec.podSetMergePolicy"),
        ("ClusterQueue batch", "spec.stopPolicy"),  # Hold
    }
    # batch's whenCanBorrow: Borrow is acted on (v1beta1's spelling of MayStopSearch).
    # Kueue's defaults as such (stopPolicy None, the default fungibility, weight 1,
    # retryDelayMinutes 15) are what gpupool does: not reported
    assert all(i.reason for i in read.ignored)


@pytest.mark.parametrize(
    ("api", "spec", "expected"),
    [
        (KUEUE, "", (WithinQueue.NEVER, Reclaim.NEVER, False)),
        ("kueue.x-k8s.io/v1beta1", "preemption: {}\n", (WithinQueue.NEVER, Reclaim.NEVER, False)),
        (
            KUEUE,
            "preemption: {withinClusterQueue: LowerPriority}\n",
            (WithinQueue.LOWER_PRIORITY, Reclaim.NEVER, False),
        ),
        (
            KUEUE,
            "preemption: {reclaimWithinCohort: LowerPriority}\n",
            (WithinQueue.NEVER, Reclaim.LOWER_PRIORITY, True),
        ),
        (
            KUEUE,
            "preemption: {reclaimWithinCohort: Any, fairShare: false}\n",
            (WithinQueue.NEVER, Reclaim.ANY, False),
        ),
        (GPUPOOL, "", (WithinQueue.LOWER_PRIORITY, Reclaim.ANY, True)),
        (
            GPUPOOL,
            "preemption: {reclaimWithinCohort: Never}\n",
            (WithinQueue.LOWER_PRIORITY, Reclaim.NEVER, True),
        ),
    ],
    ids=[
        "kueue-omitted",
        "kueue-empty",
        "kueue-within",
        "kueue-reclaim",
        "kueue-no-fair",
        "gpupool-omitted",
        "gpupool-partial",
    ],
)
def test_omitted_preemption_takes_the_defaults_of_the_objects_group(
    tmp_path: Path, api: str, spec: str, expected: tuple[object, ...]
) -> None:
    (q,) = load(tmp_path, "cohort: all\n" + spec, api=api).config.cluster_queues
    assert (
        q.preemption.within_cluster_queue,
        q.preemption.reclaim_within_cohort,
        q.preemption.fair_share,
    ) == expected


def test_a_document_without_apiversion_takes_gpupools_defaults(tmp_path: Path) -> None:
    path = tmp_path / "q.yaml"
    path.write_text(
        "kind: ResourceFlavor\nmetadata: {name: a100}\n---\n"
        "kind: ClusterQueue\nmetadata: {name: q}\n"
    )
    (q,) = read_queue_config(path).config.cluster_queues
    assert q.preemption == PreemptionPolicy()


def test_lower_or_newer_equal_priority_acts_as_lower_priority_and_is_reported(
    tmp_path: Path,
) -> None:
    result = load(tmp_path, "preemption: {withinClusterQueue: LowerOrNewerEqualPriority}\n")
    assert (
        result.config.cluster_queues[0].preemption.within_cluster_queue
        is WithinQueue.LOWER_PRIORITY
    )
    item = next(i for i in result.ignored if i.path != "spec.namespaceSelector")
    assert (item.object, item.path) == ("ClusterQueue q", "spec.preemption.withinClusterQueue")
    assert "acted on as LowerPriority" in item.reason


@pytest.mark.parametrize(
    ("spec", "path"),
    [
        ("namespaceSelector: {matchLabels: {team: a}}\n", "spec.namespaceSelector"),
        ("stopPolicy: HoldAndDrain\n", "spec.stopPolicy"),
        (
            "admissionScope: {admissionMode: UsageBasedAdmissionFairSharing}\n",
            "spec.admissionScope",
        ),
        (
            "concurrentAdmissionPolicy: {migration: {mode: TryPreferredFlavors}}\n",
            "spec.concurrentAdmissionPolicy",
        ),
        (
            "preemption: {borrowWithinCohort: {policy: LowerPriority}}\n",
            "spec.preemption.borrowWithinCohort",
        ),
    ],
)
def test_fields_not_acted_on_are_reported_not_refused(tmp_path: Path, spec: str, path: str) -> None:
    result = load(tmp_path, "namespaceSelector: {}\n" * ("namespaceSelector" not in spec) + spec)
    assert [(i.object, i.path) for i in result.ignored] == [("ClusterQueue q", path)]


def test_an_unset_namespace_selector_is_reported_for_kueues_objects(tmp_path: Path) -> None:
    assert [i.path for i in load(tmp_path).ignored] == ["spec.namespaceSelector"]
    assert load(tmp_path, api=GPUPOOL).ignored == ()


def test_a_local_queue_weight_other_than_one_is_reported(tmp_path: Path) -> None:
    lq = """\
    apiVersion: kueue.x-k8s.io/v1beta2
    kind: LocalQueue
    metadata: {{name: lq, namespace: ns}}
    spec: {{clusterQueue: q, stopPolicy: None, fairSharing: {{weight: "{w}"}}}}
    """
    assert [
        i.path for i in load(tmp_path, "namespaceSelector: {}\n", extra=lq.format(w=1)).ignored
    ] == []
    assert [
        i.path for i in load(tmp_path, "namespaceSelector: {}\n", extra=lq.format(w=2)).ignored
    ] == ["spec.fairSharing"]


@pytest.mark.parametrize(
    ("spec", "field", "value", "rule"),
    [
        (
            "cohort: all\nresourceGroups:\n- flavors:\n  - name: a100\n    resources:\n"
            "    - {name: nvidia.com/gpu, nominalQuota: 2, lendingLimit: 3}\n",
            "spec.resourceGroups[0].flavors[0].resources[0].lendingLimit",
            3,
            "is above nominalQuota=2; one cannot lend more than one has",
        ),
        (
            "resourceGroups:\n- flavors:\n  - name: a100\n    resources:\n"
            "    - {name: nvidia.com/gpu, nominalQuota: lots}\n",
            "spec.resourceGroups[0].flavors[0].resources[0].nominalQuota",
            "lots",
            None,
        ),
        ("queueingStrategy: Random\n", "spec.queueingStrategy", "Random", None),
        ("stopPolcy: None\n", "spec.stopPolcy", "None", None),
    ],
    ids=["lending-limit", "quantity", "enum", "unknown-field"],
)
def test_errors_carry_field_value_and_rule(
    tmp_path: Path, spec: str, field: str, value: object, rule: str | None
) -> None:
    path = tmp_path / "q.yaml"
    path.write_text(
        FLAVOR.format(api=KUEUE) + "---\n" + "apiVersion: kueue.x-k8s.io/v1beta2\n"
        "kind: ClusterQueue\nmetadata: {name: q}\nspec:\n" + textwrap.indent(spec, "  ")
    )
    with pytest.raises(ConfigError) as info:
        read_queue_config(path)
    err = info.value
    assert (err.field, err.value) == (field, value)
    assert err.rule and err.where and err.where.endswith("(ClusterQueue q, line 5)")
    if rule is not None:
        assert err.rule == rule
    assert str(err).startswith(f"{path}: document 2 (ClusterQueue q, line 5): {field}")


def test_a_list_of_dicts_with_a_kubectl_list_loads() -> None:
    from gpupool.config import load_queue_config

    cfg = load_queue_config(
        [
            {
                "apiVersion": "v1",
                "kind": "List",
                "items": [
                    {"apiVersion": KUEUE, "kind": "ResourceFlavor", "metadata": {"name": "a"}},
                    {"apiVersion": KUEUE, "kind": "ClusterQueue", "metadata": {"name": "q"}},
                ],
            }
        ]
    )
    assert [q.name for q in cfg.cluster_queues] == ["q"]


def test_the_cores_rules_give_structured_errors_naming_the_file(tmp_path: Path) -> None:
    from gpupool.core.quota import (
        ClusterQueue,
        FlavorQuotas,
        QueueConfig,
        Quota,
        Resource,
        ResourceFlavor,
    )

    queue = ClusterQueue(
        "q", (FlavorQuotas("a100", {Resource.GPU_MILLI: Quota(1000, lending_limit=2000)}),)
    )
    with pytest.raises(ConfigError) as info:
        QueueConfig(cluster_queues=(queue,)).validate()
    err = info.value
    assert (err.where, err.field, err.value) == ("ClusterQueue q", "flavors", "a100")
    with pytest.raises(ConfigError) as info:
        QueueConfig(flavors=(ResourceFlavor("a100"),), cluster_queues=(queue,)).validate()
    err = info.value
    assert (err.where, err.field, err.value) == (
        "ClusterQueue q",
        "a100.gpu_milli.lendingLimit",
        2000,
    )
    assert str(err) == (
        "ClusterQueue q: a100.gpu_milli: lendingLimit=2000 is above "
        "nominalQuota=1000; a queue cannot lend more than it has"
    )
    path = tmp_path / "q.yaml"
    path.write_text(
        FLAVOR.format(api=KUEUE) + "---\nkind: LocalQueue\nmetadata: {name: l}\n"
        "spec: {clusterQueue: nope}\n"
    )
    with pytest.raises(ConfigError) as info:
        read_queue_config(path)
    assert str(info.value).startswith(f"{path}: document 2 (LocalQueue l, line 5): ")
    assert (info.value.field, info.value.value) == ("spec.clusterQueue", "nope")
