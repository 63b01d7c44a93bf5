"""``gpupool k8s bench --compare-kube-scheduler``: gpupool and the real kube-scheduler
measured in one invocation against the same API server, each with the emulated nodes."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from gpupool.core.errors import ConfigError
from gpupool.k8s.bench_compare import run_with_kube_scheduler
from gpupool.k8s.kubescheduler import KubeScheduler, scheduler_config
from tests.k8s.conftest import ControlPlane

pytestmark = pytest.mark.k8s


def _binary() -> str:
    cache = Path(os.environ.get("GPUPOOL_K8S_CACHE", str(Path.home() / ".cache" / "gpupool-k8s")))
    return str(cache / "bin" / "kube-scheduler")


def test_gpupool_and_kube_scheduler_in_one_run(control_plane: ControlPlane) -> None:
    result = asyncio.run(
        run_with_kube_scheduler(
            _binary(),
            control_plane.kubeconfig,
            nodes=3,
            gpus=4,
            pods=12,
            ns="gpupool-bench-compare",
            other_cpu_pct=50,
        )
    )
    theirs = result["kube_scheduler"]
    assert result["scheduler"] == "gpupool" and theirs["scheduler"] == "default-scheduler"
    assert result["bound"] == 12 and theirs["bound"] == 12
    assert theirs["client_qps"] == 50
    for run in (result, theirs):
        faults = {
            k: run[k]
            for k in (
                "swapped_allocations",
                "misdirected_allocations",
                "kubelet_rejections",
                "cards_over_split",
                "cards_over_memory",
            )
        }
        assert faults == dict.fromkeys(faults, 0)
        assert run["pods_running"] == 12
    assert result["ratio"]["pods_per_s"] == round(result["pods_per_s"] / theirs["pods_per_s"], 2)


def test_the_config_names_the_kubeconfig_qps_and_port() -> None:
    text = scheduler_config("/k/config", 50, 40001)
    assert "kind: KubeSchedulerConfiguration" in text
    assert "clientConnection: {kubeconfig: /k/config, qps: 50, burst: 100}" in text
    assert "healthzBindAddress: 127.0.0.1:40001" in text
    assert "leaderElection: {leaderElect: false}" in text
    with pytest.raises(ConfigError, match="qps=0 must be at least 1"):
        scheduler_config("/k/config", 0, 40001)


def test_a_missing_binary_is_named(tmp_path: Path) -> None:
    config = tmp_path / "kubeconfig"
    config.write_text("")
    with pytest.raises(
        ConfigError, match="--compare-kube-scheduler='/no/such': not an executable file"
    ):
        KubeScheduler("/no/such", str(config))
