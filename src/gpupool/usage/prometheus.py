"""Reading measured GPU use from Prometheus's HTTP API.

One instant query per read, ``GET /api/v1/query``, with a range selector over the metrics
gpupool uses (``{__name__=~"DCGM_FI_DEV_GPU_UTIL|..."}[60s]``): Prometheus answers with a
matrix holding every raw sample of the window, for every card, so a read costs one request
whatever the number of nodes and pods, and the load model computes its own aggregate.

Series are matched to cards by the card's UUID where the cluster knows it (HAMi's register
annotation and the virtual cluster carry UUIDs), else by host name and card index
(``Hostname``, or ``hostname`` as newer exporters write it, and ``gpu``). On MIG cards
``DCGM_FI_DEV_GPU_UTIL`` reads 0; the card's compute then comes from
``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` of its instances (``GPU_I_ID``), each weighted by its share of
the card's slices (``GPU_I_PROFILE`` ``3g.40gb``: 3 of 7). Cards that only HAMi's monitor
reports take the sum over their containers: ``hami_container_device_utilization_ratio``
(0..100) and ``hami_vgpu_memory_used_bytes`` (bytes), by ``namespace``, ``pod``,
``container``, ``vdevice_index`` and ``device_uuid``; or, from HAMi's monitor before its
metrics took the ``hami_`` prefix, ``Device_utilization_desc_of_container`` and
``vGPU_device_memory_usage_in_bytes`` by ``podnamespace``, ``podname``, ``ctrname``,
``vdeviceid`` and ``deviceuuid`` (cut to 40 characters, as the monitor writes it). Metric
and label names are settings; so is the whole query.

Failures (connection, timeout, an HTTP error, ``status: error``, a body that is not the
documented JSON) raise :class:`~gpupool.core.errors.AdapterError`, with the cause chained.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from gpupool.core.errors import AdapterError, ConfigError
from gpupool.core.model import NodeName
from gpupool.core.usage import CardSample

Resolve = Callable[[str, str, str], tuple[NodeName, int] | None]
"""(host name, card index label, UUID) -> (node, card index), or None for a card not ours."""

_MIG_SLICES = re.compile(r"^(\d+)g\.")
_LABEL = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
A100_SLICES = 7


@dataclass(frozen=True, slots=True)
class PrometheusSettings:
    url: str
    lookback_s: float = 60.0
    """How far back one read reaches; reads more often than this see each sample again (the
    model ignores repeats)."""
    timeout_s: float = 5.0
    util_metric: str = "DCGM_FI_DEV_GPU_UTIL"
    engine_metric: str = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
    used_metric: str = "DCGM_FI_DEV_FB_USED"
    free_metric: str = "DCGM_FI_DEV_FB_FREE"
    hami_util_metric: str = "hami_container_device_utilization_ratio"
    hami_memory_metric: str = "hami_vgpu_memory_used_bytes"
    hostname_labels: tuple[str, ...] = ("Hostname", "hostname")
    gpu_label: str = "gpu"
    uuid_label: str = "UUID"
    instance_label: str = "GPU_I_ID"
    profile_label: str = "GPU_I_PROFILE"
    hami_uuid_label: str = "device_uuid"
    hami_legacy_util_metric: str = "Device_utilization_desc_of_container"
    """HAMi's monitor before its metrics took the ``hami_`` prefix: the same per-container
    reading, labelled ``podnamespace``, ``podname``, ``ctrname``, ``vdeviceid``,
    ``deviceuuid``."""
    hami_legacy_memory_metric: str = "vGPU_device_memory_usage_in_bytes"
    hami_legacy_uuid_label: str = "deviceuuid"
    hami_pod_labels: tuple[str, str] = ("namespace", "pod")
    """The pod of a HAMi container series (namespace, name): each pod's own use of its card
    teaches its workload (:func:`to_pod_samples`)."""
    hami_legacy_pod_labels: tuple[str, str] = ("podnamespace", "podname")
    query: str = ""
    """The whole query; empty: built from the metric names and ``lookback_s``."""

    def validate(self) -> PrometheusSettings:
        if not re.match(r"^https?://[^\s/]+", self.url or ""):
            raise ConfigError(f"prometheus url={self.url!r} must be an http:// or https:// URL")
        for name in ("lookback_s", "timeout_s"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise ConfigError(f"prometheus {name}={value!r} must be a number above 0")
        for name in (
            "util_metric",
            "engine_metric",
            "used_metric",
            "free_metric",
            "hami_util_metric",
            "hami_memory_metric",
            "gpu_label",
            "uuid_label",
            "hami_uuid_label",
            "hami_legacy_util_metric",
            "hami_legacy_memory_metric",
            "hami_legacy_uuid_label",
        ):
            value = getattr(self, name)
            if not re.match(r"^[A-Za-z_:][A-Za-z0-9_:]*$", value):
                raise ConfigError(f"prometheus {name}={value!r} is not a Prometheus name")
        for name in ("hami_pod_labels", "hami_legacy_pod_labels"):
            value = getattr(self, name)
            if not (
                isinstance(value, tuple)
                and len(value) == 2
                and all(isinstance(v, str) and _LABEL.match(v) for v in value)
            ):
                raise ConfigError(
                    f"prometheus {name}={value!r} must be two label names (namespace, pod)"
                )
        if not self.hostname_labels:
            raise ConfigError("prometheus hostname_labels must name at least one label")
        return self

    def build_query(self) -> str:
        if self.query:
            return self.query
        names = "|".join(
            (
                self.util_metric,
                self.engine_metric,
                self.used_metric,
                self.free_metric,
                self.hami_util_metric,
                self.hami_memory_metric,
                self.hami_legacy_util_metric,
                self.hami_legacy_memory_metric,
            )
        )
        return f'{{__name__=~"{names}"}}[{math.ceil(self.lookback_s)}s]'


class PrometheusReader:
    """Reads card samples from Prometheus; one HTTP request per :meth:`read`."""

    def __init__(self, settings: PrometheusSettings, client: httpx.Client | None = None) -> None:
        self.settings = settings.validate()
        self._client = client or httpx.Client(timeout=settings.timeout_s)
        self.requests = 0

    def close(self) -> None:
        self._client.close()

    def fetch(self) -> list[dict[str, Any]]:
        """The raw matrix of the query: ``[{"metric": {...}, "values": [[t, "v"], ...]}]``."""
        url = self.settings.url.rstrip("/") + "/api/v1/query"
        self.requests += 1
        try:
            resp = self._client.get(url, params={"query": self.settings.build_query()})
        except httpx.HTTPError as exc:
            raise AdapterError(
                f"Prometheus at {self.settings.url} unreachable: {type(exc).__name__}: {exc}"
            ) from exc
        try:
            body = resp.json()
        except ValueError as exc:
            raise AdapterError(
                f"Prometheus at {self.settings.url}: HTTP {resp.status_code}, "
                "a body that is not JSON"
            ) from exc
        if resp.status_code != 200 or not isinstance(body, dict) or body.get("status") != "success":
            detail = body.get("error", "") if isinstance(body, dict) else ""
            raise AdapterError(
                f"Prometheus at {self.settings.url}: HTTP {resp.status_code}"
                f"{': ' + str(detail) if detail else ''}"
            )
        data = body.get("data") or {}
        kind = data.get("resultType")
        result = data.get("result")
        if not isinstance(result, list):
            raise AdapterError(f"Prometheus at {self.settings.url}: no result list in the answer")
        if kind == "vector":  # a custom query without a range: one sample per series
            return [
                {"metric": r.get("metric", {}), "values": [r.get("value")]}
                for r in result
                if isinstance(r, dict) and r.get("value")
            ]
        if kind != "matrix":
            raise AdapterError(
                f"Prometheus at {self.settings.url}: resultType {kind!r}, expected matrix or vector"
            )
        return [r for r in result if isinstance(r, dict)]

    def read(self, resolve: Resolve) -> list[CardSample]:
        return to_samples(self.fetch(), self.settings, resolve)

    def read_with_pods(self, resolve: Resolve) -> tuple[list[CardSample], PodRead]:
        """One read's card samples and HAMi's per-pod samples, from one request."""
        series = self.fetch()
        cards = to_samples(series, self.settings, resolve)
        skipped: dict[str, int] = {}
        pods = to_pod_samples(series, self.settings, resolve, skipped)
        return cards, PodRead(pods, skipped)


def to_samples(
    series: Iterable[Mapping[str, Any]], s: PrometheusSettings, resolve: Resolve
) -> list[CardSample]:
    """Card samples from a query's series (times in seconds, as Prometheus stamps them)."""
    # (node, gpu, time) -> field -> value; MIG instances and HAMi containers are summed
    util: dict[tuple[NodeName, int, float], float] = {}
    engine: dict[tuple[NodeName, int, float], float] = defaultdict(float)
    used: dict[tuple[NodeName, int, float], float] = defaultdict(float)
    free: dict[tuple[NodeName, int, float], float] = defaultdict(float)
    # HAMi's containers, by metric generation: 0 the ``hami_`` names, 1 the earlier ones
    hami_util: tuple[dict[tuple[NodeName, int, float], float], ...] = (
        defaultdict(float),
        defaultdict(float),
    )
    hami_used: tuple[dict[tuple[NodeName, int, float], float], ...] = (
        defaultdict(float),
        defaultdict(float),
    )
    hami_names = {
        s.hami_util_metric: (0, True),
        s.hami_memory_metric: (0, False),
        s.hami_legacy_util_metric: (1, True),
        s.hami_legacy_memory_metric: (1, False),
    }
    dcgm_cards: set[tuple[NodeName, int]] = set()
    for item in series:
        metric = item.get("metric") or {}
        name = metric.get("__name__", "")
        hami = hami_names.get(name)
        if hami is not None:
            label = s.hami_uuid_label if hami[0] == 0 else s.hami_legacy_uuid_label
            card = resolve("", "", str(metric.get(label, ""))[:40])  # HAMi cuts UUIDs at 40
        else:
            host = next((str(metric[k]) for k in s.hostname_labels if metric.get(k)), "")
            card = resolve(
                host, str(metric.get(s.gpu_label, "")), str(metric.get(s.uuid_label, ""))
            )
        if card is None:
            continue
        weight = _instance_weight(str(metric.get(s.profile_label, "")))
        for point in item.get("values") or ():
            try:
                t, v = float(point[0]), float(point[1])
            except (TypeError, ValueError, IndexError):
                continue
            if not math.isfinite(v):
                continue
            key = (card[0], card[1], t)
            if name == s.util_metric:
                util[key] = max(util.get(key, 0.0), v)
                dcgm_cards.add(card)
            elif name == s.engine_metric:
                engine[key] += v * 100.0 * weight
                dcgm_cards.add(card)
            elif name == s.used_metric:
                used[key] += v
                dcgm_cards.add(card)
            elif name == s.free_metric:
                free[key] += v
            elif hami is not None and hami[1]:
                hami_util[hami[0]][key] += v
            elif hami is not None:
                hami_used[hami[0]][key] += v / 1048576.0
    out: list[CardSample] = []
    keys = set(util) | set(engine) | set(used)
    for key in keys:
        node, gpu, t = key
        u = max(util.get(key, 0.0), min(100.0, engine.get(key, 0.0)))
        out.append(
            CardSample(
                node,
                gpu,
                t,
                min(100.0, u),
                int(used[key]) if key in used else None,
                int(free[key]) if key in free else None,
            )
        )
    # A monitor between the two generations may serve both: the newer names win per card.
    newer = {(k[0], k[1]) for k in (*hami_util[0], *hami_used[0])}
    for gen in (0, 1):
        h_util, h_used = hami_util[gen], hami_used[gen]
        for key in set(h_util) | set(h_used):
            if (key[0], key[1]) in dcgm_cards or (gen and (key[0], key[1]) in newer):
                continue  # DCGM's whole-card reading wins over the containers' sum
            out.append(
                CardSample(
                    key[0],
                    key[1],
                    key[2],
                    min(100.0, h_util[key]) if key in h_util else None,
                    int(h_used[key]) if key in h_used else None,
                    None,
                )
            )
    out.sort(key=lambda c: (c.time_s, c.node, c.gpu))
    return out


@dataclass(frozen=True, slots=True)
class PodSample:
    """One pod's own use of one card (HAMi's container series of the pod, summed): compute,
    percent of the card, and framebuffer held, MiB, each None where the read has no such
    series at that time; ``pod`` is ``namespace/name``."""

    node: NodeName
    gpu: int
    pod: str
    time_s: float
    util_pct: float | None
    used_mib: float | None = None


@dataclass(frozen=True, slots=True)
class PodRead:
    """HAMi's per-pod samples of one read, and the samples left out, by reason:
    ``no-pod-label`` (a series naming no pod), ``bad-value`` (not a number, not finite, or
    below 0). Series of devices not in the inventory are not counted: they are other
    clusters' or not gpupool's to read."""

    samples: list[PodSample]
    skipped: dict[str, int]


_PodKey = tuple[NodeName, int, str, float]


def to_pod_samples(
    series: Iterable[Mapping[str, Any]],
    s: PrometheusSettings,
    resolve: Resolve,
    skipped: dict[str, int] | None = None,
) -> list[PodSample]:
    """Each pod's own compute and memory on each card, from HAMi's per-container series
    (its containers summed; the newer names where a monitor serves both generations).
    Samples left out are counted in ``skipped`` by reason (:class:`PodRead`)."""
    # (generation, 0 compute | 1 memory) -> (node, gpu, pod, time) -> summed value
    sums: dict[tuple[int, int], dict[_PodKey, float]] = {
        (g, f): defaultdict(float) for g in (0, 1) for f in (0, 1)
    }
    left: dict[str, int] = skipped if skipped is not None else {}
    bad: dict[tuple[int, int], set[_PodKey]] = {k: set() for k in sums}
    names = {
        s.hami_util_metric: (0, 0),
        s.hami_memory_metric: (0, 1),
        s.hami_legacy_util_metric: (1, 0),
        s.hami_legacy_memory_metric: (1, 1),
    }
    for item in series:
        metric = item.get("metric") or {}
        which = names.get(metric.get("__name__", ""))
        if which is None:
            continue
        gen = which[0]
        ns_label, pod_label = s.hami_pod_labels if gen == 0 else s.hami_legacy_pod_labels
        uuid_label = s.hami_uuid_label if gen == 0 else s.hami_legacy_uuid_label
        pod = str(metric.get(pod_label, ""))
        card = resolve("", "", str(metric.get(uuid_label, ""))[:40])
        if card is None:
            continue
        points = item.get("values") or ()
        if not pod:
            left["no-pod-label"] = left.get("no-pod-label", 0) + len(points)
            continue
        ns = str(metric.get(ns_label, ""))
        key = f"{ns}/{pod}" if ns else pod
        scale = 1.0 / 1048576.0 if which[1] else 1.0  # memory: bytes -> MiB
        for point in points:
            try:
                t = float(point[0])
            except (TypeError, ValueError, IndexError):
                left["bad-value"] = left.get("bad-value", 0) + 1
                continue
            try:
                v = float(point[1])
            except (TypeError, ValueError, IndexError):
                v = math.nan
            if not (math.isfinite(v) and v >= 0):
                left["bad-value"] = left.get("bad-value", 0) + 1
                bad[which].add((card[0], card[1], key, t))
                continue
            sums[which][(card[0], card[1], key, t)] += v * scale
    for which, got in sums.items():  # a pod's sum with a container unread is not taken
        for k in bad[which] & got.keys():
            del got[k]
    newer = {k[:3] for f in (0, 1) for k in sums[(0, f)]}
    out = []
    for gen in (0, 1):
        util, used = sums[(gen, 0)], sums[(gen, 1)]
        for k in util.keys() | used.keys():
            if gen and k[:3] in newer:
                continue
            u, m = util.get(k), used.get(k)
            out.append(PodSample(k[0], k[1], k[2], k[3], None if u is None else min(100.0, u), m))
    out.sort(key=lambda p: (p.time_s, p.node, p.gpu, p.pod))
    return out


def _instance_weight(profile: str) -> float:
    """A MIG instance's share of its card's compute (``3g.40gb``: 3/7); 1 for a whole card.

    An unknown profile counts as a whole card, so a busy instance is never read as idle."""
    m = _MIG_SLICES.match(profile)
    return int(m.group(1)) / A100_SLICES if m else 1.0


def inventory_resolver(
    cards: Iterable[tuple[NodeName, int, str]], hostnames: Mapping[str, NodeName] | None = None
) -> Resolve:
    """A resolver from (node, card index, UUID) of the inventory: by UUID (or its first 40
    characters, as HAMi's monitor writes it) first, then by host name (a node's name, or
    ``hostnames[host]``) and index."""
    by_uuid: dict[str, tuple[NodeName, int]] = {}
    by_host: dict[tuple[str, int], tuple[NodeName, int]] = {}
    for node, gpu, uuid in cards:
        if uuid:
            by_uuid[uuid] = (node, gpu)
            # HAMi's monitor writes a UUID's first 40 characters (NVIDIA's are 40 long)
            by_uuid.setdefault(uuid[:40], (node, gpu))
        by_host[(str(node), gpu)] = (node, gpu)
    alias = dict(hostnames or {})

    def resolve(host: str, gpu: str, uuid: str) -> tuple[NodeName, int] | None:
        if uuid and uuid in by_uuid:
            return by_uuid[uuid]
        if not host or not gpu.isdigit():
            return None
        return by_host.get((str(alias.get(host, host)), int(gpu)))

    return resolve
