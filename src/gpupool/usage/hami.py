"""The virtual cluster's HAMi monitor: what each pod does with its share of a card, in the
format of HAMi's vGPU monitor.

On a real node HAMi's ``vGPUmonitor`` (``cmd/vGPUmonitor/metrics.go``) serves ``/metrics``
(port 9394) with one series per container and device it allocated, read from HAMi-core's
shared region in the container. Since HAMi 2.9 the names carry the ``hami_`` prefix, every
one a gauge labelled ``namespace``, ``pod``, ``container``, ``vdevice_index`` (the device's
place in the container's list) and ``device_uuid`` (the card's UUID, cut to 40 characters),
plus ``zone="vGPU"`` (the monitor registers its collector under that constant label):

* ``hami_container_device_utilization_ratio``: SM utilisation, 0..100 (HAMi-core sums
  NVML's per-process samples of the container's processes; an integer);
* ``hami_vgpu_memory_used_bytes`` and ``hami_container_device_memory_bytes``: framebuffer the
  container holds on the card, bytes (the same value under two names; written with 2.10's
  labels: 2.9 also put ``context_size``, ``module_size``, ``buffer_size`` and ``offset`` on
  the second);
* ``hami_vgpu_memory_limit_bytes``: the container's memory limit on the card, bytes.

Before 2.9 the monitor wrote only the older names, and since then it writes them beside the
newer ones with ``--legacy-metrics``:
``Device_utilization_desc_of_container``, ``vGPU_device_memory_usage_in_bytes``,
``vGPU_device_memory_limit_in_bytes``, labelled ``podnamespace``, ``podname``, ``ctrname``,
``vdeviceid``, ``deviceuuid`` (and ``zone``). The monitor's other series (context, module
and buffer sizes, seconds since the last kernel, MIG identity, the host's whole-card series)
are not written: nothing in a virtual card gives them a meaning, and gpupool does not read
them.

The text is written as Prometheus's Go client writes it: families sorted by name, labels by
name, values in Go's shortest ``%g`` form (``1.073741824e+09``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from gpupool.usage.exposition import escape_label, go_float

ZONE = "vGPU"
"""The constant ``zone`` label HAMi's monitor adds to every series it writes."""
UUID_CHARS = 40
"""HAMi's monitor cuts each device's UUID to its first 40 characters."""


@dataclass(frozen=True, slots=True)
class ContainerMetrics:
    """One container's use of one card, as HAMi-core accounts it."""

    namespace: str
    pod: str
    container: str
    vdevice_index: int
    device_uuid: str
    util_pct: int
    """SM utilisation of the card by the container's processes, 0..100."""
    memory_used_bytes: int
    memory_limit_bytes: int


# (name, help, value) of the ``hami_`` families and of the older ones, as the monitor has them
_Value = Callable[[ContainerMetrics], float]
_NEW: tuple[tuple[str, str, _Value], ...] = (
    (
        "hami_container_device_memory_bytes",
        "Container device memory usage in bytes",
        lambda c: c.memory_used_bytes,
    ),
    (
        "hami_container_device_utilization_ratio",
        "Container device SM utilization ratio",
        lambda c: c.util_pct,
    ),
    (
        "hami_vgpu_memory_limit_bytes",
        "vGPU device memory limit in bytes",
        lambda c: c.memory_limit_bytes,
    ),
    (
        "hami_vgpu_memory_used_bytes",
        "vGPU device memory usage in bytes",
        lambda c: c.memory_used_bytes,
    ),
)
_LEGACY: tuple[tuple[str, str, _Value], ...] = (
    (
        "Device_utilization_desc_of_container",
        "Container device utilization description",
        lambda c: c.util_pct,
    ),
    ("vGPU_device_memory_limit_in_bytes", "vGPU device limit", lambda c: c.memory_limit_bytes),
    ("vGPU_device_memory_usage_in_bytes", "vGPU device usage", lambda c: c.memory_used_bytes),
)
NEW_LABELS = ("namespace", "pod", "container", "vdevice_index", "device_uuid")
LEGACY_LABELS = ("podnamespace", "podname", "ctrname", "vdeviceid", "deviceuuid")
"""The labels of each generation, in HAMi's order (the text has them sorted by name)."""


NAMES = ("current", "both", "legacy")
"""Which names a monitor writes: ``current`` (HAMi 2.9 on), ``both`` (2.9 on with
``--legacy-metrics``), ``legacy`` (before 2.9)."""


def render(containers: Iterable[ContainerMetrics], names: str = "current") -> str:
    """The exposition text of one node's monitor, with the names of ``names`` (:data:`NAMES`)."""
    if names not in NAMES:
        raise ValueError(f"names={names!r} must be one of {', '.join(NAMES)}")
    rows = list(containers)
    families: list[tuple[tuple[str, str, _Value], tuple[str, ...]]] = []
    if names != "legacy":
        families += [(f, NEW_LABELS) for f in _NEW]
    if names != "current":
        families += [(f, LEGACY_LABELS) for f in _LEGACY]
    lines: list[str] = []
    for (name, help_text, value), label_names in sorted(families, key=lambda f: f[0][0]):
        series = []
        for c in rows:
            values = (
                c.namespace,
                c.pod,
                c.container,
                str(c.vdevice_index),
                c.device_uuid[:UUID_CHARS],
            )
            labels = sorted((*zip(label_names, values, strict=True), ("zone", ZONE)))
            series.append((labels, go_float(float(value(c)))))
        if not series:
            continue  # the Go client writes no family without a series
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} gauge")
        for labels, text in sorted(series):
            pairs = ",".join(f'{k}="{escape_label(v)}"' for k, v in labels)
            lines.append(f"{name}{{{pairs}}} {text}")
    return "\n".join(lines) + "\n" if lines else ""
