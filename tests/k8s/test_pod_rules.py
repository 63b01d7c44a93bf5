"""Pod affinity, anti-affinity and topology spread read from a pod's spec: defaults,
namespaces, bad input named by field, what is told as not honoured, and reduced pods keeping
what other pods' rules need."""

from __future__ import annotations

from typing import Any

import pytest

from gpupool.core.affinity import LabelSelector, NodeRequirement
from gpupool.core.errors import InvalidJobError
from gpupool.core.model import GpuRequest, JobId
from gpupool.k8s.constraints import ignored_constraints, pod_constraints
from gpupool.k8s.jobs import job_for_pods
from gpupool.k8s.podaffinity import pod_meta
from gpupool.k8s.podview import reduce
from gpupool.k8s.translate import PodRequest

REQ = "requiredDuringSchedulingIgnoredDuringExecution"


def pod(
    spec: dict[str, Any] | None = None, labels: dict[str, str] | None = None, ns: str = "team"
) -> dict[str, Any]:
    return {"metadata": {"name": "p", "namespace": ns, "labels": labels or {}}, "spec": spec or {}}


def anti(*terms: dict[str, Any]) -> dict[str, Any]:
    return {"affinity": {"podAntiAffinity": {REQ: list(terms)}}}


def test_terms_read_with_kubernetes_namespace_defaults() -> None:
    sel = {
        "matchLabels": {"app": "web"},
        "matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["db"]}],
    }
    con = pod_constraints(
        pod(
            anti(
                {"topologyKey": "zone", "labelSelector": sel},
                {"topologyKey": "zone", "labelSelector": sel, "namespaces": ["a", "b"]},
                {"topologyKey": "zone", "labelSelector": sel, "namespaceSelector": {}},
                {"topologyKey": "zone"},
            ),
            labels={"app": "web"},
        )
    )
    own, listed, every, no_selector = con.pod_anti_affinity
    assert own.namespaces == frozenset({"team"})
    assert listed.namespaces == frozenset({"a", "b"})
    assert every.namespaces is None
    assert own.selector == LabelSelector(
        (("app", "web"),), (NodeRequirement("tier", "NotIn", ("db",)),)
    )
    assert no_selector.selector is None and not no_selector.matches("team", {"app": "web"})
    assert con.pod.namespace == "team" and con.pod.labels == {"app": "web"}
    assert con.pod.anti_affinity == con.pod_anti_affinity


NAMESPACES = {
    "team": {"tier": "prod"},
    "ml": {"tier": "prod", "gpu": "yes"},
    "dev": {"tier": "dev"},
}


def test_a_namespace_selector_is_matched_against_namespace_labels() -> None:
    sel = {"matchLabels": {"app": "web"}}
    con = pod_constraints(
        pod(
            anti(
                {
                    "topologyKey": "z",
                    "labelSelector": sel,
                    "namespaceSelector": {"matchLabels": {"tier": "prod"}},
                },
                {
                    "topologyKey": "z",
                    "labelSelector": sel,
                    "namespaces": ["dev"],
                    "namespaceSelector": {
                        "matchExpressions": [{"key": "gpu", "operator": "Exists"}]
                    },
                },
                {
                    "topologyKey": "z",
                    "labelSelector": sel,
                    "namespaceSelector": {"matchLabels": {"tier": "none"}},
                },
            )
        ),
        NAMESPACES,
    )
    prod, listed_or_gpu, nothing = con.pod_anti_affinity
    assert prod.namespaces == frozenset({"team", "ml"})
    assert listed_or_gpu.namespaces == frozenset({"dev", "ml"})  # the union of both
    # a selector matching no namespace, with none listed, counts no pod (not the own one)
    assert nothing.namespaces == frozenset()
    assert not nothing.matches("team", {"app": "web"})
    # the same terms of a pod that other pods count
    assert pod_meta(
        pod(
            anti(
                {
                    "topologyKey": "z",
                    "labelSelector": sel,
                    "namespaceSelector": {"matchLabels": {"tier": "dev"}},
                }
            )
        ),
        NAMESPACES,
    ).anti_affinity[0].namespaces == frozenset({"dev"})
    # resolved, it is honoured; without the Namespaces' labels it is told as not honoured
    spec = anti({"topologyKey": "z", "namespaceSelector": {"matchLabels": {"t": "a"}}})
    assert ignored_constraints(pod(spec), namespaces_known=True) == []
    assert ignored_constraints(pod(spec)) != []


def test_a_bad_namespace_selector_is_named_by_its_path() -> None:
    with pytest.raises(InvalidJobError) as exc:
        pod_constraints(
            pod(
                anti(
                    {
                        "topologyKey": "z",
                        "namespaceSelector": {
                            "matchExpressions": [{"key": "t", "operator": "Gt", "values": ["1"]}]
                        },
                    }
                )
            ),
            NAMESPACES,
        )
    assert exc.value.field.endswith("namespaceSelector.matchExpressions[0].operator")


def test_spread_reads_both_kinds_apart() -> None:
    con = pod_constraints(
        pod(
            {
                "topologySpreadConstraints": [
                    {
                        "maxSkew": 2,
                        "topologyKey": "zone",
                        "whenUnsatisfiable": "DoNotSchedule",
                        "labelSelector": {"matchLabels": {"app": "s"}},
                        "minDomains": 3,
                    },
                    {"maxSkew": 1, "topologyKey": "host", "whenUnsatisfiable": "ScheduleAnyway"},
                ]
            }
        )
    )
    (c,) = con.spread
    assert (c.max_skew, c.topology_key, c.min_domains) == (2, "zone", 3)
    (soft,) = con.soft_spread
    assert (soft.max_skew, soft.topology_key, soft.selector) == (1, "host", None)


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        (anti({"labelSelector": {}}), "topologyKey"),
        (
            anti(
                {
                    "topologyKey": "z",
                    "labelSelector": {
                        "matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]
                    },
                }
            ),
            "matchExpressions[0].operator",
        ),
        (
            anti(
                {
                    "topologyKey": "z",
                    "labelSelector": {"matchExpressions": [{"key": "a", "operator": "In"}]},
                }
            ),
            "matchExpressions[0].values",
        ),
        (anti({"topologyKey": "z", "labelSelector": {"matchLabels": {"a": 1}}}), "matchLabels"),
        ({"topologySpreadConstraints": [{"maxSkew": 0, "topologyKey": "z"}]}, "maxSkew"),
        (
            {
                "topologySpreadConstraints": [
                    {"maxSkew": 1, "topologyKey": "z", "whenUnsatisfiable": "Maybe"}
                ]
            },
            "whenUnsatisfiable",
        ),
        (
            {"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "z", "minDomains": 0}]},
            "minDomains",
        ),
    ],
)
def test_bad_rules_name_the_field(spec: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidJobError) as exc:
        pod_constraints(pod(spec))
    assert exc.value.field.endswith(field), exc.value.field


def test_parts_not_honoured_are_named() -> None:
    spec = anti(
        {
            "topologyKey": "z",
            "namespaceSelector": {"matchLabels": {"t": "a"}},
            "matchLabelKeys": ["pod-template-hash"],
        }
    )
    spec["topologySpreadConstraints"] = [
        {"maxSkew": 1, "topologyKey": "z", "nodeTaintsPolicy": "Honor"},
        {"maxSkew": 1, "topologyKey": "z", "nodeAffinityPolicy": "Honor"},
    ]
    told = ignored_constraints(pod(spec))
    assert any(t.endswith("namespaceSelector") for t in told)
    assert any(t.endswith("matchLabelKeys") for t in told)
    assert any("nodeTaintsPolicy=Honor" in t for t in told)
    assert not any("nodeAffinityPolicy" in t for t in told)  # Honor is the default
    assert ignored_constraints(pod(anti({"topologyKey": "z", "namespaceSelector": {}}))) == []


def test_a_reduced_pod_keeps_what_other_pods_rules_read() -> None:
    spec = anti({"topologyKey": "z", "labelSelector": {"matchLabels": {"app": "web"}}})
    spec.update(nodeName="n1", containers=[{"name": "c", "image": "x"}])
    full = pod(spec, labels={"app": "db"})
    full["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    small = reduce(full)
    assert "containers" not in small["spec"]
    assert pod_meta(small) == pod_meta(full)
    meta = pod_meta(small)
    assert meta.namespace == "team" and meta.labels == {"app": "db"} and meta.terminating
    assert meta.anti_affinity[0].matches("team", {"app": "web"})


def test_pods_with_other_labels_get_their_own_pod_set() -> None:
    req = PodRequest(
        cpu_milli=1000, memory_mib=1024, gpu=GpuRequest(count=1), containers=(), slots=1
    )
    a, b = pod(labels={"app": "a"}), pod(labels={"app": "b"})
    job, _ = job_for_pods(
        JobId("j"),
        "default",
        [("ns/a", req), ("ns/b", req), ("ns/a2", req)],
        gang=True,
        constraints={
            "ns/a": pod_constraints(a),
            "ns/b": pod_constraints(b),
            "ns/a2": pod_constraints(a),
        },
    )
    assert sorted((ps.count, ps.pod.labels["app"]) for ps in job.pod_sets) == [(1, "b"), (2, "a")]


def test_preferred_terms_read_with_their_weights() -> None:
    spec = {
        "affinity": {
            "podAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 30,
                        "podAffinityTerm": {
                            "topologyKey": "zone",
                            "labelSelector": {"matchLabels": {"a": "b"}},
                        },
                    }
                ]
            }
        }
    }
    con = pod_constraints(pod(spec))
    ((weight, term),) = con.preferred_affinity
    assert weight == 30 and term.topology_key == "zone" and term.namespaces == {"team"}
    spec["affinity"]["podAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0][
        "weight"
    ] = 101
    with pytest.raises(InvalidJobError) as exc:
        pod_constraints(pod(spec))
    assert exc.value.field.endswith("[0].weight")


def test_preferred_node_affinity_read_with_weights() -> None:
    pref = "preferredDuringSchedulingIgnoredDuringExecution"
    spec: dict[str, Any] = {
        "affinity": {
            "nodeAffinity": {
                pref: [
                    {
                        "weight": 40,
                        "preference": {
                            "matchExpressions": [
                                {"key": "zone", "operator": "In", "values": ["z1"]}
                            ]
                        },
                    },
                    {"weight": 5, "preference": {}},  # empty: matches no node, left out
                    {
                        "weight": 7,
                        "preference": {
                            "matchFields": [
                                {"key": "metadata.name", "operator": "NotIn", "values": ["n1"]}
                            ]
                        },
                    },
                ]
            }
        }
    }
    con = pod_constraints(pod(spec))
    assert [
        (w, [(r.key, r.operator, r.values, r.field) for r in t.requirements])
        for w, t in con.preferred_node_affinity
    ] == [(40, [("zone", "In", ("z1",), False)]), (7, [("metadata.name", "NotIn", ("n1",), True)])]
    req = PodRequest(
        cpu_milli=1000, memory_mib=1024, gpu=GpuRequest(count=1), containers=(), slots=1
    )
    job, _ = job_for_pods(
        JobId("j"), "q", [("team/p", req)], gang=False, constraints={"team/p": con}
    )
    assert job.pod_sets[0].preferred_node_affinity == con.preferred_node_affinity


@pytest.mark.parametrize(
    ("entry", "field", "rule"),
    [
        ({"weight": 0, "preference": {}}, "[0].weight", "from 1 to 100"),
        ({"weight": 101, "preference": {}}, "[0].weight", "from 1 to 100"),
        ({"weight": "9", "preference": {}}, "[0].weight", "from 1 to 100"),
        ({"weight": 9, "preference": "zone"}, "[0].preference", "must be an object"),
        (
            {
                "weight": 9,
                "preference": {
                    "matchExpressions": [{"key": "zone", "operator": "Near", "values": ["z"]}]
                },
            },
            "[0].preference.matchExpressions[0].operator",
            "must be one of",
        ),
    ],
)
def test_bad_preferred_node_affinity_names_the_field(
    entry: dict[str, Any], field: str, rule: str
) -> None:
    spec = {
        "affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [entry]}}
    }
    with pytest.raises(InvalidJobError) as exc:
        pod_constraints(pod(spec))
    assert exc.value.field.endswith(field) and rule in exc.value.rule


def test_a_bad_required_requirement_is_named_by_its_path() -> None:
    spec = {
        "affinity": {
            "nodeAffinity": {
                REQ: {
                    "nodeSelectorTerms": [
                        {
                            "matchFields": [
                                {"key": "metadata.labels", "operator": "In", "values": ["x"]}
                            ]
                        }
                    ]
                }
            }
        }
    }
    with pytest.raises(InvalidJobError) as exc:
        pod_constraints(pod(spec))
    assert exc.value.field == (
        f"spec.affinity.nodeAffinity.{REQ}.nodeSelectorTerms[0].matchFields[0].key"
    )
