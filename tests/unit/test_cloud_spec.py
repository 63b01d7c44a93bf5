"""The cloud's document is read by its pydantic shape: every problem names the field, the value
and the rule, and the cloud's node pools are made as a Cluster's pools are."""

from __future__ import annotations

import pytest

from gpupool.cloud.spec import parse_cloud
from gpupool.config.documents import Document
from gpupool.core import ConfigError


def cloud(**spec: object) -> Document:
    base: dict[str, object] = {
        "gpuQuota": 64,
        "provisioningDelay": "5m",
        "nodePools": [
            {
                "name": "h100",
                "zones": ["a", "b"],
                "maxNodesPerZone": 2,
                "cpu": 64,
                "memory": "512Gi",
                "gpus": {"model": "H100", "count": 8, "memory": "80Gi"},
            }
        ],
    }
    return Document(
        "cloud.yaml",
        1,
        {
            "apiVersion": "gpupool.io/v1alpha1",
            "kind": "Cloud",
            "metadata": {"name": "c"},
            "spec": base | spec,
        },
    )


def pools(**pool: object) -> list[dict[str, object]]:
    return [
        {
            "name": "h100",
            "maxNodesPerZone": 2,
            "cpu": 64,
            "memory": "512Gi",
            "gpus": {"model": "H100", "count": 8, "memory": "80Gi"},
        }
        | pool
    ]


def test_a_cloud_reads_with_its_defaults() -> None:
    spec = parse_cloud(
        cloud(
            provisioningDelay={"exponential": {"mean": "5m", "max": "1h"}},
            nodePools=pools(zones="z"),
            stockouts={"ratePerHour": 1, "duration": "30m"},
            requests=[{"name": "r", "at": "1h30m", "pool": "h100", "nodes": 2}],
        )
    )
    assert spec.queue_timeout_s == 4 * 3600 and spec.scale_down_after_s == 600
    assert (spec.delay.kind, spec.delay.a, spec.delay.b) == ("exponential", 300.0, 3600.0)
    assert spec.stockout_rate_per_h == 1.0 and spec.stockout_duration is not None
    (pool,) = spec.pools
    assert pool.zones == ("z",) and pool.gpus_per_node == 8 and pool.model == "H100"
    assert pool.template.labels["nvidia.com/gpu.product"] == "H100"
    assert spec.requests[0].at_s == 5400.0 and spec.requests[0].nodes == 2


@pytest.mark.parametrize(
    ("spec", "field", "value"),
    [
        ({"gpuQuota": 0}, "spec.gpuQuota", 0),
        ({"gpuQuota": "64"}, "spec.gpuQuota", "64"),
        ({"provisioningDelay": "soon"}, "spec.provisioningDelay.fixed", "soon"),
        (
            {"provisioningDelay": {"uniform": {"min": "10m", "max": "5m"}}},
            "spec.provisioningDelay.uniform.max",
            "5m",
        ),
        (
            {"provisioningDelay": {"fixed": "1m", "uniform": {"min": "1m", "max": "2m"}}},
            "spec.provisioningDelay",
            None,
        ),
        ({"queueTimeout": 0}, "spec.queueTimeout", 0),
        ({"stockouts": {"ratePerHour": -1, "duration": "1h"}}, "spec.stockouts.ratePerHour", -1),
        ({"nodePools": []}, "spec.nodePools", []),
        ({"nodePools": pools(zones=["a", "a"])}, "spec.nodePools[0].zones", ["a", "a"]),
        ({"nodePools": pools(name="H100")}, "spec.nodePools[0].name", "H100"),
        ({"nodePools": pools(cpu="64x")}, "spec.nodePools[0].cpu", "64x"),
        ({"nodePools": pools(cpu=0)}, "spec.nodePools[0].cpu", 0),
        ({"nodePools": pools(count=3)}, "spec.nodePools[0].count", 3),
        ({"nodePools": pools() + pools()}, "spec.nodePools[1].name", "h100"),
        (
            {"requests": [{"name": "r", "at": "1h", "pool": "l4", "nodes": 1}]},
            "spec.requests[0].pool",
            "l4",
        ),
        (
            {"requests": [{"name": "r", "at": "1h", "pool": "h100", "nodes": 1}] * 2},
            "spec.requests[1].name",
            "r",
        ),
    ],
)
def test_a_bad_cloud_names_the_field_value_and_rule(
    spec: dict[str, object], field: str, value: object
) -> None:
    with pytest.raises(ConfigError) as info:
        parse_cloud(cloud(**spec))
    exc = info.value
    assert exc.field == field
    if value is not None:
        assert exc.value == value
    assert exc.rule and exc.document == ("Cloud", "c")
    assert str(exc).startswith(f"cloud.yaml: document 1 (Cloud c): {field}")


def test_a_missing_field_says_what_it_is_for() -> None:
    no_zones = pools()
    del no_zones[0]["maxNodesPerZone"]
    with pytest.raises(ConfigError) as info:
        parse_cloud(cloud(nodePools=no_zones))
    assert str(info.value).endswith(
        "spec.nodePools[0].maxNodesPerZone: missing: how many nodes a zone can hold"
    )
    assert info.value.field == "spec.nodePools[0].maxNodesPerZone"
