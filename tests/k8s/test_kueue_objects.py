"""Kueue's objects -> the configuration, one bad object at a time; pods' queue and priority as
Kueue reads them. Pure: no API server."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gpupool.core import ConfigError
from gpupool.core.errors import InvalidJobError, NotFoundError
from gpupool.core.quota import LocalQueue, PriorityClass, QueueConfig, Resource
from gpupool.k8s.kueue.objects import QueueObjects
from gpupool.k8s.kueue.workloads import (
    admits,
    job_labels,
    local_queue,
    owner_job,
    selector_matches,
    workload_labels,
    workload_priority,
)

V = "kueue.x-k8s.io/v1beta2"
_rv = iter(range(1, 10_000))


def obj(
    kind: str, name: str, spec: dict[str, Any] | None = None, *, ns: str = "", **top: Any
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "resourceVersion": str(next(_rv)),
        "uid": f"uid-{name}",
        "managedFields": [{"manager": "kubectl"}],
    }
    if ns:
        meta["namespace"] = ns
    out: dict[str, Any] = {"apiVersion": V, "kind": kind, "metadata": meta, **top}
    if spec is not None:
        out["spec"] = spec
    out["status"] = {"conditions": [{"type": "Active", "status": "True"}]}
    return out


def cq(name: str, gpus: object = 2, flavor: str = "a100", **extra: Any) -> dict[str, Any]:
    return obj(
        "ClusterQueue",
        name,
        {
            "resourceGroups": [
                {
                    "flavors": [
                        {
                            "name": flavor,
                            "resources": [{"name": "nvidia.com/gpu", "nominalQuota": gpus}],
                        }
                    ]
                }
            ],
            **extra,
        },
    )


def flavor(name: str = "a100") -> dict[str, Any]:
    return obj("ResourceFlavor", name, {"nodeLabels": {"gpupool.io/flavor": name}})


def lq(name: str, ns: str, target: str) -> dict[str, Any]:
    return obj("LocalQueue", name, {"clusterQueue": target, "stopPolicy": "None"}, ns=ns)


def quota(config: QueueConfig, queue: str) -> int:
    (q,) = [q for q in config.cluster_queues if q.name == queue]
    return q.flavors[0].resources[Resource.GPU_MILLI].nominal // 1000


def store(*objects: dict[str, Any]) -> QueueObjects:
    s = QueueObjects()
    for o in objects:
        s.put(o)
    return s


def edited(o: dict[str, Any], **spec: Any) -> dict[str, Any]:
    out = copy.deepcopy(o)
    out["spec"].update(spec)
    out["metadata"]["resourceVersion"] = str(next(_rv))
    return out


def test_what_is_kept_of_an_object_is_what_the_configuration_reads() -> None:
    s = store(cq("a"))
    (kept,) = s.objects.values()
    assert "status" not in kept and "managedFields" not in kept["metadata"]


def test_a_bad_edit_keeps_the_last_applied_version_and_marks_the_object() -> None:
    s = store(flavor(), cq("a", 2), cq("b", 2))
    built = s.build()
    assert not built.problems and quota(built.config, "a") == 2
    s.put(
        edited(
            cq("a", 2),
            resourceGroups=[
                {
                    "flavors": [
                        {
                            "name": "a100",
                            "resources": [
                                {"name": "nvidia.com/gpu", "nominalQuota": 2, "lendingLimit": 5}
                            ],
                        }
                    ]
                }
            ],
            cohort="all",
        )
    )
    s.put(
        edited(
            cq("b", 2),
            resourceGroups=[
                {
                    "flavors": [
                        {
                            "name": "a100",
                            "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 4}],
                        }
                    ]
                }
            ],
        )
    )
    built = s.build()
    problem = built.problems[("ClusterQueue", "a")]
    assert problem.field == "spec.resourceGroups[0].flavors[0].resources[0].lendingLimit"
    assert (problem.value, ("ClusterQueue", "a") in built.reverted) == (5, True)
    assert quota(built.config, "a") == 2  # the last applied version
    assert quota(built.config, "b") == 4  # the good edit is applied


def test_a_new_bad_object_is_marked_and_left_out() -> None:
    s = store(flavor(), cq("a"))
    s.build()
    s.put(cq("ghost", flavor="h100"))
    s.put(cq("worse", gpus="lots"))
    built = s.build()
    assert {q.name for q in built.config.cluster_queues} == {"a"}
    ghost = built.problems[("ClusterQueue", "ghost")]
    assert (ghost.value, ghost.rule) == ("h100", "is not a ResourceFlavor; known: a100")
    assert built.problems[("ClusterQueue", "worse")].field.endswith("nominalQuota")
    assert not built.reverted


def test_a_local_queue_of_a_queue_left_out_is_left_out_too() -> None:
    s = store(
        flavor(),
        cq("a"),
        cq("ghost", flavor="h100"),
        lq("team", "ns", "ghost"),
        lq("ok", "ns", "a"),
    )
    built = s.build()
    assert built.config.local_queues == (LocalQueue("ok", "a", "ns"),)
    assert built.problems[("LocalQueue", "ns/team")].field == "spec.clusterQueue"


def test_a_flavor_deleted_while_in_use_stays_until_nothing_names_it() -> None:
    a100 = flavor()
    s = store(a100, cq("a"))
    s.build()
    s.delete(a100)
    built = s.build()
    assert [f.name for f in built.config.flavors] == ["a100"] and not built.problems
    s.delete(cq("a"))
    assert s.build().config.flavors == ()


def test_a_deleted_queue_holding_running_jobs_is_kept() -> None:
    queue = cq("a")
    s = store(flavor(), queue)
    s.build()
    s.delete(queue)
    assert [q.name for q in s.build(keep=[("ClusterQueue", "a")]).config.cluster_queues] == ["a"]
    assert s.build().config.cluster_queues == ()


def test_fields_not_acted_on_are_told_to_their_object() -> None:
    s = store(
        flavor(),
        cq("a", stopPolicy="Hold"),
        obj("ResourceFlavor", "h100", {"nodeLabels": {}, "topologyName": "racks"}),
    )
    built = s.build()
    assert [i.path for i in built.ignored[("ClusterQueue", "a")]] == [
        "spec.namespaceSelector",
        "spec.stopPolicy",
    ]
    assert [i.path for i in built.ignored[("ResourceFlavor", "h100")]] == ["spec.topologyName"]


def test_no_valid_subset_is_an_error_only_when_nothing_can_be_blamed() -> None:
    s = store(flavor(), cq("a"))
    assert s.build().problems == {}
    # a WorkloadPriorityClass without a value: marked, the rest applies
    s.put(obj("WorkloadPriorityClass", "urgent"))
    built = s.build()
    assert ("WorkloadPriorityClass", "urgent") in built.problems
    assert [q.name for q in built.config.cluster_queues] == ["a"]


# -- pods: queue and priority ---------------------------------------------------------------


def pod(
    labels: dict[str, str] | None = None, ns: str = "team-a", owner: str | None = None
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "p", "namespace": ns, "labels": labels or {}}
    if owner:
        meta["ownerReferences"] = [
            {"apiVersion": "batch/v1", "kind": "Job", "name": owner, "uid": "u", "controller": True}
        ]
    return {"metadata": meta}


CONFIG = QueueConfig(
    local_queues=(LocalQueue("main", "cq", "team-a"), LocalQueue("other", "cq", "team-b")),
    priority_classes=(PriorityClass("urgent", 1000),),
)


def test_the_queue_name_is_read_from_the_pod_then_its_job() -> None:
    jobs = {
        "team-a/train": job_labels(
            {
                "metadata": {
                    "labels": {
                        "kueue.x-k8s.io/queue-name": "main",
                        "kueue.x-k8s.io/priority-class": "urgent",
                        "app": "x",
                    }
                }
            }
        )
    }
    assert jobs["team-a/train"] == {
        "kueue.x-k8s.io/queue-name": "main",
        "kueue.x-k8s.io/priority-class": "urgent",
    }
    assert owner_job(pod(owner="train")) == "team-a/train"
    assert workload_labels(pod(owner="train"), jobs) == ("main", "urgent")
    assert workload_labels(pod({"kueue.x-k8s.io/queue-name": "own"}, owner="train"), jobs) == (
        "own",
        "urgent",
    )
    assert workload_labels(pod(), jobs) == (None, None)
    # a Job that is not the controller does not count
    p = pod(owner="train")
    p["metadata"]["ownerReferences"][0]["controller"] = False
    assert workload_labels(p, jobs) == (None, None)


def test_a_queue_name_is_a_local_queue_of_the_pods_own_namespace() -> None:
    assert local_queue(CONFIG, "team-a", "main") == "team-a/main"
    with pytest.raises(
        NotFoundError,
        match=r"'other' does not exist in namespace 'team-a'.*"
        r"LocalQueues there: main",
    ):
        local_queue(CONFIG, "team-a", "other")  # team-b's
    with pytest.raises(NotFoundError):
        local_queue(CONFIG, "team-a", "cq")  # a ClusterQueue is not a queue name


def test_a_workload_priority_class_sets_the_priority() -> None:
    assert workload_priority(CONFIG, "urgent") == 1000
    assert workload_priority(CONFIG, None) is None
    with pytest.raises(InvalidJobError) as info:
        workload_priority(CONFIG, "vip")
    assert info.value.field == "metadata.labels[kueue.x-k8s.io/priority-class]"
    assert "known: urgent" in info.value.rule


def test_config_errors_of_objects_are_structured() -> None:
    s = store(flavor(), cq("a", queueingStrategy="Sometimes"))
    err = s.build().problems[("ClusterQueue", "a")]
    assert isinstance(err, ConfigError)
    assert (err.field, err.value) == ("spec.queueingStrategy", "Sometimes")


@pytest.mark.parametrize(
    ("selector", "labels", "matches"),
    [
        (None, {"team": "a"}, False),  # unset: Kueue admits no namespace
        ({}, {}, True),
        ({"matchLabels": {"team": "a"}}, {"team": "a", "x": "y"}, True),
        ({"matchLabels": {"team": "a"}}, {"team": "b"}, False),
        (
            {"matchExpressions": [{"key": "team", "operator": "In", "values": ["a", "b"]}]},
            {"team": "b"},
            True,
        ),
        ({"matchExpressions": [{"key": "team", "operator": "In", "values": ["a"]}]}, {}, False),
        ({"matchExpressions": [{"key": "team", "operator": "NotIn", "values": ["a"]}]}, {}, True),
        (
            {"matchExpressions": [{"key": "team", "operator": "NotIn", "values": ["a"]}]},
            {"team": "a"},
            False,
        ),
        ({"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}, {"gpu": ""}, True),
        ({"matchExpressions": [{"key": "gpu", "operator": "DoesNotExist"}]}, {"gpu": "1"}, False),
        (
            {
                "matchLabels": {"team": "a"},
                "matchExpressions": [{"key": "tier", "operator": "Exists"}],
            },
            {"team": "a"},
            False,
        ),
    ],
)
def test_namespace_selectors_match_as_kubernetes_label_selectors(
    selector: dict[str, Any] | None, labels: dict[str, str], matches: bool
) -> None:
    assert selector_matches(selector, labels) is matches


def test_a_queue_that_does_not_admit_the_namespace_says_why() -> None:
    admits("research", {"matchLabels": {"team": "research"}}, "a", {"team": "research"})
    with pytest.raises(
        NotFoundError,
        match=r"ClusterQueue research does not admit namespace "
        r"'b': its namespaceSelector",
    ):
        admits("research", {"matchLabels": {"team": "research"}}, "b", {})
    with pytest.raises(NotFoundError, match=r"unset \(no namespace\)"):
        admits("research", None, "b", {})
