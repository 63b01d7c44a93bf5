"""``gpupool serve`` as installed: it runs outside the repository on the example cluster
installed with the package, and ``--demo`` restarted on its state file carries on with new
example jobs instead of repeating the names of the ones it made before."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx

from gpupool.app import DEFAULT_CLUSTER, DEFAULT_QUEUES, Service
from gpupool.virtual.demo import demo_count
from tests.e2e.serve_kit import ADMIN, CLUSTER, QUEUES, TOKENS_ENV, auth, free_port


def test_the_packaged_default_cluster_is_the_example_one() -> None:
    assert DEFAULT_CLUSTER.read_text() == CLUSTER.read_text()
    assert DEFAULT_QUEUES.read_text() == QUEUES.read_text()


def test_serve_runs_outside_the_repository_with_no_spec_given(tmp_path: Path) -> None:
    port = free_port()
    log = tmp_path / "serve.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gpupool.cli",
                "serve",
                "--port",
                str(port),
                "--interval",
                "3600",
            ],
            cwd=tmp_path,
            env={**os.environ, "GPUPOOL_TOKENS": TOKENS_ENV},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            assert proc.poll() is None, log.read_text()
            with contextlib.suppress(httpx.HTTPError):
                r = httpx.get(f"http://127.0.0.1:{port}/api/v1/cluster", headers=auth(ADMIN))
                if r.status_code == 200:
                    break
            time.sleep(0.1)
        else:
            raise AssertionError(log.read_text())
        assert r.json()["nodes"]["total"] == 12
        assert (tmp_path / ".gpupool" / "state.db").exists()
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_a_restarted_demo_carries_on_from_the_state_file(tmp_path: Path) -> None:
    state = tmp_path / "state.db"
    service = Service(state=state, cluster=CLUSTER, queues=QUEUES, speed=60.0)
    stream = service.demo_stream(0.8, 7)
    first = [service.plane.submit(stream.next_job(), sync=False).key for _ in range(40)]
    service.plane.sync()
    service.plane.store.close()

    again = Service(state=state, cluster=CLUSTER, queues=QUEUES, speed=60.0)
    stream = again.demo_stream(0.8, 7)
    assert stream.count == demo_count(k.split("/")[1] for k in first) == 40
    later = [again.plane.submit(stream.next_job(), sync=False).key for _ in range(40)]
    again.plane.sync()
    assert not set(first) & set(later)  # every one new, none refused as "already exists"
    assert len(again.plane.jobs) == 80


def test_demo_count_reads_only_demo_names() -> None:
    assert demo_count(["nb-00042-1f3a", "train-00007-00ff", "burst-00100-abcd"]) == 100
    assert demo_count(["mine", "nb-42-1f3a", "nb-00042-XYZW", "my-00099-abcd"]) == 0
