"""A scenario job's alternatives: other accelerators it may run on (``core/alternatives.py``).

::

    - name: train
      poisson: {ratePerHour: 30}
      gpus: 1
      models: [H100-80GB]
      duration: 30m
      alternatives:
      - {name: ascend, gpus: 2, models: [Ascend910B3], image: train:cann8}
      - {name: dcu, gpus: 2, models: [K100], env: {HIP_VISIBLE_DEVICES: auto}}

Each alternative gives whole cards (``gpus``) or a slice (``gpuMilli`` and/or ``gpuMemory``),
the models it runs on, and optionally the container image and environment of that form.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpupool.config.fields import Where
from gpupool.config.fields import int_at as _int
from gpupool.config.fields import known_fields as _known
from gpupool.config.fields import mapping_at as _mapping
from gpupool.config.quantity import gpu_memory_mib
from gpupool.core.errors import ConfigError
from gpupool.core.model import WHOLE_GPU_MILLI, Alternative, GpuRequest

_FIELDS = ("name", "gpus", "gpuMilli", "gpuMemory", "models", "image", "env")


def parse_alternatives(w: Where, path: str, value: object) -> tuple[Alternative, ...]:
    if not isinstance(value, list):
        raise w.fail(path, f"expected a list of alternatives, found {value!r}")
    out: list[Alternative] = []
    for i, item in enumerate(value):
        out.append(_alternative(w, f"{path}[{i}]", _mapping(w, f"{path}[{i}]", item),
                                {a.name for a in out}))
    return tuple(out)


def _alternative(w: Where, at: str, body: Mapping[str, Any], taken: set[str]) -> Alternative:
    _known(w, at, body, _FIELDS)
    name = body.get("name")
    if not isinstance(name, str) or not name:
        raise w.fail(f"{at}.name", f"{name!r}: each alternative needs a name")
    if name in taken:
        raise w.fail(f"{at}.name", f"{name!r} is used by another alternative")
    models = body.get("models", [])
    if isinstance(models, str):
        models = [models]
    if not isinstance(models, list) or not all(isinstance(m, str) for m in models):
        raise w.fail(f"{at}.models", f"{models!r} is not a list of GPU model names")
    if "gpus" in body:
        if "gpuMilli" in body or "gpuMemory" in body:
            raise w.fail(f"{at}.gpus", "give either gpus (whole cards) or gpuMilli and "
                                       "gpuMemory (a slice of one card), not both")
        gpu = GpuRequest(count=_int(w, f"{at}.gpus", body["gpus"], 1),
                         models=frozenset(models))
    else:
        milli = _int(w, f"{at}.gpuMilli", body["gpuMilli"], 1) if "gpuMilli" in body else 0
        if milli >= WHOLE_GPU_MILLI:
            raise w.fail(f"{at}.gpuMilli", f"{milli}: a slice is 1..999 milli of one GPU; "
                                           "ask for whole cards with gpus")
        mib = 0
        if "gpuMemory" in body:
            try:
                mib = gpu_memory_mib(body["gpuMemory"], "")
            except ConfigError as exc:
                raise w.fail(f"{at}.gpuMemory", str(exc).removeprefix("=")) from None
        if not milli and not mib:
            raise w.fail(at, "asks for no GPU: give gpus, or gpuMilli and gpuMemory")
        gpu = GpuRequest(gpu_milli=milli, memory_mib=mib, models=frozenset(models))
    image = body.get("image", "")
    if not isinstance(image, str):
        raise w.fail(f"{at}.image", f"{image!r} is not an image name")
    env = _mapping(w, f"{at}.env", body.get("env", {}))
    if not all(isinstance(k, str) and k and isinstance(v, str) for k, v in env.items()):
        raise w.fail(f"{at}.env", f"{dict(env)!r}: names and values must be strings")
    return Alternative(name, gpu, image, dict(env))
