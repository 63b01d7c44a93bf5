"""The simulated cloud's pools and stock-outs on their own: which pool holds a request and how
many nodes it takes, why the region refuses one at once, the node a pool makes for a request,
and the seeded outage windows."""

from __future__ import annotations

import pytest

from gpupool.cloud.pools import (
    ZONE_LABEL,
    match_pod_set,
    match_request,
    pool_node,
    refusal,
    reserving_pod_set,
)
from gpupool.cloud.spec import CloudSpec, parse_cloud
from gpupool.cloud.stockouts import is_stocked_out, outage_windows
from gpupool.config.loader import parse_documents
from gpupool.core.model import GpuRequest, PodSet
from gpupool.core.provisioning import REQUEST_LABEL, ProvisioningRequest
from tests.builders import share, whole

CLOUD = """
apiVersion: gpupool.io/v1alpha1
kind: Cloud
metadata: {name: r1}
spec:
  region: r1
  gpuQuota: 40
  provisioningDelay: {uniform: {min: 1m, max: 2m}}
  stockouts: {ratePerHour: 2, duration: {uniform: {min: 10m, max: 30m}}}
  nodePools:
  - name: l4
    zones: [a, b]
    maxNodesPerZone: 4
    cpu: 32
    memory: 128Gi
    labels: {gpupool.io/flavor: l4}
    gpus: {model: L4, count: 4, memory: 24Gi}
  - name: h100
    zones: [a]
    maxNodesPerZone: 3
    cpu: 192
    memory: 2Ti
    labels: {gpupool.io/flavor: h100}
    gpus: {model: H100-80GB, count: 8, memory: 80Gi}
"""


def _spec(text: str = CLOUD) -> CloudSpec:
    (doc,) = parse_documents(text)
    return parse_cloud(doc)


def _pods(count: int, gpu: GpuRequest, **selector: str) -> PodSet:
    return PodSet("main", count, 1000, 1024, gpu, node_selector=selector)


def test_a_pod_set_goes_to_the_first_pool_that_holds_its_pods() -> None:
    spec = _spec()
    pool, nodes, why = match_pod_set(spec, _pods(5, whole(2)))
    assert (pool.name if pool else None, nodes, why) == ("l4", 3, "")  # 2 pods a node
    pool, nodes, _ = match_pod_set(spec, _pods(3, whole(4, ["H100-80GB"])))
    assert (pool.name if pool else None, nodes) == ("h100", 2)
    pool, nodes, _ = match_pod_set(spec, _pods(3, whole(1), **{"gpupool.io/flavor": "h100"}))
    assert (pool.name if pool else None, nodes) == ("h100", 1)


def test_a_pod_set_no_pool_holds_says_why_for_each_pool() -> None:
    pool, nodes, why = match_pod_set(_spec(), _pods(1, whole(16)))
    assert (pool, nodes) == (None, 0)
    assert why == "l4: a node holds no pod; h100: a node holds no pod"
    _, _, why = match_pod_set(_spec(), _pods(1, share(500, 40_000, ["L4"])))
    assert why == "l4: a node holds no pod; h100: model H100-80GB"


def test_every_pod_set_of_a_request_must_come_from_one_pool() -> None:
    spec = _spec()
    both = ProvisioningRequest("r", (_pods(2, whole(2)), PodSet("more", 2, 1000, 1024, whole(2))))
    pool, nodes, _ = match_request(spec, both)
    assert (pool.name if pool else None, nodes) == ("l4", 2)
    split = ProvisioningRequest(
        "r", (_pods(2, whole(2)), PodSet("big", 1, 1000, 1024, whole(8, ["H100-80GB"])))
    )
    assert match_request(spec, split) == (None, 0, "pod set big: not in pool l4")


def test_the_region_refuses_at_once_what_it_can_never_make() -> None:
    spec = _spec()
    l4 = spec.pool("l4")
    assert refusal(spec, None, 0, 0, "l4: labels") == (
        "NoMatchingPool",
        "no node pool of region r1 holds its pods (l4: labels)",
    )
    assert refusal(spec, l4, 5, 20, "") == (
        "TooLarge",
        "needs 5 nodes in one zone; pool l4 holds 4 per zone",
    )
    h100 = spec.pool("h100")
    assert refusal(spec, h100, 3, 48, "") == (
        "QuotaExceeded",
        "needs 48 GPUs; the regional quota is 40",
    )
    assert refusal(spec, l4, 4, 16, "") is None


def test_a_pool_node_is_its_template_named_zoned_and_tainted_for_its_request() -> None:
    pool = _spec().pool("l4")
    node = pool_node(pool, 7, "b", "req-1")
    assert node.name == "l4-b-00007"
    assert node.labels[ZONE_LABEL] == "b"
    assert node.labels[REQUEST_LABEL] == "req-1"
    assert node.labels["kubernetes.io/hostname"] == "l4-b-00007"
    assert node.labels["gpupool.io/flavor"] == "l4"
    assert [(t.key, t.value) for t in node.taints] == [(REQUEST_LABEL, "req-1")]
    assert [g.uuid for g in node.gpus] == [f"GPU-l4-b-00007-{i}" for i in range(4)]
    assert (node.cpu_milli, node.memory_mib) == (pool.template.cpu_milli, 128 * 1024)


def test_a_request_by_hand_takes_whole_nodes_of_its_pool() -> None:
    pool = _spec().pool("h100")
    ps = reserving_pod_set(pool, 2)
    assert (ps.count, ps.gpu.count, ps.gpu.models) == (2, 8, frozenset({"H100-80GB"}))
    assert match_pod_set(_spec(), ps)[:2] == (pool, 2)


def test_outages_follow_from_the_seed_and_stay_within_the_run() -> None:
    spec = _spec()
    windows = outage_windows(spec, 3, 0, 1, 86_400.0)
    assert windows == outage_windows(spec, 3, 0, 1, 86_400.0)
    assert windows != outage_windows(spec, 3, 0, 0, 86_400.0)
    assert windows != outage_windows(spec, 4, 0, 1, 86_400.0)
    assert len(windows) > 10  # two an hour over a day
    for start, end in windows:
        assert 0 < start < 86_400.0
        assert 600.0 <= end - start <= 1800.0
    assert [s for s, _ in windows] == sorted(s for s, _ in windows)


def test_no_outages_without_a_rate() -> None:
    spec = _spec(CLOUD.replace("  stockouts: {ratePerHour: 2, ", "  #"))
    assert outage_windows(spec, 3, 0, 0, 86_400.0) == []


@pytest.mark.parametrize(
    ("t", "out"), [(99.9, False), (100.0, True), (199.9, True), (200.0, False)]
)
def test_a_zone_is_stocked_out_from_the_start_of_a_window_to_its_end(t: float, out: bool) -> None:
    windows = {"l4/a": [(100.0, 200.0)]}
    assert is_stocked_out(windows, "l4", "a", t) is out
    assert not is_stocked_out(windows, "l4", "b", t)
