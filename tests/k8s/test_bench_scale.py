"""``gpupool k8s bench --scale`` end to end at a small size: the real scheduler process
against the replayed cluster binds every pending pod, once, holding the Lease throughout."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpupool.core.errors import ConfigError
from gpupool.k8s.bench_scale import run_scale_bench

REPO = Path(__file__).resolve().parents[2]


def test_scale_bench_binds_every_pending_pod() -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpupool.cli",
            "k8s",
            "bench",
            "--scale",
            "--nodes",
            "6",
            "--pods",
            "120",
            "--pending",
            "12",
            "--timeout",
            "90",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
        check=True,
    )
    got = json.loads(out.stdout)
    assert got["source"] == "replay"
    assert got["bound"] == got["pending"] == 12
    assert got["lease_lost"] is False
    assert got["peak_rss_mib"] > 0 and got["initial_sync_s"] > 0 and got["pods_per_s"] > 0
    # the caches keep a fraction of each object
    assert got["cached_bytes_per_pod_other_after"] * 10 < got["cached_bytes_per_pod_other_before"]
    assert got["cached_bytes_per_node_after"] * 4 < got["cached_bytes_per_node_before"]


def test_scale_bench_refuses_more_pending_than_pods() -> None:
    import asyncio

    with pytest.raises(ConfigError, match="--pending=20 must not exceed --pods=10"):
        asyncio.run(run_scale_bench(2, 10, 20))
