"""Which nodes a Provisioned request holds when the autoscaler labels none per request: the
pool's free nodes its pod sets may use, as many as its pods need (k8s/provisioning_nodes.py);
and the PodTemplates that tell the autoscaler which node group to scale."""

from __future__ import annotations

import pytest

from gpupool.core.model import PodSet, Taint, TaintEffect, Toleration
from gpupool.core.provisioning import REQUEST_LABEL, ProvisioningRequest
from gpupool.k8s.provisioning_nodes import NodeBook, enough, fits, matching, pick, pods_per_node
from gpupool.k8s.provisioning_objects import pod_template, request_object, template_names
from gpupool.k8s.translate import ResourceNames
from tests.builders import mig, mig_node, node, share, whole

POOL = {"pool": "h100"}
TAINT = Taint("nvidia.com/gpu", "present")
TOL = Toleration("nvidia.com/gpu", "Exists", effect=TaintEffect.NO_SCHEDULE)


def ps(
    name: str = "w",
    count: int = 2,
    gpu: object = None,
    cpu: int = 1000,
    tolerations: tuple[Toleration, ...] = (TOL,),
) -> PodSet:
    return PodSet(
        name,
        count,
        cpu,
        1024,
        gpu or whole(8),  # type: ignore[arg-type]
        node_selector=POOL,
        tolerations=tolerations,
    )


def pool_node(name: str, **kw: object) -> object:
    return node(name, gpu=8, gpu_mem=81920, labels=POOL, taints=(TAINT,), **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("n", "pod_set", "ok"),
    [
        (pool_node("a"), ps(), True),
        (pool_node("a"), ps(tolerations=()), False),  # the pool's taint not tolerated
        (node("b", labels={"pool": "a100"}), ps(), False),  # another pool
        (pool_node("a", schedulable=False), ps(), False),  # cordoned
        (
            node("c", labels={**POOL, REQUEST_LABEL: "x.y"}, taints=(Taint(REQUEST_LABEL, "x.y"),)),
            ps(),
            True,
        ),  # gpupool's own mark is not the pool's
    ],
)
def test_fits(n: object, pod_set: PodSet, ok: bool) -> None:
    assert fits(pod_set, n) is ok  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("pod_set", "n", "per_node"),
    [
        (ps(gpu=whole(8)), pool_node("a"), 1),
        (ps(gpu=whole(4)), pool_node("a"), 2),
        (ps(gpu=whole(3)), pool_node("a"), 2),
        (ps(gpu=share(500, 20_000)), pool_node("a"), 16),  # 8 cards x 2 slices
        (ps(gpu=share(500, 20_000), cpu=16_000), pool_node("a"), 4),  # 64 CPUs
        (ps(gpu=whole(16)), pool_node("a"), 0),
        (ps(gpu=mig("1g.10gb")), mig_node("m", per_card=7, cards=2), 14),
    ],
)
def test_pods_per_node(pod_set: PodSet, n: object, per_node: int) -> None:
    assert pods_per_node(pod_set, n) == per_node  # type: ignore[arg-type]


def test_pick_takes_nodes_in_the_order_given_until_the_pods_fit() -> None:
    nodes = [pool_node(f"n{i}") for i in range(4)]
    chosen, full = pick([ps(count=2)], nodes)  # type: ignore[arg-type]
    assert [n.name for n in chosen] == ["n0", "n1"] and full
    chosen, full = pick([ps(count=3, gpu=whole(4))], nodes)  # type: ignore[arg-type]
    assert [n.name for n in chosen] == ["n0", "n1"] and full
    chosen, full = pick([ps(count=5)], nodes[:2])  # type: ignore[arg-type]
    assert len(chosen) == 2 and not full  # short: nodes that register later join
    # a node held already counts; a node the pods cannot use is skipped
    other = node("x", labels={"pool": "a100"})
    chosen, full = pick([ps(count=2)], [other, nodes[1]], held=[nodes[0]])  # type: ignore[list-item]
    assert [n.name for n in chosen] == ["n1"] and full


def test_enough_gives_each_node_to_one_pod_set() -> None:
    two = [ps("a", 1, whole(8)), ps("b", 2, share(500, 20_000))]
    assert not enough(two, [pool_node("n0")])  # type: ignore[list-item]
    assert enough(two, [pool_node("n0"), pool_node("n1")])  # type: ignore[list-item]


def test_node_book_marks_held_nodes_in_the_core_only_and_releases_them() -> None:
    book = NodeBook()
    a = pool_node("a")
    assert book.hold("ns/r", "ns.r", ["a"]) == ["a"]
    assert book.hold("ns/s", "ns.s", ["a", "b"]) == ["b"]  # a node has one holder
    marked = book.mark(a)  # type: ignore[arg-type]
    assert marked.labels[REQUEST_LABEL] == "ns.r"
    assert Taint(REQUEST_LABEL, "ns.r") in marked.taints and TAINT in marked.taints
    assert book.mark(marked) == marked  # marking twice changes nothing
    assert book.release("ns/r") == ["a"]
    assert book.mark(a) == a  # type: ignore[arg-type]
    assert book.nodes("ns/s") == ["b"]


def test_details_selector_matches_labels() -> None:
    tagged = node("t", labels={**POOL, "autoscaling.gke.io/provisioning-request": "rr-1"})
    assert [
        n.name
        for n in matching(
            {"autoscaling.gke.io/provisioning-request": "rr-1"}, [pool_node("a"), tagged]
        )
    ] == ["t"]  # type: ignore[list-item]


def test_templates_one_per_pod_set_with_tolerations_and_advertised_resources() -> None:
    req = ProvisioningRequest(
        "job-1", (ps("ps0", 1), ps("ps1", 2, share(500, 20_000))), namespace="ml"
    )
    body = request_object(req, {})
    assert [p["count"] for p in body["spec"]["podSets"]] == [1, 2]
    assert template_names(body) == ["ppt-job-1-ps0", "ppt-job-1-ps1"]
    pod = {
        "metadata": {"labels": {"app": "x"}},
        "spec": {
            "schedulerName": "gpupool",
            "nodeName": "old",
            "priority": 5,
            "tolerations": [{"key": REQUEST_LABEL, "operator": "Exists"}],
            "containers": [
                {
                    "name": "main",
                    "resources": {
                        "limits": {
                            "nvidia.com/gpu": "1",
                            "nvidia.com/gpumem": "20000",
                            "nvidia.com/gpucores": "50",
                        },
                        "requests": {"cpu": "1"},
                    },
                }
            ],
        },
    }
    tpl = pod_template(req, pod, 1, ResourceNames())
    spec = tpl["template"]["spec"]
    assert tpl["metadata"]["name"] == "ppt-job-1-ps1"
    assert spec["containers"][0]["resources"] == {
        "limits": {"nvidia.com/gpu": "1"},
        "requests": {"cpu": "1", "nvidia.com/gpu": "1"},
    }
    assert "nodeName" not in spec and "schedulerName" not in spec and "priority" not in spec
    assert spec["nodeSelector"] == POOL
    assert spec["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]
    # configured HAMi names are the ones removed
    names = ResourceNames(memory="example.com/vmem", cores="example.com/vcores")
    pod["spec"]["containers"][0]["resources"]["limits"] = {  # type: ignore[index]
        "nvidia.com/gpu": "1",
        "example.com/vmem": "1",
        "example.com/vcores": "1",
    }
    limits = pod_template(req, pod, 1, names)["template"]["spec"]["containers"][0]["resources"][
        "limits"
    ]
    assert limits == {"nvidia.com/gpu": "1"}
