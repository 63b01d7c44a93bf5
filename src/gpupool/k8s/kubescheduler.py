"""kube-scheduler as a child process, for ``gpupool k8s bench --compare-kube-scheduler``.

The comparison run must bind the same kind of pods through the same API server in the same
minute as gpupool's run, so the bench starts kube-scheduler itself: a
``KubeSchedulerConfiguration`` (``kubescheduler.config.k8s.io/v1beta1``, the version
v1.18-v1.21 read) naming the bench's kubeconfig, leader election off, the client QPS given
(50 is kube-scheduler's own default, burst twice that), and health and metrics on a free
loopback port, so that it never collides with another control plane's ports on the machine.
It is ready when ``/healthz`` answers ``200``; when it exits or stays unready its log's tail
is in the error.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import aiohttp

from gpupool.core.errors import ConfigError

__all__ = ["KubeScheduler", "default_kubeconfig", "scheduler_config"]


def default_kubeconfig() -> str:
    """The kubeconfig kubectl would use: ``$KUBECONFIG`` (its first file), else
    ``~/.kube/config``."""
    env = os.environ.get("KUBECONFIG", "")
    if env:
        return env.split(os.pathsep)[0]
    return str(Path.home() / ".kube" / "config")


def scheduler_config(kubeconfig: str, qps: int, health_port: int) -> str:
    """The configuration file's text."""
    if qps < 1:
        raise ConfigError(f"kube-scheduler qps={qps} must be at least 1")
    return "\n".join(
        [
            "apiVersion: kubescheduler.config.k8s.io/v1beta1",
            "kind: KubeSchedulerConfiguration",
            f"clientConnection: {{kubeconfig: {kubeconfig}, qps: {qps}, burst: {2 * qps}}}",
            "leaderElection: {leaderElect: false}",
            f"healthzBindAddress: 127.0.0.1:{health_port}",
            f"metricsBindAddress: 127.0.0.1:{health_port}",
            "",
        ]
    )


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class KubeScheduler:
    """One kube-scheduler process: ``await start()``, then ``stop()``."""

    def __init__(self, binary: str, kubeconfig: str, *, qps: int = 50) -> None:
        if not Path(binary).is_file() or not os.access(binary, os.X_OK):
            raise ConfigError(
                f"--compare-kube-scheduler={binary!r}: not an executable file "
                "(e.g. ~/.cache/gpupool-k8s/bin/kube-scheduler, built by "
                "scripts/k8s-fixture.sh install)"
            )
        if not Path(kubeconfig).is_file():
            raise ConfigError(
                f"kubeconfig {kubeconfig!r} for kube-scheduler: no such file (pass --kubeconfig)"
            )
        self.binary = binary
        self.kubeconfig = str(Path(kubeconfig).resolve())
        self.qps = qps
        self.port = 0
        self._dir: tempfile.TemporaryDirectory[str] | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def log_path(self) -> Path:
        assert self._dir is not None
        return Path(self._dir.name) / "kube-scheduler.log"

    def log_tail(self, lines: int = 20) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    async def start(self, timeout_s: float = 60.0) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="gpupool-kube-scheduler-")
        self.port = _free_port()
        config = Path(self._dir.name) / "scheduler.yaml"
        config.write_text(scheduler_config(self.kubeconfig, self.qps, self.port))
        with open(self.log_path, "wb") as log:
            self._proc = subprocess.Popen(
                [self.binary, f"--config={config}", "--port=0", "--secure-port=0"],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        deadline = time.monotonic() + timeout_s
        url = f"http://127.0.0.1:{self.port}/healthz"
        async with aiohttp.ClientSession() as session:
            while True:
                if self._proc.poll() is not None:
                    raise RuntimeError(
                        f"kube-scheduler exited with {self._proc.returncode}:\n{self.log_tail()}"
                    )
                with contextlib.suppress(aiohttp.ClientError, OSError, TimeoutError):
                    async with session.get(url, timeout=aiohttp.ClientTimeout(total=2)) as r:
                        if r.status == 200:
                            return
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(
                        f"kube-scheduler not healthy on {url} within "
                        f"{timeout_s:.0f} s:\n{self.log_tail()}"
                    )
                await asyncio.sleep(0.2)

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        if self._dir is not None:
            self._dir.cleanup()
            self._dir = None
