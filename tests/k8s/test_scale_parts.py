"""The scale parts that need no API server: Events correlated as client-go does, watch lines
of any length, and what the slim caches keep of realistic objects."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from gpupool.k8s import slim
from gpupool.k8s.events import COMBINED, EventCorrelator
from gpupool.k8s.kube import KubeError, _lines
from gpupool.k8s.podview import reduce
from gpupool.k8s.replay_objects import realistic_node, realistic_pod
from gpupool.k8s.translate import node_from_k8s

POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns", "uid": "u1"}}


def test_same_event_again_is_a_repeat_of_one_object() -> None:
    c = EventCorrelator("gpupool")
    first = c.correlate(POD, "Warning", "FailedScheduling", "0/3 nodes fit", 0.0)
    assert (first.count, first.name) == (1, "")
    c.created(first.key, "p.1")
    again = c.correlate(POD, "Warning", "FailedScheduling", "0/3 nodes fit", 5.0)
    assert (again.count, again.name, again.first_s) == (2, "p.1", 0.0)
    other = c.correlate(
        {**POD, "metadata": {**POD["metadata"], "uid": "u2"}},
        "Warning",
        "FailedScheduling",
        "0/3 nodes fit",
        6.0,
    )
    assert other.count == 1  # another pod (a new UID) is another event


def test_similar_events_combined_after_ten_messages() -> None:
    c = EventCorrelator("gpupool")
    msgs = [
        c.correlate(POD, "Warning", "FailedScheduling", f"m{i}", float(i)).message
        for i in range(12)
    ]
    assert msgs[:10] == [f"m{i}" for i in range(10)]
    assert msgs[10:] == [COMBINED + "m10", COMBINED + "m11"]
    # a message seen among the first ten stays as it is
    assert c.correlate(POD, "Warning", "FailedScheduling", "m3", 13.0).count == 2
    # after the interval the window starts again
    assert c.correlate(POD, "Warning", "FailedScheduling", "m99", 700.0).message == "m99"


def test_correlator_memory_is_bounded() -> None:
    c = EventCorrelator("gpupool", max_keys=100)
    for i in range(1000):
        c.correlate(
            {**POD, "metadata": {**POD["metadata"], "name": f"p{i}"}},
            "Warning",
            "FailedScheduling",
            "x",
            0.0,
        )
    assert len(c._seen) == 100 and len(c._similar) == 100


class Chunks:
    def __init__(self, data: bytes, size: int) -> None:
        self.parts = [data[i : i + size] for i in range(0, len(data), size)]

    async def iter_any(self) -> AsyncIterator[bytes]:
        for p in self.parts:
            yield p


async def _collect(stream: Any, limit: int = 256 << 20) -> list[bytes]:
    return [line async for line in _lines(stream, limit, "WATCH /x")]


def test_watch_lines_of_five_megabytes() -> None:
    big = json.dumps({"type": "ADDED", "object": {"data": "z" * (5 << 20)}}).encode()
    small = b'{"type": "BOOKMARK"}'
    data = small + b"\n" + big + b"\n\n" + small + b"\r\n" + small
    for size in (1, 7, 65536, 1 << 20):
        if size == 1:  # byte by byte through 5 MB is slow; the short lines only
            lines = asyncio.run(_collect(Chunks(small + b"\n" + small + b"\n", size)))
            assert lines == [small, small]
            continue
        lines = asyncio.run(_collect(Chunks(data, size)))
        assert lines == [small, big, small + b"\r", small]
        assert len(json.loads(lines[1])["object"]["data"]) == 5 << 20


def test_watch_line_over_the_limit_is_an_api_error() -> None:
    with pytest.raises(KubeError, match="longer than 1000 bytes"):
        asyncio.run(_collect(Chunks(b"x" * 5000, 512), limit=1000))


def test_slim_node_keeps_what_gpupool_reads() -> None:
    full = realistic_node(7, gpus=8)
    small = slim.node(json.loads(json.dumps(full)))
    assert node_from_k8s(small) == node_from_k8s(full)
    assert "managedFields" not in small["metadata"]
    assert "images" not in small["status"]
    assert slim.deep_size(small) * 4 < slim.deep_size(full)


def test_slim_pods_keep_what_gpupool_reads() -> None:
    full = realistic_pod(3, node="n1", scheduler="gpupool")
    own = slim.own_pod(json.loads(json.dumps(full)))
    assert "managedFields" not in own["metadata"]
    assert own["spec"]["containers"][0]["resources"] == full["spec"]["containers"][0]["resources"]
    assert set(own["spec"]["containers"][0]) == {"name", "resources"}
    pending = realistic_pod(4, node="", scheduler="gpupool")
    kept = slim.own_pod(json.loads(json.dumps(pending)))
    # a pending pod keeps what its PodTemplate needs
    assert {k: v for k, v in kept["spec"].items() if k != "containers"} == {
        k: v for k, v in pending["spec"].items() if k != "containers"
    }
    main = kept["spec"]["containers"][0]
    assert set(main) == {"name", "image", "resources", "ports"}
    assert slim.deep_size(kept) * 2 < slim.deep_size(pending)
    other = reduce(realistic_pod(5, node="n1", scheduler="default-scheduler"))
    assert slim.deep_size(other) * 10 < slim.deep_size(full)
    assert slim.deep_size(own) * 4 < slim.deep_size(full)


def test_managed_fields_cut_before_parsing() -> None:
    pods = [realistic_pod(i, node="n1" if i % 2 else "", scheduler="gpupool") for i in range(5)]
    pods[2]["metadata"]["managedFields"][0]["manager"] = ']},"spec": inside a string'
    raw = json.dumps({"kind": "PodList", "items": pods}, separators=(",", ":")).encode()
    cut = slim.drop_managed_fields(raw)
    assert len(cut) < len(raw) * 0.8
    parsed = json.loads(cut)["items"]
    for before, after in zip(pods, parsed, strict=True):
        assert "managedFields" not in after["metadata"]
        expected = json.loads(json.dumps(before))
        del expected["metadata"]["managedFields"]
        assert after == expected
    # an object whose metadata is not followed by a spec keeps its field (stripped later)
    cm = {
        "kind": "ConfigMap",
        "metadata": {"name": "c", "managedFields": [{"manager": "m"}]},
        "data": {"a": ']},"spec":'},
    }
    text = json.dumps({"items": [cm, pods[0]]}, separators=(",", ":")).encode()
    items = json.loads(slim.drop_managed_fields(text))["items"]
    assert items[0] == cm
    assert "managedFields" not in items[1]["metadata"]


def test_lazy_projection_gives_what_the_full_parse_gives() -> None:
    """A page parsed lazily to each pod's shape, then transformed, equals the page parsed
    whole, then transformed: the shapes keep every field the transforms read."""
    from gpupool.k8s import projection

    if not projection.available():
        pytest.skip("simdjson is not installed")
    pods = [
        realistic_pod(i, node="n1" if i % 3 else "", scheduler=s)
        for i, s in enumerate(["gpupool", "default-scheduler", "gpupool"] * 3)
    ]
    pods[1]["spec"]["affinity"] = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [{"topologyKey": "zone"}]
        }
    }
    pods[1]["spec"]["initContainers"] = [{"name": "i", "resources": {"requests": {"cpu": "8"}}}]
    watched = frozenset({"gpupool"})

    def transform(pod: dict[str, Any]) -> dict[str, Any]:
        own = (pod.get("spec") or {}).get("schedulerName") in watched
        return slim.own_pod(pod) if own else reduce(pod)

    raw = json.dumps(
        {"kind": "PodList", "metadata": {"resourceVersion": "7", "continue": "c"}, "items": pods}
    ).encode()
    parsed = list(projection.items(raw, projection.pod_shape(watched)))
    assert parsed[0] == ("PodList", "7", "c")
    lazy = [transform(p) for p in parsed[1:]]  # type: ignore[arg-type]
    whole = [transform(json.loads(json.dumps(p))) for p in pods]
    assert lazy == whole
    nodes = [realistic_node(i) for i in range(3)]
    raw = json.dumps({"kind": "NodeList", "items": nodes}).encode()
    got = list(projection.items(raw, lambda _: projection.NODE))[1:]
    assert [slim.node(n) for n in got] == [
        slim.node(json.loads(json.dumps(n)))  # type: ignore[arg-type]
        for n in nodes
    ]


def test_lazy_watch_events_keep_errors_whole() -> None:
    from gpupool.k8s import projection

    if not projection.available():
        pytest.skip("simdjson is not installed")
    shape = projection.pod_shape(frozenset({"gpupool"}))
    pod = realistic_pod(1, node="", scheduler="gpupool")
    ev = projection.event(json.dumps({"type": "MODIFIED", "object": pod}).encode(), shape)
    assert ev["type"] == "MODIFIED" and slim.own_pod(ev["object"]) == slim.own_pod(
        json.loads(json.dumps(pod))
    )
    gone = {
        "type": "ERROR",
        "object": {
            "kind": "Status",
            "code": 410,
            "reason": "Expired",
            "message": "too old resource version: 1",
        },
    }
    assert projection.event(json.dumps(gone).encode(), shape) == gone
