"""MeasuredUse: a load model fed from Prometheus, and its ``gpupool_measured_*`` metrics.

An adapter that places by measured use owns one: ``gpupool k8s --prometheus URL`` reads it
in a worker thread and hands the samples to the model on its event loop; ``gpupool serve
--prometheus URL`` reads it in a thread of its own and hands them over under the plane's
lock. A read that
fails never fails a cycle: the model is told (``LoadModel.failed``), every card falls back to
requests with the failure as its reason, the error counter moves, and the next read that
succeeds clears it. A source that answers but has no fresh samples for a card is handled by
the model's staleness limit in the same way, card by card.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from gpupool.core.errors import AdapterError
from gpupool.core.model import NodeName, TaskId
from gpupool.core.table import NodeTable
from gpupool.core.usage import CardSample, LoadModel, LoadSettings, TaskSample
from gpupool.usage.prometheus import PodRead, PodSample, PrometheusReader, Resolve

log = logging.getLogger("gpupool.usage")


@dataclass(frozen=True, slots=True)
class PodTasks:
    """What an adapter knows of its pods: the task of each (``namespace/name``), and the pods
    holding a slice now (None: not said)."""

    task_of: Callable[[str], TaskId | None]
    held: Collection[str] | None = None


class MeasuredUse:
    def __init__(
        self,
        reader: PrometheusReader,
        settings: LoadSettings | None = None,
        interval_s: float = 15.0,
    ) -> None:
        self.reader = reader
        self.model = LoadModel(settings)
        self.interval_s = interval_s
        self.reads_ok = 0
        self.reads_failed = 0
        self.last_error = ""
        self._next_s = float("-inf")
        self.pod_series: dict[str, int] = {}
        """The last read's per-pod series by outcome: ``own`` (pods the adapter knows, each a
        reading for its workload), ``card`` (slice pods with no series of their own),
        ``unknown-pod``, and the samples the reader skipped (``bad-value``, ...)."""
        self.pods_reason = ""
        """Why some pods learn from their cards' readings only ("" when none do)."""

    def due(self, now_s: float) -> bool:
        return now_s >= self._next_s

    def poll(
        self, resolve: Resolve, now_s: float, to_model_time: Callable[[float], float] | None = None
    ) -> int:
        """Read once; returns the new samples, or -1 when the read failed (the model then
        places by requests, saying why). ``to_model_time`` maps Prometheus's timestamps
        (Unix seconds) onto the model's clock when they differ (``serve``'s cluster time)."""
        self._next_s = now_s + self.interval_s
        try:
            samples = self.reader.read(resolve)
        except AdapterError as exc:
            self.failed(exc)
            return -1
        return self.take(samples, now_s, to_model_time)

    def failed(self, exc: AdapterError) -> None:
        """A read failed: every card places by requests, saying why, until one succeeds."""
        self.reads_failed += 1
        if str(exc) != self.last_error:
            log.warning("measured use: %s; placing by requests until a read succeeds", exc)
        self.last_error = str(exc)
        self.model.failed(str(exc))

    def take(
        self,
        samples: Iterable[CardSample],
        now_s: float,
        to_model_time: Callable[[float], float] | None = None,
        pods: Iterable[PodSample] | PodRead = (),
        task_of: Callable[[str], TaskId | None] | PodTasks | None = None,
    ) -> int:
        """A successful read's samples (read elsewhere, e.g. in a worker thread). ``pods``:
        HAMi's per-pod samples (with what the reader skipped, when a :class:`PodRead`),
        each a reading for its task's workload where ``task_of`` knows the pod
        (``namespace/name``); taken before the card samples, so a card's reading does not
        teach a pod that has a series of its own. A :class:`PodTasks` also names the pods
        holding a slice now, so those without a series of their own are counted
        (:attr:`pods_reason`)."""
        if task_of is not None:
            tasks = task_of if isinstance(task_of, PodTasks) else PodTasks(task_of)
            read = pods if isinstance(pods, PodRead) else PodRead(list(pods), {})
            own = []
            known: set[str] = set()
            unknown: set[str] = set()
            for p in read.samples:
                task = tasks.task_of(p.pod)
                if task is None:
                    unknown.add(p.pod)
                    continue
                known.add(p.pod)
                t = to_model_time(p.time_s) if to_model_time is not None else p.time_s
                own.append(TaskSample(p.node, p.gpu, task, t, p.util_pct, p.used_mib))
            self.model.add_tasks(own)
            self._pods_read(known, unknown, read.skipped, tasks.held)
        self.reads_ok += 1
        self.last_error = ""
        self._next_s = max(self._next_s, now_s + self.interval_s)
        if to_model_time is not None:
            samples = [
                CardSample(
                    s.node, s.gpu, to_model_time(s.time_s), s.util_pct, s.used_mib, s.free_mib
                )
                for s in samples
            ]
        return self.model.add(samples, now_s=now_s)

    def _pods_read(
        self,
        known: set[str],
        unknown: set[str],
        skipped: Mapping[str, int],
        held: Collection[str] | None,
    ) -> None:
        """What the last read said of each pod: :attr:`pod_series` and :attr:`pods_reason`.
        A pod without a series of its own is never an error: its workload learns from the
        cards it holds alone, as without HAMi's monitor."""
        counts = {"own": len(known), "unknown-pod": len(unknown)}
        notes = []
        if held is not None:
            missing = sorted(set(held) - known)
            counts["card"] = len(missing)
            if missing:
                shown = ", ".join(missing[:3]) + (", ..." if len(missing) > 3 else "")
                notes.append(
                    f"{len(missing)} of {len(held)} slice pods have no per-pod series "
                    f"({self.reader.settings.hami_util_metric}) in the last read ({shown}): "
                    "their workloads learn from the cards they hold alone"
                )
        for why, n in sorted(skipped.items()):
            counts[why] = n
            notes.append(f"{n} per-pod samples skipped ({why})")
        self.pod_series = counts
        reason = "; ".join(notes)
        if reason and reason != self.pods_reason:
            log.info("measured use: %s", reason)
        self.pods_reason = reason

    def register(
        self, registry: CollectorRegistry, view: Callable[[], tuple[NodeTable, float] | None]
    ) -> None:
        """Report this feed's metrics at each scrape of ``registry``; ``view`` gives the
        scheduler's table and the time now (None while there is no scheduler)."""
        registry.register(_Collector(self, view))


class _Collector(Collector):
    def __init__(
        self, feed: MeasuredUse, view: Callable[[], tuple[NodeTable, float] | None]
    ) -> None:
        self.feed = feed
        self.view = view

    def describe(self) -> Iterable[Any]:
        return []

    def collect(self) -> Iterable[Any]:
        f = self.feed
        reads = CounterMetricFamily(
            "gpupool_measured_reads",
            "Reads of the measured-use source, by outcome.",
            labels=["outcome"],
        )
        reads.add_metric(["ok"], f.reads_ok)
        reads.add_metric(["error"], f.reads_failed)
        yield reads
        samples = CounterMetricFamily(
            "gpupool_measured_samples", "Card samples taken into the load model."
        )
        samples.add_metric([], f.model.samples_total)
        yield samples
        pods = GaugeMetricFamily(
            "gpupool_measured_pod_series",
            "HAMi's per-pod series in the last read, by outcome: own (a reading for the "
            "pod's workload), card (a slice pod with none: learns from its card), "
            "unknown-pod, and samples skipped (bad-value, no-pod-label).",
            labels=["outcome"],
        )
        for outcome, n in sorted(f.pod_series.items()):
            pods.add_metric([outcome], n)
        yield pods
        up = GaugeMetricFamily(
            "gpupool_measured_source_up",
            "1 when the last read of the "
            "measured-use source succeeded, else 0 (placement by requests).",
        )
        up.add_metric([], 0.0 if f.model.source_down else 1.0)
        yield up
        got = self.view()
        if got is None:
            return
        table, now_s = got
        load = f.model.view(table, now_s)
        live = table.live()
        usable = table.gpu_usable[live]
        measured = int(load.measured[live][usable].sum())
        cards = GaugeMetricFamily(
            "gpupool_measured_cards",
            "Usable cards placed by measured "
            "use and by requests (stale, unmeasured or source down).",
            labels=["source"],
        )
        cards.add_metric(["measured"], measured)
        cards.add_metric(["requests"], int(usable.sum()) - measured)
        yield cards
        fallback = GaugeMetricFamily(
            "gpupool_measured_fallback_nodes",
            "Nodes with a card placed by requests, and why.",
            labels=["reason"],
        )
        by_reason: dict[str, int] = {}
        for why in load.reasons.values():
            by_reason[why] = by_reason.get(why, 0) + 1
        for why, n in sorted(by_reason.items()):
            fallback.add_metric([why], n)
        yield fallback
        ratio = GaugeMetricFamily(
            "gpupool_gpu_measured_load_ratio",
            "Compute load of each "
            "measured card as placement counts it (windowed aggregate "
            "plus estimates; 1 is a full card).",
            labels=["node", "gpu"],
        )
        memory = GaugeMetricFamily(
            "gpupool_gpu_measured_free_bytes",
            "Framebuffer free on each measured card, less estimates.",
            labels=["node", "gpu"],
        )
        for i in live.tolist():
            name = NodeName(table.nodes[i].name)
            for g in range(int(table.gpu_count[i])):
                if load.measured[i, g]:
                    ratio.add_metric([name, str(g)], float(load.milli[i, g]) / 1000.0)
                    if load.free_mib[i, g] >= 0:
                        memory.add_metric([name, str(g)], float(load.free_mib[i, g]) * 1048576)
        yield ratio
        yield memory
