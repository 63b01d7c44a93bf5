"""HAMi's card modes beside MIG (``pkg/device/nvidia``, v2.10): a card registered in ``mps``
mode is counted and served as a ``hami-core`` one, and ``nvidia.com/vgpu-mode`` keeps a pod to
the cards whose mode it names (``checkType``: ``strings.Contains(annotation, card.Mode)``)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from gpupool.core.errors import InvalidJobError
from gpupool.k8s.controller import Controller, Options
from gpupool.k8s.hami.modes import mode_request
from gpupool.k8s.translate import pod_request
from tests.k8s.kit import hami_node_object, pod_body, register_json
from tests.k8s.test_controller_fake import FakeKube, default_config

MODES = ["hami-core", "mps", "hami-core", "mps"]  # cards 0..3 of node n1


def node_obj(name: str, modes: list[str]) -> dict[str, Any]:
    devices = json.loads(register_json(name, len(modes), "A100", 40960))
    for d, m in zip(devices, modes, strict=True):
        d["mode"] = m
    return hami_node_object(name, json.dumps(devices), 40)


def slice_pod(name: str, mode: str | None) -> dict[str, Any]:
    pod = pod_body(name, ns="team-a", limits={"nvidia.com/gpu": 1, "nvidia.com/gpumem": 30000})
    pod["metadata"]["resourceVersion"] = "1"
    if mode is not None:
        pod["metadata"].setdefault("annotations", {})["nvidia.com/vgpu-mode"] = mode
    return pod


def placed(pods: list[dict[str, Any]]) -> dict[str, int | None]:
    """Pod name -> the card index it was given (None: waiting), one cycle after another."""

    async def body() -> dict[str, int | None]:
        ctl = Controller(FakeKube(), default_config(), Options(leader_elect=False))  # type: ignore[arg-type]
        ctl.node_informer.cache["n1"] = node_obj("n1", MODES)
        ctl.rebuild()
        for pod in pods:
            key = f"team-a/{pod['metadata']['name']}"
            ctl.pod_informer.cache[key] = pod
            ctl._on_pod("ADDED", pod, None)
            ctl.cycle()
            await asyncio.sleep(0)
        got = ctl.allocations()
        return {
            p["metadata"]["name"]: (
                got[k][1][0][0] if (k := f"team-a/{p['metadata']['name']}") in got else None
            )
            for p in pods
        }

    return asyncio.run(body())


def test_hami_core_pods_never_take_mps_cards() -> None:
    """Without the fix the third and fourth 30 GB slices went onto the mps cards."""
    got = placed([slice_pod(f"c{i}", "hami-core") for i in range(4)])
    assert sorted(i for i in got.values() if i is not None) == [0, 2]
    assert got["c2"] is None and got["c3"] is None  # wait: only two hami-core cards


def test_mps_pods_take_only_mps_cards_and_unannotated_pods_any() -> None:
    got = placed([slice_pod("m0", "mps"), slice_pod("m1", "mps"), slice_pod("m2", "mps")])
    assert {got["m0"], got["m1"]} == {1, 3} and got["m2"] is None
    got = placed([slice_pod(f"a{i}", None) for i in range(4)])
    assert sorted(i for i in got.values() if i is not None) == [0, 1, 2, 3]


def test_a_mode_no_card_has_is_refused_naming_the_annotation() -> None:
    pod = slice_pod("x", "mps")
    with pytest.raises(InvalidJobError) as err:
        mode_request(pod_request(pod), pod["metadata"]["annotations"], {})
    assert "nvidia.com/vgpu-mode" in str(err.value) and "'mps'" in str(err.value)
    # both modes named: the hami-core cards and the mps ones
    both = slice_pod("y", "hami-core,mps")
    req = mode_request(pod_request(both), both["metadata"]["annotations"], {"GPU-1": "mps"})
    assert not req.gpu.excluded_uuids and not req.gpu.uuids
