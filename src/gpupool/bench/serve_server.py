"""The server ``gpupool bench serve`` measures: ``gpupool serve`` as a subprocess on a free
loopback port, with its own state directory, token and log, and its memory and CPU read from
``/proc``."""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import yaml

from gpupool.bench.serve_workload import cluster_doc, queue_docs

SERVER_COMMAND = (sys.executable, "-m", "gpupool.cli")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Server:
    """A ``gpupool serve`` subprocess on a free loopback port with its own state directory."""

    def __init__(self, workdir: Path, nodes: int, speed: float, interval: float) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.token = secrets.token_hex(16)
        (workdir / "cluster.yaml").write_text(yaml.safe_dump(cluster_doc(nodes)))
        (workdir / "queues.yaml").write_text(yaml.safe_dump_all(queue_docs(nodes)))
        env = dict(os.environ, GPUPOOL_TOKENS=f"{self.token},bench,admin")
        self.log_path = workdir / "server.log"
        self._log = self.log_path.open("wb")
        self.proc = subprocess.Popen(
            [
                *SERVER_COMMAND,
                "serve",
                "--cluster",
                str(workdir / "cluster.yaml"),
                "--queues",
                str(workdir / "queues.yaml"),
                "--state",
                str(workdir / "state.db"),
                "--port",
                str(self.port),
                "--speed",
                str(speed),
                "--interval",
                str(interval),
            ],
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def wait_ready(self, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"gpupool serve exited with {self.proc.returncode}:\n{self.log_tail()}"
                )
            try:
                if httpx.get(self.url + "/healthz", timeout=1.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError(
            f"gpupool serve did not answer /healthz in {timeout_s:g} s:\n{self.log_tail()}"
        )

    def log_tail(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")[-2000:]

    def peak_rss_mib(self) -> float | None:
        """The server's peak resident memory (VmHWM), while it still runs."""
        try:
            for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    return round(int(line.split()[1]) / 1024, 1)
        except OSError:
            pass
        return None

    def cpu_s(self) -> float | None:
        """CPU seconds (user + system) the server has used so far."""
        try:
            fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return None
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
