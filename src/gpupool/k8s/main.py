"""``gpupool k8s run``: load the queue configuration, connect, run the controller.

The queues come from a file (``--queues``, Kueue YAML as ``gpupool sim`` reads it) or, by
default, from gpupool's CRDs in the cluster (``gpupool.io/v1alpha1`` ResourceFlavor,
ClusterQueue, Cohort, LocalQueue; see ``deploy/crds``). With neither, every pod goes to one
ClusterQueue ``default`` without quota. A change to the CRD objects rebuilds the scheduler
from the API server (as a restart would), so quotas take effect at once. Where the cluster
serves the Elastic GPU kinds (``elasticgpu.io/v1alpha1``), their binder runs beside the
scheduler (``k8s/elastic.py``). Queues with a provisioning admission check get their
ProvisioningRequests made and watched (``k8s/provisioning.py``). Where the cluster serves
Kueue's API (``kueue.x-k8s.io``), Kueue's own objects are the queues instead, and a change to
them is applied in place (``k8s/kueue/``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
from typing import Any

from gpupool.config import load_queue_config
from gpupool.core.errors import ConfigError, ConflictError
from gpupool.core.quota import ClusterQueue, LocalQueue, QueueConfig
from gpupool.k8s.controller import Controller, Options
from gpupool.k8s.crd import API, CRD_KINDS, CrdStatus, queue_documents
from gpupool.k8s.dra_live import announce_dra
from gpupool.k8s.elastic import ElasticController
from gpupool.k8s.informer import Informer
from gpupool.k8s.kube import Kube, KubeError
from gpupool.k8s.kueue import KueueController, KueueSource
from gpupool.k8s.provisioning import ProvisioningAdapter
from gpupool.k8s.reconfigure import apply_config
from gpupool.k8s.translate import ResourceNames

__all__ = ["default_config", "load_crd_config", "options_from_args", "run_command"]

log = logging.getLogger("gpupool.k8s")


def default_config(queue: str = "default") -> QueueConfig:
    """One ClusterQueue without quota (and a LocalQueue of the same name)."""
    return QueueConfig(
        cluster_queues=(ClusterQueue(queue, flavors=()),), local_queues=(LocalQueue(queue, queue),)
    ).validate()


async def load_crd_config(kube: Kube, default_queue: str = "default") -> tuple[QueueConfig, bool]:
    """The queue configuration from gpupool's CRD objects; (config, whether CRDs exist)."""
    docs, present = await queue_documents(kube)
    if not docs:
        return default_config(default_queue), present
    return load_queue_config(docs, source="gpupool.io objects"), present


def options_from_args(args: argparse.Namespace) -> Options:
    names = ResourceNames(
        count=args.gpu_resource,
        memory=args.gpumem_resource,
        memory_percentage=args.gpumem_percentage_resource,
        cores=args.gpucores_resource,
    )
    extra: dict[str, Any] = {}
    if getattr(args, "prometheus", ""):
        extra.update(measured_options(args))
    if getattr(args, "identity", ""):
        extra["identity"] = args.identity
    return Options(
        scheduler_name=args.scheduler_name,
        default_queue=args.default_queue,
        names=names,
        lease_namespace=getattr(args, "lease_namespace", "gpupool-system"),
        lease_name=getattr(args, "lease_name", "gpupool-scheduler"),
        leader_elect=not getattr(args, "no_leader_elect", False),
        lease_s=getattr(args, "lease_duration", 15.0),
        renew_s=getattr(args, "renew_interval", 2.0),
        annotate_first=getattr(args, "annotate_first", False),
        bind_queue_weight=getattr(args, "bind_queue_weight", 1.0),
        foreign_schedulers=tuple(getattr(args, "extender_for", ())),
        **extra,
    )


def run_command(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    return asyncio.run(_run(args))


async def _run(args: argparse.Namespace) -> int:
    kube = await Kube.connect(args.kubeconfig)
    await announce_dra(kube)  # said once: whether the server has resource.k8s.io
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        while not stop.is_set():
            kueue = None if args.queues else await KueueSource.discover(kube)
            unloaded = False  # gpupool.io objects present that do not load
            if args.queues:
                config = load_queue_config(args.queues)
                use_crds = False
            elif kueue is not None:
                config, use_crds = await kueue.start(), False
            else:
                try:
                    config, use_crds = await load_crd_config(kube, args.default_queue)
                except ConfigError as exc:  # never down for a bad object: wait for a fix
                    log.error(
                        "gpupool.io queue objects: %s; no queue admits anything until they load",
                        exc,
                    )
                    config, use_crds, unloaded = default_config(args.default_queue), True, True
            controller = (KueueController if kueue is not None else Controller)(
                kube, config, options_from_args(args)
            )
            servers = await _serve(args, controller)
            changed = asyncio.Event()
            if unloaded:
                changed.set()  # read them again once running: the bad object gets its Event
            watchers = (
                [
                    asyncio.create_task(_watch_crds(kube, changed)),
                    asyncio.create_task(_apply_crds(kube, controller, changed, args.default_queue)),
                ]
                if use_crds
                else []
            )
            status = CrdStatus(kube, controller) if use_crds else None
            if status is not None:
                watchers.append(asyncio.create_task(status.run()))
            if kueue is not None:  # Kueue's objects: changes applied in place, no reload
                kueue.attach(controller)
                watchers.append(asyncio.create_task(kueue.run()))
            if config.admission_checks:  # queued provisioning: ProvisioningRequests
                provisioning = ProvisioningAdapter(kube, controller)
                controller.attach(provisioning=provisioning)
                watchers.append(asyncio.create_task(provisioning.run()))
            if await _has_elastic_crds(kube):
                elastic = ElasticController(kube, controller)
                controller.attach(elastic=elastic)
                watchers.append(asyncio.create_task(elastic.run()))
            runner = asyncio.create_task(controller.run())
            stopper = asyncio.create_task(stop.wait())
            done, _ = await asyncio.wait({runner, stopper}, return_when=asyncio.FIRST_COMPLETED)
            for t in (runner, stopper, *watchers):
                t.cancel()
            await asyncio.gather(runner, stopper, *watchers, return_exceptions=True)
            for s in servers:
                await s.cleanup()
            if runner in done and runner.exception() is not None:
                raise runner.exception()  # type: ignore[misc]
    finally:
        await kube.close()
    return 0


async def _has_elastic_crds(kube: Kube) -> bool:
    """Whether the cluster serves the Elastic GPU kinds (``elasticgpu.io/v1alpha1``)."""
    try:
        await kube.request(
            "GET", "/apis/elasticgpu.io/v1alpha1/elasticgpuclasses", params={"limit": "1"}
        )
    except KubeError as exc:
        if exc.status == 404:
            return False
        raise
    return True


async def _apply_crds(
    kube: Kube, controller: Controller, changed: asyncio.Event, default_queue: str
) -> None:
    """Applies changes to gpupool's queue objects in place (``k8s/reconfigure.py``): no
    informer, server or Lease restarts. Objects that do not load, or a configuration the
    scheduler refuses, leave the last configuration in use, said in the log and, where the
    error names its object, in a Warning Event on it (``_mark_bad``)."""
    while True:
        await changed.wait()
        await asyncio.sleep(0.5)  # a burst of edits: one build
        changed.clear()
        try:
            config, _ = await load_crd_config(kube, default_queue)
        except ConfigError as exc:
            log.error("gpupool.io queue objects: %s; the last configuration stays", exc)
            _mark_bad(controller, exc)
            continue
        except KubeError as exc:
            log.warning("gpupool.io queue objects not read (%s); trying again", exc)
            changed.set()
            await asyncio.sleep(2.0)
            continue
        try:
            apply_config(controller, config, "gpupool.io queue objects")
        except ConflictError:
            pass  # logged; the last configuration stays
        except ConfigError as exc:  # logged; the last configuration stays
            _mark_bad(controller, exc)


def _mark_bad(controller: Controller, exc: ConfigError) -> None:
    """A Warning Event ``InvalidConfiguration`` on the object a ConfigError names (the field,
    value and rule when it has them); nothing when it names none."""
    if exc.document is None:
        return
    kind, name = exc.document
    namespace, _, short = name.rpartition("/")
    meta = {"name": short, **({"namespace": namespace} if namespace else {})}
    what = f"{exc.field}={exc.value!r}: {exc.rule}" if exc.field and exc.rule else str(exc)
    controller.status.record(
        {"apiVersion": API, "kind": kind, "metadata": meta},
        "Warning",
        "InvalidConfiguration",
        f"{what}; gpupool keeps its last valid queue configuration",
    )


async def _watch_crds(kube: Kube, dirty: asyncio.Event) -> None:
    """Sets ``dirty`` on any change to a gpupool queue object after the first list."""
    synced = False

    def changed(event: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        if synced and (event == "DELETED" or old is None or obj.get("spec") != old.get("spec")):
            dirty.set()

    informers = [
        Informer(kube, f"/apis/gpupool.io/v1alpha1/{plural}", changed, name=plural)
        for plural in CRD_KINDS.values()
    ]
    tasks = [asyncio.create_task(i.run()) for i in informers]
    try:
        for i in informers:
            await i.synced.wait()
        synced = True
        await asyncio.gather(*tasks)
    finally:
        for t in tasks:
            t.cancel()
        with contextlib.suppress(Exception):
            await asyncio.gather(*tasks, return_exceptions=True)


async def _serve(args: argparse.Namespace, controller: Controller) -> list[Any]:
    """The extender/webhook and metrics HTTP servers the flags ask for."""
    runners: list[Any] = []
    port = getattr(args, "extender_port", 0)
    if port:
        from gpupool.k8s.extender import serve_http

        runners.append(await serve_http(controller, port, tls_dir=args.tls_dir or None))
    metrics_port = getattr(args, "metrics_port", 0)
    if metrics_port:
        from gpupool.k8s.extender import serve_metrics

        runners.append(await serve_metrics(controller, metrics_port))
    return runners


def measured_options(args: argparse.Namespace) -> dict[str, Any]:
    """``Options`` fields of the measured-use flags; ConfigError names a bad one."""
    from gpupool.core.usage import LoadSettings
    from gpupool.usage.prometheus import PrometheusSettings

    interval = float(args.measured_interval)
    if not interval > 0:
        raise ConfigError(f"--measured-interval {interval:g}: must be above 0 seconds")
    hot = float(args.measured_hot_pct)
    if not 0 < hot <= 100:
        raise ConfigError(f"--measured-hot-pct {hot:g}: must be above 0 and at most 100")
    labels = tuple(args.prometheus_hostname_label) or ("Hostname", "hostname")
    return {
        "prometheus": PrometheusSettings(
            url=args.prometheus,
            lookback_s=4 * interval,
            query=args.prometheus_query,
            hostname_labels=labels,
        ).validate(),
        "measured": LoadSettings(
            window_s=args.measured_window, stale_after_s=args.measured_stale_after
        ).validate(),
        "measured_interval_s": interval,
        "hot_pct": hot,
    }
