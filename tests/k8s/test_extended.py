"""Extended resources other than GPUs counted as the kubelet admits pods (no server):
allocatable minus every pod's requests, GPU names left to the cards, the reason in numbers."""

from __future__ import annotations

from gpupool.k8s.extended import ExtendedLedger, extended_allocatable
from gpupool.k8s.podview import NodeUsage, PodUsage

GPU_NAMES = frozenset({"nvidia.com/gpu", "nvidia.com/gpumem"})


def node(**alloc: str) -> dict[str, object]:
    return {
        "status": {
            "allocatable": {
                "cpu": "8",
                "memory": "16Gi",
                "pods": "110",
                "hugepages-2Mi": "0",
                **alloc,
            }
        }
    }


def test_only_extended_resources_are_read_from_allocatable() -> None:
    got = extended_allocatable(
        node(**{"rdma/hca": "4", "nvidia.com/gpu": "80", "example.com/foo": "2k"}), GPU_NAMES
    )
    assert got == {"rdma/hca": 4, "example.com/foo": 2000}


def test_every_pod_on_the_node_counts_and_the_reason_says_how_much() -> None:
    outside = NodeUsage()
    ledger = ExtendedLedger(outside, GPU_NAMES)
    ledger.set_node("n1", node(**{"rdma/hca": "4"}))
    assert ledger.asked({"rdma/hca": 1, "nvidia.com/gpu": 1, "example.com/x": 0}) == {"rdma/hca": 1}
    outside.put("kube-system/net", "n1", PodUsage(extended={"rdma/hca": 1}))
    ledger.take("team/a", "n1", {"rdma/hca": 2})
    assert ledger.shortfall("n1", {"rdma/hca": 1}) is None
    assert ledger.shortfall("n1", {"rdma/hca": 2}) == (
        "node n1 has 1 rdma/hca free of 4; the pod asks 2"
    )
    # a pod checked again is not counted against itself
    assert ledger.shortfall("n1", {"rdma/hca": 3}, skip="team/a") is None
    assert ledger.shortfall("n1", {"example.com/foo": 1}) == "node n1 has no example.com/foo"
    ledger.drop("team/a")
    outside.drop("kube-system/net")
    assert ledger.shortfall("n1", {"rdma/hca": 4}) is None
    ledger.set_node("n1", None)
    assert ledger.shortfall("n1", {"rdma/hca": 1}) == "node n1 has no rdma/hca"
