"""Placement by measured use through a real Prometheus (Debian's ``prometheus``).

The virtual cluster's exporter serves DCGM-named metrics per node; a Prometheus started here
scrapes them; gpupool's reader queries Prometheus's HTTP API and the scheduler places by what
it read. Stopping Prometheus must degrade placement to requests, with a reason, not an error.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gpupool.core import Gpu, NodeName
from gpupool.core.model import GpuShare, JobId, Placement, TaskId
from gpupool.core.placement.registry import measured_profile
from gpupool.core.scheduler import Scheduler
from gpupool.core.usage import LoadSettings
from gpupool.usage.dcgm import CardMetrics, ExporterServer
from gpupool.usage.feed import MeasuredUse
from gpupool.usage.profile import UseProfile, card_use
from gpupool.usage.prometheus import PrometheusReader, PrometheusSettings, inventory_resolver
from tests.builders import job, node, queue_config, share

pytestmark = pytest.mark.real_component("prometheus")

PROMETHEUS = shutil.which("prometheus")
CARD_MIB = 40960


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Cluster:
    """Two nodes of two cards; a fine-tuning slice on n1's card 0 keeps it 95 % busy, and
    n2's card 1 holds 30 GiB no request accounts for."""

    def __init__(self) -> None:
        self.nodes = [
            node(n, cards=tuple(Gpu(i, "A100", CARD_MIB, uuid=f"GPU-{n}-{i}") for i in range(2)))
            for n in ("n1", "n2")
        ]
        self.train = Placement(
            TaskId("ft/main-0"), JobId("ft"), NodeName("n1"), 1000, 1024, (GpuShare(0, 500, 10240),)
        )
        self.profiles = {"ft": UseProfile(190.0, 100.0)}
        self.outside = {(NodeName("n2"), 1): (5.0, 30720.0)}

    def metrics(self) -> dict[str, list[CardMetrics]]:
        use = card_use([self.train], self.profiles, self.outside)
        out: dict[str, list[CardMetrics]] = {}
        for n in self.nodes:
            cards = []
            for g in n.gpus:
                u = use.get((n.name, g.index))
                used = int(u.memory_mib) if u else 300
                cards.append(
                    CardMetrics(
                        g.index, g.uuid, g.model, u.util_pct if u else 0.0, used, CARD_MIB - used
                    )
                )
            out[n.name] = cards
        return out


@pytest.fixture
def exporter() -> Iterator[tuple[Cluster, ExporterServer]]:
    cluster = Cluster()
    server = ExporterServer(cluster.metrics, port=free_port()).start()
    try:
        yield cluster, server
    finally:
        server.stop()


def start_prometheus(
    tmp: Path,
    server: ExporterServer,
    nodes: list[str],
    port: int = 0,
    jobs: tuple[str, ...] = ("dcgm",),
) -> tuple[subprocess.Popen[bytes], str]:
    """A Prometheus scraping ``server`` every second: each scrape job of ``jobs`` (``dcgm``:
    the DCGM exporter's pages, ``hami``: HAMi's monitor's) one target a node, as the
    exporters' DaemonSets give."""
    if PROMETHEUS is None:
        pytest.skip("no prometheus binary on PATH (make test installs Debian's prometheus)")
    port = port or free_port()
    paths = {"dcgm": server.path, "hami": server.hami_path}
    config = "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n"
    for name in jobs:
        targets = "\n".join(
            f"      - targets: ['{server.address}']\n"
            f"        labels: {{__metrics_path__: '{paths[name](n)}', instance: '{n}'}}"
            for n in nodes
        )
        config += f"  - job_name: {name}\n    static_configs:\n" + targets + "\n"
    (tmp / "prometheus.yml").write_text(config)
    proc = subprocess.Popen(
        [
            PROMETHEUS,
            f"--config.file={tmp / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=(tmp / "prometheus.log").open("wb"),
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(
                "prometheus exited: " + (tmp / "prometheus.log").read_text()[-2000:]
            )
        try:
            if httpx.get(f"{url}/-/ready", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise AssertionError("prometheus not ready after 60 s")


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def wait_for_samples(feed: MeasuredUse, resolve: object, want_cards: int) -> None:
    deadline = time.monotonic() + 60
    cards: set[tuple[str, int]] = set()
    while time.monotonic() < deadline:
        samples = feed.reader.read(resolve)  # type: ignore[arg-type]
        cards = {(s.node, s.gpu) for s in samples if s.used_mib is not None}
        if len(cards) >= want_cards and len({s.time_s for s in samples}) >= 2:
            return
        time.sleep(0.5)
    raise AssertionError(f"only {sorted(cards)} scraped after 60 s")


def test_placement_reads_dcgm_metrics_back_from_prometheus_and_degrades_when_it_stops(
    tmp_path: Path, exporter: tuple[Cluster, ExporterServer]
) -> None:
    cluster, server = exporter
    proc, url = start_prometheus(tmp_path, server, ["n1", "n2"])
    try:
        reader = PrometheusReader(PrometheusSettings(url=url, lookback_s=30, timeout_s=2))
        feed = MeasuredUse(reader, LoadSettings(window_s=60, stale_after_s=30, settle_s=2))
        resolve = inventory_resolver(
            (n.name, g.index, g.uuid) for n in cluster.nodes for g in n.gpus
        )
        wait_for_samples(feed, resolve, 4)

        sched = Scheduler(cluster.nodes, queue_config({"default": 4}), measured_profile())
        sched.restore(job("ft", gpu=share(500, 10240)), [cluster.train], 0.0, "gpu")
        sched.use_measurements(feed.model)
        now = time.time()
        assert feed.poll(resolve, now) > 0
        assert reader.requests >= 2

        readings = {r.gpu: r for r in feed.model.readings(sched.node_table(), NodeName("n1"), now)}
        assert readings[0].measured and readings[0].util_pct is not None
        assert readings[0].util_pct >= 90  # the slice asks half a card and keeps it busy
        assert readings[1].measured and readings[1].util_pct == 0
        assert readings[0].used_mib == 10240
        n2 = {r.gpu: r for r in feed.model.readings(sched.node_table(), NodeName("n2"), now)}
        assert n2[1].free_mib == CARD_MIB - 30720

        # A notebook: by requests it would share n1's card 0 (best fit); measured, it goes to
        # a cool card. A 16 GiB slice never lands on n2's card 1 (10 GiB free as measured).
        sched.submit(job("nb", gpu=share(300, 16384)), now)
        result = sched.cycle(now)
        [bind] = result.binds
        [p] = bind.placements
        assert (p.node, p.shares[0].index) not in {(NodeName("n1"), 0), (NodeName("n2"), 1)}
        sched.finished(JobId("nb"), now)

        # Prometheus stops: the next read fails, placement goes on by requests with a reason.
        stop(proc)
        assert feed.poll(resolve, now + 1) == -1
        view = feed.model.view(sched.node_table(), now + 1)
        assert view.measured_cards == 0
        assert "unreachable" in view.reasons[NodeName("n1")]
        assert view.reasons[NodeName("n1")].endswith("placed by requests")
        sched.submit(job("nb2", gpu=share(300, 4096)), now + 1)
        [bind] = sched.cycle(now + 1).binds
        [p] = bind.placements
        assert (p.node, p.shares[0].index) == (NodeName("n1"), 0)  # best fit by requests
    finally:
        if proc.poll() is None:
            stop(proc)


def test_a_card_whose_samples_stop_falls_back_to_requests(
    tmp_path: Path, exporter: tuple[Cluster, ExporterServer]
) -> None:
    """Prometheus answers, but one node's exporter went away: its cards go stale."""
    cluster, server = exporter
    proc, url = start_prometheus(tmp_path, server, ["n1", "n2"])
    try:
        reader = PrometheusReader(PrometheusSettings(url=url, lookback_s=30, timeout_s=2))
        feed = MeasuredUse(reader, LoadSettings(window_s=60, stale_after_s=3, settle_s=1))
        resolve = inventory_resolver(
            (n.name, g.index, g.uuid) for n in cluster.nodes for g in n.gpus
        )
        wait_for_samples(feed, resolve, 4)
        full = cluster.metrics

        def only_n1() -> dict[str, list[CardMetrics]]:
            return {"n1": full()["n1"]}

        server.source = only_n1  # n2's page is gone (404): Prometheus marks it down
        time.sleep(5)
        sched = Scheduler(cluster.nodes, queue_config({"default": 4}), measured_profile())
        now = time.time()
        assert feed.poll(resolve, now) > 0
        view = feed.model.view(sched.node_table(), now)
        assert view.measured[sched.node_table().row(NodeName("n1"))].sum() == 2
        assert "stale" in view.reasons[NodeName("n2")]
        assert NodeName("n1") not in view.reasons
    finally:
        stop(proc)
