"""Accelerator containers from HAMi's own documented examples, for the alternatives
(``gpupool.io/alternatives``) and pods the tests write: each keeps the example's resource
limits and image exactly as HAMi's repository has them (``examples/<vendor>/...`` at commit
``4707fb02c91c545bc7343ce26dba4c32919f9a3e``), so a test's vendor form is one HAMi documents,
not one made up here. ``env`` is gpupool's own field of an alternative (HAMi's examples set
none), so a test adds it where it checks it."""

from __future__ import annotations

from typing import Any

from gpupool.config.quantity import parse_quantity

__all__ = [
    "ASCEND_910B3",
    "ENFLAME_DRS_3G",
    "HYGON_DEFAULT",
    "NVIDIA_DEFAULT",
    "alternative",
    "same_limits",
]

HYGON_DEFAULT: dict[str, Any] = {  # examples/hygon/default_use.yaml, pod vdcu-pytorch-demo
    "image": "image.sourcefind.cn:5000/dcu/admin/base/pytorch:2.1.0-ubuntu22.04-dtk24.04.2-py3.10",
    "limits": {"hygon.com/dcunum": "1", "hygon.com/dcucores": "60", "hygon.com/dcumem": "2000"},
}
ASCEND_910B3: dict[str, Any] = {  # examples/ascend/job-910B3.yaml, pod ascend910b3-job
    "image": "ascendhub.huawei.com/public-ascendhub/ascend-mindspore:23.0.RC3-centos7",
    "limits": {"huawei.com/Ascend910B3": "1", "huawei.com/Ascend910B3-memory": "2000"},
}
NVIDIA_DEFAULT: dict[str, Any] = {  # examples/nvidia/default_use.yaml, pod gpu-pod
    "image": "ubuntu:22.04",
    "limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3000", "nvidia.com/gpucores": "30"},
}
ENFLAME_DRS_3G: dict[str, Any] = {  # examples/enflame/vgcu_use.yaml, pod vgcu-pod-2
    "image": "ubuntu:18.04",
    "limits": {"enflame.com/drs-gcu": "3"},
}


def alternative(
    name: str, example: dict[str, Any], env: dict[str, str] | None = None
) -> dict[str, Any]:
    """One entry of ``gpupool.io/alternatives``: the example's limits and image."""
    out: dict[str, Any] = {
        "name": name,
        "limits": dict(example["limits"]),
        "image": example["image"],
    }
    if env:
        out["env"] = env
    return out


def same_limits(stored: dict[str, Any], example: dict[str, str]) -> bool:
    """Whether a stored container's limits hold the example's (as quantities: the API server
    writes 2000 as ``2k``)."""
    return all(
        k in stored and parse_quantity(stored[k], k) == parse_quantity(v, k)
        for k, v in example.items()
    )
