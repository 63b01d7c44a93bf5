"""Kueue-shaped queue objects become a validated QueueConfig; every rule names its field."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from gpupool.config import RESOURCE_NAMES, load_queue_config, resource_name
from gpupool.core import ConfigError
from gpupool.core.quota import (
    ClusterQueue,
    Cohort,
    FlavorQuotas,
    LocalQueue,
    PreemptionPolicy,
    PriorityClass,
    QueueConfig,
    QueueingStrategy,
    QueueSettings,
    Quota,
    Reclaim,
    Resource,
    ResourceFlavor,
    WithinQueue,
)

KUEUE = "kueue.x-k8s.io/v1beta1"
GPUPOOL = "gpupool.io/v1alpha1"
GIB = 1024


def obj(
    kind: str, name: str, spec: str = "", *, api: str = KUEUE, namespace: str = "", top: str = ""
) -> str:
    """One document: ``spec`` is the YAML under ``spec:``, ``top`` extra top-level fields."""
    meta = f"{{name: {name}" + (f", namespace: {namespace}" if namespace else "") + "}"
    text = f"apiVersion: {api}\nkind: {kind}\nmetadata: {meta}\n"
    if spec:
        text += "spec:\n" + textwrap.indent(textwrap.dedent(spec), "  ")
    if top:
        text += textwrap.dedent(top)
    return text


def docs(*parts: str) -> str:
    return "---\n".join(parts)


def flavor(name: str) -> str:
    return obj("ResourceFlavor", name, f"nodeLabels: {{gpupool.io/flavor: {name}}}\n")


def queue(
    name: str,
    resources: str = "- {name: nvidia.com/gpu, nominalQuota: 8}",
    *,
    cohort: str | None = "all",
    flavor_name: str = "a100",
    extra: str = "",
    api: str = KUEUE,
) -> str:
    """A ClusterQueue with one flavor; ``resources`` is the YAML list of its resources."""
    spec = (f"cohort: {cohort}\n" if cohort else "") + textwrap.dedent(extra)
    spec += (
        f"resourceGroups:\n- flavors:\n  - name: {flavor_name}\n    resources:\n"
        + textwrap.indent(textwrap.dedent(resources).rstrip("\n") + "\n", "    ")
    )
    return obj("ClusterQueue", name, spec, api=api)


def load(tmp_path: Path, text: str, name: str = "queues.yaml") -> QueueConfig:
    path = tmp_path / name
    path.write_text(text)
    return load_queue_config(path)


def failure(tmp_path: Path, text: str) -> str:
    with pytest.raises(ConfigError) as info:
        load(tmp_path, text)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{tmp_path / 'queues.yaml'}: ")
    return message.removeprefix(f"{tmp_path / 'queues.yaml'}: ")


# A ClusterQueue in the shape Kueue's documentation shows, with its flavor, a LocalQueue
# and a WorkloadPriorityClass.
KUEUE_OBJECTS = """\
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata:
  name: "default-flavor"
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata:
  name: a100
spec:
  nodeLabels:
    nvidia.com/gpu.product: A100-SXM4-80GB
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata:
  name: "team-a-cq"
spec:
  namespaceSelector: {}          # every namespace
  cohort: "team-ab"
  queueingStrategy: StrictFIFO
  resourceGroups:
  - coveredResources: ["cpu", "memory"]
    flavors:
    - name: "default-flavor"
      resources:
      - name: "cpu"
        nominalQuota: 9
        borrowingLimit: 6
        lendingLimit: 4
      - name: "memory"
        nominalQuota: 36Gi
  - coveredResources: ["nvidia.com/gpu"]
    flavors:
    - name: a100
      resources:
      - name: "nvidia.com/gpu"
        nominalQuota: 8
        lendingLimit: "2.5"
  preemption:
    reclaimWithinCohort: LowerPriority
    borrowWithinCohort:
      policy: Never
    withinClusterQueue: Never
  fairSharing:
    weight: "2"
  flavorFungibility:
    whenCanBorrow: Borrow
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata:
  namespace: team-a
  name: user-queue
spec:
  clusterQueue: team-a-cq
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: WorkloadPriorityClass
metadata:
  name: sample-priority
value: 10000
description: "Sample priority"
"""


def test_kueue_objects_load_as_written(tmp_path: Path) -> None:
    config = load(tmp_path, KUEUE_OBJECTS)
    assert config.flavors == (
        ResourceFlavor("default-flavor", {}),
        ResourceFlavor("a100", {"nvidia.com/gpu.product": "A100-SXM4-80GB"}),
    )
    assert config.cluster_queues == (
        ClusterQueue(
            name="team-a-cq",
            flavors=(
                FlavorQuotas(
                    "default-flavor",
                    {
                        Resource.CPU_MILLI: Quota(9000, 6000, 4000),
                        Resource.MEMORY_MIB: Quota(36 * GIB),
                    },
                ),
                FlavorQuotas("a100", {Resource.GPU_MILLI: Quota(8000, None, 2500)}),
            ),
            cohort="team-ab",
            weight=2.0,
            preemption=PreemptionPolicy(WithinQueue.NEVER, Reclaim.LOWER_PRIORITY),
            queueing_strategy=QueueingStrategy.STRICT_FIFO,
        ),
    )
    assert config.cohorts == ()  # team-ab exists implicitly, as in Kueue
    assert config.local_queues == (LocalQueue("user-queue", "team-a-cq", "team-a"),)
    assert config.priority_classes == (PriorityClass("sample-priority", 10000, "Sample priority"),)
    assert config.settings == QueueSettings()
    assert config.priority("sample-priority") == 10000


def test_gpupool_objects_with_settings_cohorts_and_new_spellings(tmp_path: Path) -> None:
    gp = "gpupool.io/v1alpha1"
    config = load(
        tmp_path,
        docs(
            flavor("a100"),
            obj("Cohort", "org", api=gp),
            obj(
                "Cohort",
                "research",
                api=gp,
                spec="""\
            parentName: org
            fairSharing: {weight: 500m}
            resourceGroups:
            - flavors:
              - name: a100
                resources:
                - {name: gpu, nominalQuota: 4, borrowingLimit: 2, lendingLimit: 1}
            """,
            ),
            obj("Cohort", "old-style", api="kueue.x-k8s.io/v1alpha1", spec="parent: org\n"),
            queue(
                "q",
                "- {name: gpupool.io/cards, nominalQuota: 2}\n"
                "- {name: gpu_memory, nominalQuota: 40960}\n",
                cohort=None,
                api=gp,
                extra="cohortName: research\nnonPreemptive: true\n",
            ),
            obj("LocalQueue", "q", "clusterQueue: q\n", api=gp),
            obj(
                "PriorityClass",
                "high",
                api="scheduling.k8s.io/v1",
                top="value: 1000\nglobalDefault: false\npreemptionPolicy: Never\n",
            ),
            "apiVersion: gpupool.io/v1alpha1\nkind: QueueSettings\nspec:\n"
            "  usageHalfLife: 12h\n  defaultRuntime: 30m\n  minRuntime: 45s\n"
            "  maxPreemptionsPerJob: 0\n  preemptionCooldown: 600\n",
        ),
    )
    assert config.cohorts == (
        Cohort("org"),
        Cohort(
            "research",
            "org",
            (FlavorQuotas("a100", {Resource.GPU_MILLI: Quota(4000, 2000, 1000)}),),
            0.5,
        ),
        Cohort("old-style", "org"),
    )
    (q,) = config.cluster_queues
    assert (q.cohort, q.non_preemptive) == ("research", True)
    assert q.flavors[0].resources == {Resource.GPU: Quota(2), Resource.GPU_MEMORY_MIB: Quota(40960)}
    assert config.local_queues == (LocalQueue("q", "q", "default"),)
    assert config.priority_classes == (PriorityClass("high", 1000),)
    assert config.settings == QueueSettings(43_200.0, 1800.0, 45.0, 0, 600.0)


def test_an_empty_cohort_is_no_cohort(tmp_path: Path) -> None:
    (q,) = load(
        tmp_path, docs(flavor("a100"), queue("q", extra="cohort: ''\n", cohort=None))
    ).cluster_queues
    assert q.cohort is None


def test_omitted_fields_of_gpupools_objects_take_gpupools_defaults(tmp_path: Path) -> None:
    (q,) = load(tmp_path, docs(flavor("a100"), queue("q", api=GPUPOOL))).cluster_queues
    assert q.preemption == PreemptionPolicy(WithinQueue.LOWER_PRIORITY, Reclaim.ANY, True)
    assert (q.weight, q.non_preemptive, q.queueing_strategy) == (
        1.0,
        False,
        QueueingStrategy.BEST_EFFORT_FIFO,
    )


@pytest.mark.parametrize(
    ("name", "quantity", "resource", "amount"),
    [
        ("nvidia.com/gpu", 8, Resource.GPU_MILLI, 8000),
        ("nvidia.com/gpu", '"0.5"', Resource.GPU_MILLI, 500),
        ("gpu", 2, Resource.GPU_MILLI, 2000),
        ("gpupool.io/gpu-milli", 1500, Resource.GPU_MILLI, 1500),
        ("gpu_milli", 250, Resource.GPU_MILLI, 250),
        ("gpupool.io/cards", 4, Resource.GPU, 4),
        ("nvidia.com/gpumem", 16384, Resource.GPU_MEMORY_MIB, 16384),
        ("nvidia.com/gpumem", "80Gi", Resource.GPU_MEMORY_MIB, 80 * GIB),
        ("gpu_memory", 1000, Resource.GPU_MEMORY_MIB, 1000),
        ("cpu", "500m", Resource.CPU_MILLI, 500),
        ("cpu", 16, Resource.CPU_MILLI, 16_000),
        ("memory", "64Gi", Resource.MEMORY_MIB, 64 * GIB),
        ("memory", 1_000_000_000, Resource.MEMORY_MIB, 954),
    ],
)
def test_resource_names_and_units(
    tmp_path: Path, name: str, quantity: object, resource: Resource, amount: int
) -> None:
    config = load(
        tmp_path,
        docs(flavor("a100"), queue("q", f"- {{name: {name}, nominalQuota: {quantity}}}\n")),
    )
    assert config.cluster_queues[0].flavors[0].resources == {resource: Quota(amount)}


def test_resource_name_lookup() -> None:
    assert resource_name("nvidia.com/gpu").resource is Resource.GPU_MILLI
    with pytest.raises(ConfigError) as info:
        resource_name("nvidia.com/gpus", "x")
    assert str(info.value) == (
        'x="nvidia.com/gpus" is not a known resource; known: ' + ", ".join(RESOURCE_NAMES)
    )


A100 = flavor("a100")
LIMITS = "- {name: nvidia.com/gpu, nominalQuota: 8, lendingLimit: 10}\n"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            docs(A100, flavor("t4"), queue("team-a", LIMITS)),
            "document 3 (ClusterQueue team-a, line 13): spec.resourceGroups[0].flavors[0]"
            ".resources[0].lendingLimit=10 is above nominalQuota=8; one cannot lend more than "
            "one has",
            id="lending-above-nominal",
        ),
        pytest.param(
            docs(A100, queue("team-a", flavor_name="h100")),
            "document 2 (ClusterQueue team-a, line 7): spec.resourceGroups[0].flavors[0].name="
            '"h100" is not a ResourceFlavor; known: a100',
            id="unknown-flavor",
        ),
        pytest.param(
            docs(
                A100,
                obj("Cohort", "a", "parent: c\n"),
                obj("Cohort", "b", "parent: a\n"),
                obj("Cohort", "c", "parent: b\n"),
            ),
            'document 3 (Cohort b, line 13): spec.parent="a" closes a cycle in the cohort '
            "tree: a -> c -> b -> a",
            id="cohort-cycle",
        ),
        pytest.param(
            docs(A100, obj("Cohort", "a", "parentName: a\n")),
            'spec.parentName="a" closes a cycle in the cohort tree: a -> a',
            id="cohort-own-parent",
        ),
        pytest.param(
            docs(A100, queue("team-a"), queue("team-a")),
            'document 3 (ClusterQueue team-a, line 18): metadata.name="team-a" is defined '
            "twice (first in document 2)",
            id="duplicate-queue",
        ),
        pytest.param(
            docs(A100, A100),
            'document 2 (ResourceFlavor a100, line 7): metadata.name="a100" is defined twice',
            id="duplicate-flavor",
        ),
        pytest.param(
            docs(
                A100,
                queue("q"),
                obj("LocalQueue", "lq", "clusterQueue: q\n"),
                obj("LocalQueue", "lq", "clusterQueue: q\n", namespace="default"),
            ),
            'document 4 (LocalQueue default/lq, line 24): metadata.name="lq" is defined twice',
            id="duplicate-local-queue",
        ),
        pytest.param(
            docs(
                A100,
                obj("WorkloadPriorityClass", "high", top="value: 10\n"),
                obj("PriorityClass", "high", api="scheduling.k8s.io/v1", top="value: 5\n"),
            ),
            'document 3 (PriorityClass high, line 12): metadata.name="high" is defined twice',
            id="duplicate-priority-class",
        ),
        pytest.param(
            docs(A100, queue("x"), obj("Cohort", "x")),
            'document 3 (Cohort x, line 18): metadata.name="x" is also a ClusterQueue (document 2)',
            id="queue-and-cohort-share-a-name",
        ),
        pytest.param(
            docs(A100, queue("x"), queue("y", cohort="x")),
            'document 3 (ClusterQueue y, line 18): spec.cohort="x" names a ClusterQueue',
            id="cohort-names-a-queue",
        ),
        pytest.param(
            docs(A100, queue("q", extra="cohrt: all\n")),
            "document 2 (ClusterQueue q, line 7): spec.cohrt: unknown field; known fields "
            "here: resourceGroups, cohort, cohortName, queueingStrategy, preemption, "
            "fairSharing, nonPreemptive, namespaceSelector, flavorFungibility",
            id="unknown-field",
        ),
        pytest.param(
            docs(A100, queue("q", "- {name: cpu, nominal_quota: 8}\n")),
            "spec.resourceGroups[0].flavors[0].resources[0].nominal_quota: unknown field; "
            "known fields here: name, nominalQuota, borrowingLimit, lendingLimit "
            "(and 1 more problem)",
            id="snake-case-field",
        ),
        pytest.param(
            docs(
                A100, obj("ResourceFlavor", "b", top="spec: {nodeLabels: {a: b}, toleration: []}\n")
            ),
            "spec.toleration: unknown field; known fields here: nodeLabels, nodeTaints, "
            "tolerations, topologyName",
            id="misspelt-kueue-field",
        ),
        pytest.param(
            docs(A100, queue("q", "- {name: nvidia.com/gpu, nominalQuota: [8]}\n")),
            "resources[0].nominalQuota=[8] should be a quantity",
            id="wrong-type-quantity",
        ),
        pytest.param(
            docs(A100, obj("WorkloadPriorityClass", "p", top="value: high\n")),
            'document 2 (WorkloadPriorityClass p, line 7): value="high" should be a valid integer',
            id="wrong-type-integer",
        ),
        pytest.param(
            docs(A100, queue("q", extra="nonPreemptive: 'yes'\n")),
            'spec.nonPreemptive="yes" should be a valid boolean',
            id="wrong-type-boolean",
        ),
        pytest.param(
            docs(A100, obj("LocalQueue", "lq")),
            "document 2 (LocalQueue lq, line 7): spec: required field is missing",
            id="missing-field",
        ),
        pytest.param(
            docs(A100, queue("q", "- {name: nvidia.com/gpu, nominalQuota: -2}\n")),
            "spec.resourceGroups[0].flavors[0].resources[0].nominalQuota=-2 must be zero or more",
            id="negative-quantity",
        ),
        pytest.param(
            docs(A100, queue("q", "- {name: memory, nominalQuota: 8, borrowingLimit: -1Gi}\n")),
            'resources[0].borrowingLimit="-1Gi" must be zero or more',
            id="negative-limit",
        ),
        pytest.param(
            docs(A100, queue("q", "- {name: memory, nominalQuota: 64Gx}\n")),
            'resources[0].nominalQuota="64Gx" is not a quantity',
            id="malformed-quantity",
        ),
        pytest.param(
            docs(A100, queue("q", "- {name: nvidia.com/gpus, nominalQuota: 8}\n")),
            'spec.resourceGroups[0].flavors[0].resources[0].name="nvidia.com/gpus" is not a '
            "known resource; known: nvidia.com/gpu, gpu, gpupool.io/gpu-milli, gpu_milli, "
            "gpupool.io/cards, nvidia.com/gpumem, gpu_memory, cpu, memory",
            id="unknown-resource",
        ),
        pytest.param(
            docs(A100, queue("q", "- {name: gpupool.io/cards, nominalQuota: 1.5}\n")),
            "resources[0].nominalQuota=1.5 must be a whole number",
            id="fractional-cards",
        ),
        pytest.param(
            docs(
                A100,
                queue("team-a"),
                obj("LocalQueue", "lq", "clusterQueue: team-z\n", namespace="ml"),
            ),
            'document 3 (LocalQueue ml/lq, line 18): spec.clusterQueue="team-z" is not a '
            "ClusterQueue; known: team-a",
            id="local-queue-to-unknown-queue",
        ),
        pytest.param(
            docs(
                A100,
                queue(
                    "q",
                    "- {name: nvidia.com/gpu, nominalQuota: 8, borrowingLimit: 4}\n",
                    extra="nonPreemptive: true\n",
                ),
            ),
            "spec.resourceGroups[0].flavors[0].resources[0].borrowingLimit=4 is not allowed: "
            "spec.nonPreemptive=true, and a non-preemptive queue cannot borrow",
            id="non-preemptive-borrowing",
        ),
        pytest.param(
            docs(
                A100,
                queue(
                    "q",
                    "- {name: nvidia.com/gpu, nominalQuota: 8, borrowingLimit: 4}\n",
                    cohort=None,
                ),
            ),
            "resources[0].borrowingLimit=4 is set but the queue has no spec.cohort",
            id="borrowing-without-cohort",
        ),
        pytest.param(
            docs(
                A100,
                obj(
                    "Cohort",
                    "root",
                    """\
                resourceGroups:
                - flavors:
                  - name: a100
                    resources: [{name: gpu, nominalQuota: 4, lendingLimit: 2}]
                """,
                ),
            ),
            "resources[0].lendingLimit=2 is set but the cohort has no spec.parent",
            id="cohort-limits-without-parent",
        ),
        pytest.param(
            docs(A100, queue("q", extra="cohortName: other\n")),
            'spec.cohortName="other" contradicts spec.cohort="all"; give one',
            id="two-spellings-disagree",
        ),
        pytest.param(
            docs(
                A100,
                queue(
                    "q",
                    "- {name: gpu, nominalQuota: 8}\n- {name: nvidia.com/gpu, nominalQuota: 8}\n",
                ),
            ),
            'resources[1].name="nvidia.com/gpu" counts gpu_milli as resources[0] does already',
            id="one-resource-twice",
        ),
        pytest.param(
            docs(
                A100,
                obj(
                    "ClusterQueue",
                    "q",
                    """\
                resourceGroups:
                - flavors:
                  - name: a100
                    resources: [{name: cpu, nominalQuota: 8}]
                - flavors:
                  - name: a100
                    resources: [{name: memory, nominalQuota: 8Gi}]
                """,
                ),
            ),
            'spec.resourceGroups[1].flavors[0].name="a100" is listed twice (first at '
            "spec.resourceGroups[0].flavors[0])",
            id="flavor-in-two-groups",
        ),
        pytest.param(
            docs(
                A100,
                flavor("t4"),
                obj(
                    "ClusterQueue",
                    "q",
                    """\
                resourceGroups:
                - flavors:
                  - name: a100
                    resources: [{name: cpu, nominalQuota: 8}]
                - flavors:
                  - name: t4
                    resources: [{name: cpu, nominalQuota: 8}]
                """,
                ),
            ),
            'spec.resourceGroups[1].flavors[0].resources[0].name="cpu" is already covered by '
            "spec.resourceGroups[0]",
            id="resource-in-two-groups",
        ),
        pytest.param(
            docs(
                A100,
                obj(
                    "ClusterQueue",
                    "q",
                    """\
                resourceGroups:
                - coveredResources: [cpu, memory]
                  flavors:
                  - name: a100
                    resources: [{name: cpu, nominalQuota: 8}]
                """,
                ),
            ),
            'spec.resourceGroups[0].flavors[0].resources=["cpu"] do not match '
            'spec.resourceGroups[0].coveredResources=["cpu", "memory"]',
            id="covered-resources",
        ),
        pytest.param(
            docs(A100, queue("Team_A")),
            'metadata.name="Team_A" must be a lowercase RFC 1123 name',
            id="bad-name",
        ),
        pytest.param(
            docs(A100, queue("q", extra="fairSharing: {weight: 0}\n")),
            "spec.fairSharing.weight=0 must be positive",
            id="zero-weight",
        ),
        pytest.param(
            docs(A100, queue("q", extra="preemption: {withinClusterQueue: Sometimes}\n")),
            'spec.preemption.withinClusterQueue="Sometimes" should be '
            "'Never', 'LowerPriority' or 'LowerOrNewerEqualPriority'",
            id="unknown-preemption",
        ),
        pytest.param(
            docs(
                A100,
                obj("QueueSettings", "s", "usageHalfLife: 7 days\n", api="gpupool.io/v1alpha1"),
            ),
            'document 2 (QueueSettings s, line 7): spec.usageHalfLife="7 days" is not a duration',
            id="bad-duration",
        ),
        pytest.param(
            docs(A100, obj("QueueSettings", "s", "defaultRuntime: 0\n", api="gpupool.io/v1alpha1")),
            "spec.defaultRuntime=0 must be positive",
            id="zero-runtime",
        ),
        pytest.param(
            docs(
                A100,
                obj("QueueSettings", "s", "maxPreemptionsPerJob: -1\n", api="gpupool.io/v1alpha1"),
            ),
            "spec.maxPreemptionsPerJob=-1 must be zero or more",
            id="negative-count",
        ),
        pytest.param(
            docs(
                A100,
                obj("QueueSettings", "s", api="gpupool.io/v1alpha1"),
                obj("QueueSettings", "t", api="gpupool.io/v1alpha1"),
            ),
            "document 3 (QueueSettings t, line 11): a second QueueSettings document (the first "
            "is document 2)",
            id="two-settings",
        ),
        pytest.param(
            docs(A100, obj("QueueSettings", "s", api=KUEUE)),
            'apiVersion="kueue.x-k8s.io/v1beta1" is not one QueueSettings is read under; use '
            "gpupool.io/v1alpha1",
            id="settings-are-gpupools",
        ),
        pytest.param(
            docs(obj("ResourceFlavor", "a", api="kueue.x-k8s.io/v2")),
            'document 1 (ResourceFlavor a, line 1): apiVersion="kueue.x-k8s.io/v2" is not one',
            id="unknown-api-version",
        ),
        pytest.param(
            docs(A100, obj("Workload", "w")),
            'document 2 (Workload w, line 7): kind="Workload" is not a known kind; known: '
            "Cluster, ResourceFlavor, ClusterQueue, Cohort, LocalQueue, WorkloadPriorityClass, "
            "PriorityClass, QueueSettings",
            id="unknown-kind",
        ),
    ],
)
def test_validation_rules(tmp_path: Path, text: str, expected: str) -> None:
    assert expected in failure(tmp_path, text)


def test_the_core_validation_runs_last_and_its_errors_name_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[QueueConfig] = []

    def validate(self: QueueConfig) -> QueueConfig:
        calls.append(self)
        raise ConfigError("ClusterQueue q: a rule of the core")

    monkeypatch.setattr(QueueConfig, "validate", validate)
    assert failure(tmp_path, docs(A100, queue("q"))) == "ClusterQueue q: a rule of the core"
    assert [q.name for q in calls[0].cluster_queues] == ["q"]


def test_no_queue_objects(tmp_path: Path) -> None:
    assert failure(tmp_path, "nodePools:\n- {name: p, cpu: 1, memory: 1Gi}\n").startswith(
        "no queue objects (kinds: ResourceFlavor, ClusterQueue, Cohort"
    )


def test_kubectl_output_loads(tmp_path: Path) -> None:
    text = """\
        apiVersion: kueue.x-k8s.io/v1beta1
        kind: ResourceFlavor
        metadata:
          name: a100
          uid: 1f0c8d9e-0000-4000-8000-000000000000
          resourceVersion: "1234"
          generation: 1
          creationTimestamp: 2025-01-02T03:04:05Z
          finalizers: [kueue.x-k8s.io/resource-in-use]
          labels: {team: ml}
          annotations: {note: x}
        spec: {nodeLabels: {gpupool.io/flavor: a100}}
        status: {}
        """
    assert load(tmp_path, textwrap.dedent(text)).flavors == (
        ResourceFlavor("a100", {"gpupool.io/flavor": "a100"}),
    )
