"""What ``gpupool serve`` runs, built but not started (``Service``): the state file, the virtual
cluster, the control plane, the API, the metrics' gauges, the threads of the scheduling loop,
of measured use and of the example jobs, and the virtual cluster's GPU exporter.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any

from gpupool.api.app import create_app
from gpupool.api.auth import Tokens
from gpupool.app.exporter import (
    InventoryCard,
    RunningJob,
    card_metrics,
    container_metrics,
    pod_tasks,
)
from gpupool.cloud.spec import load_cloud
from gpupool.config import load_cluster, load_documents
from gpupool.control import Clock, ControlPlane
from gpupool.control.elastic import ElasticService, parse_classes
from gpupool.control.records import JobPhase
from gpupool.control.views import cluster_view
from gpupool.core.errors import AdapterError, ConfigError, GpupoolError
from gpupool.core.placement.registry import measured_profile
from gpupool.core.quota import Resource
from gpupool.core.usage import LoadModel, LoadSettings
from gpupool.metrics import Gauges, Metrics
from gpupool.store import Store
from gpupool.usage.dcgm import CardMetrics, ExporterServer, HamiMonitor
from gpupool.usage.feed import MeasuredUse
from gpupool.usage.hami import ContainerMetrics
from gpupool.usage.profile import ANNOTATION, FULL, UseProfile, parse_annotation
from gpupool.usage.prometheus import PrometheusReader, PrometheusSettings, inventory_resolver
from gpupool.virtual import VirtualCluster
from gpupool.virtual.demo import DemoStream, demo_count

log = logging.getLogger("gpupool.serve")


class Service:
    """Everything ``serve`` runs, built but not started."""

    def __init__(
        self,
        *,
        state: str | Path,
        cluster: str | Path | None,
        queues: str | Path | None,
        speed: float,
        elastic: str | Path | None = None,
        cloud: str | Path | None = None,
        seed: int = 7,
        prometheus: PrometheusSettings | None = None,
        measured: LoadSettings | None = None,
    ) -> None:
        """``prometheus``: place by measured GPU use read from it (``measured``: the load
        model's settings); None: by requests."""
        store = Store(state)
        new = store.meta("created") is None
        nodes = load_cluster(cluster) if new and cluster else []
        queue_docs = load_documents(queues) if new and queues else []
        classes = parse_classes(load_documents(elastic)) if new and elastic else []
        self.metrics = Metrics()
        self.backend = VirtualCluster()
        self.measured = (
            None if prometheus is None else MeasuredUse(PrometheusReader(prometheus), measured)
        )
        self.plane = ControlPlane(
            store,
            self.backend,
            Clock(speed),
            nodes=nodes,
            queue_docs=queue_docs,
            metrics=self.metrics,
            profile=None if prometheus is None else measured_profile(),
            cloud=load_cloud(str(cloud)) if cloud else None,
            cloud_seed=seed,
        )
        if self.measured is not None:
            model = self.measured.model
            self.plane.scheduler.use_measurements(model)
            self.plane.watchers.append(_Measured(model))  # and every scheduler built later
            self.measured.register(self.metrics.registry, self._measured_view)
        self.elastic = ElasticService.of(self.plane)
        self.elastic.seed(classes)
        self.metrics.watch(self._gauges)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.exporter: ExporterServer | None = None
        self._profiles: dict[str, UseProfile] = {}

    def api(self, tokens: Tokens, max_body_bytes: int = 1 << 20) -> Any:
        """The ASGI app serving this service to holders of ``tokens``."""
        return create_app(self.plane, tokens, max_body_bytes=max_body_bytes)

    def _gauges(self) -> Gauges:
        plane = self.plane
        with plane.lock:
            queues = [q.name for q in plane.config.cluster_queues]
            pending: dict[str, int] = dict.fromkeys(queues, 0)  # every queue, 0 included
            running: dict[str, int] = dict.fromkeys(queues, 0)
            alloc: dict[tuple[str, str], int] = {}
            for rec in plane.jobs.values():
                if rec.phase == JobPhase.PENDING:
                    pending[rec.cluster_queue] = pending.get(rec.cluster_queue, 0) + 1
                elif rec.phase == JobPhase.RUNNING:
                    running[rec.cluster_queue] = running.get(rec.cluster_queue, 0) + 1
                    k = (rec.flavor, rec.cluster_queue)
                    alloc[k] = alloc.get(k, 0) + sum(p.gpu_milli for p in rec.placements)
            view = cluster_view(plane)
            sched = plane.scheduler
            return Gauges(
                pending=pending,
                running=running,
                gpus_allocated={k: v / 1000 for k, v in alloc.items()},
                gpu_milli_allocated=alloc,
                gpus_total={f["name"]: f["gpus"] for f in view["flavors"]},
                gpu_milli_total={f["name"]: f["gpus"] * 1000 for f in view["flavors"]},
                gpu_milli_nominal={
                    (flavor, q.name): amount
                    for q in plane.config.cluster_queues
                    for (flavor, res), amount in sched.nominal(q.name).items()
                    if res == Resource.GPU_MILLI
                },
                fragmentation_ratio=view["fragmentation"]["ratio"],
                nodes={s: view["nodes"][s] for s in ("ready", "cordoned", "failed")},
                queue_share={q.name: sched.share(q.name) for q in plane.config.cluster_queues},
                pending_reasons=sched.pending_reasons(),
            )

    # -- threads -----------------------------------------------------------------------------

    def start_loop(self, interval: float) -> None:
        def loop() -> None:
            last_trim = time.monotonic()
            while not self._stop.wait(interval):
                try:
                    self.plane.tick()
                    if time.monotonic() - last_trim > 60:
                        self.plane.trim_events()
                        last_trim = time.monotonic()
                except Exception:  # a failed cycle is logged; the next one tries again
                    log.exception("scheduling cycle failed")

        self._spawn(loop, "gpupool-loop")

    def _measured_view(self) -> tuple[Any, float]:
        with self.plane.lock:
            return self.plane.scheduler.node_table(), self.plane.clock.now()

    def poll_measured(self) -> int:
        """One read of Prometheus (outside the plane's lock), its samples handed to the model
        under it, their times moved onto the cluster clock; -1 when the read failed. HAMi's
        per-pod series of the read, where the virtual cluster's monitor is scraped, teach
        each running pod's workload what it uses, as in ``gpupool k8s``."""
        feed = self.measured
        assert feed is not None
        plane = self.plane
        with plane.lock:
            nodes = plane.scheduler.node_list()
        resolve = inventory_resolver(
            (n.name, g.index, g.uuid or f"GPU-{n.name}-{g.index}") for n in nodes for g in n.gpus
        )
        try:
            samples, pods = feed.reader.read_with_pods(resolve)
        except AdapterError as exc:
            with plane.lock:
                feed.failed(exc)
            return -1
        clock = plane.clock
        with plane.lock:
            now, wall = clock.now(), clock.wall()
            task_of = pod_tasks(self._running())
            return feed.take(
                samples,
                now,
                lambda t: now - (wall - t) * clock.speed,
                pods=pods,
                task_of=task_of,
            )

    def start_measured(self, interval: float) -> None:
        def loop() -> None:
            while not self._stop.is_set():
                try:
                    self.poll_measured()
                except Exception:  # logged; the next read tries again
                    log.exception("reading measured use failed")
                self._stop.wait(interval)

        self._spawn(loop, "gpupool-measured")

    def demo_stream(self, rate: float, seed: int) -> DemoStream:
        """The example stream, carrying on after the demo jobs the state file holds (a
        restart neither repeats their names nor waits for them)."""
        plane = self.plane
        with plane.lock:
            return DemoStream(
                plane.config,
                plane.scheduler.node_list(),
                seed,
                rate,
                burst=plane.cloud is not None,
                start=demo_count([r.request.name for r in plane.jobs.values()]),
            )

    def start_demo(self, rate: float, seed: int) -> None:
        plane = self.plane
        stream = self.demo_stream(rate, seed)

        def demo() -> None:
            while not self._stop.wait(stream.gap_s()):
                try:
                    plane.submit(stream.next_job())
                except GpupoolError as exc:
                    log.warning("demo job refused: %s", exc)

        self._spawn(demo, "gpupool-demo")

    def _spawn(self, fn: Any, name: str) -> None:
        t = threading.Thread(target=fn, name=name, daemon=True)
        t.start()
        self._threads.append(t)

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=5)
        if self.exporter is not None:
            self.exporter.stop()

    # -- the virtual cluster's GPU exporter ----------------------------------------------------

    def start_exporter(self, host: str, port: int, hami_names: str = "current") -> ExporterServer:
        """Serve each node's cards in DCGM exporter's format and each node's HAMi monitor
        (``hami_names``: which of HAMi's metric names, ``gpupool.usage.hami.NAMES``)."""
        self.exporter = ExporterServer(
            self.exporter_cards,
            host,
            port,
            hami=HamiMonitor(self.exporter_pods, hami_names),
        ).start()
        return self.exporter

    def _running(self) -> list[RunningJob]:
        """The running jobs with their actual-use profiles (``gpupool.io/actual-use``); the
        caller holds the plane's lock."""
        return [
            RunningJob(r.request.namespace, r.placements, self._profile(r.key, r.request.document))
            for r in self.plane.jobs.values()
            if r.phase == JobPhase.RUNNING
        ]

    def _inventory(self) -> list[InventoryCard]:
        return [
            InventoryCard(
                n.name, g.index, g.uuid or f"GPU-{n.name}-{g.index}", g.model, g.memory_mib
            )
            for n in self.plane.scheduler.node_list()
            for g in n.gpus
        ]

    def exporter_cards(self) -> dict[str, list[CardMetrics]]:
        """What every card of the virtual cluster does now: its running jobs' actual use
        (``gpupool.io/actual-use``), as dcgm-exporter on the node would report it."""
        with self.plane.lock:
            cards, running = self._inventory(), self._running()
        return card_metrics(cards, running)

    def exporter_pods(self) -> dict[str, list[ContainerMetrics]]:
        """What every running pod does with each card it holds, as HAMi's monitor on the node
        would report it: the same use as :meth:`exporter_cards`, split among the holders."""
        with self.plane.lock:
            cards, running = self._inventory(), self._running()
        return container_metrics(cards, running)

    def _profile(self, key: str, document: Any) -> UseProfile:
        if key not in self._profiles:
            meta = document.get("metadata") if isinstance(document, dict) else None
            text = ((meta or {}).get("annotations") or {}).get(ANNOTATION)
            try:
                self._profiles[key] = FULL if text is None else parse_annotation(str(text), key)
            except ConfigError as exc:
                log.warning("%s; the job uses what it requests", exc)
                self._profiles[key] = FULL
        return self._profiles[key]


class _Measured:
    """Hands the load model to every scheduler the plane builds (a restart of the state, a
    node change), as the plane's watchers are told."""

    def __init__(self, model: LoadModel) -> None:
        self.model = model

    def scheduler_built(self, scheduler: Any) -> None:
        scheduler.use_measurements(self.model)

    def node_failed(self, name: str) -> None:
        return

    def ticked(self, result: Any) -> None:
        return
