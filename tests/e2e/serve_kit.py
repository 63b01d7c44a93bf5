"""What the tests of ``gpupool serve`` share: a control plane on a temporary state file with a
clock the test moves, an in-process client, job documents, a dump of the state file, and a
real ``gpupool serve`` process on a free port.

The example cluster and queues (``examples/``) are the cluster under test: 12 nodes (2 x 8
H100, 3 x 8 A100, a MIG node, 2 x 4 A6000, 2 x 4 T4, 2 CPU nodes); LocalQueues
research/llm, research/vision, serving/serving, notebooks/notebooks.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx

from gpupool.api.app import create_app
from gpupool.api.auth import Tokens
from gpupool.config import load_cluster, load_documents
from gpupool.control import Clock, ControlPlane
from gpupool.store import Store
from gpupool.virtual import VirtualCluster

with warnings.catch_warnings():  # starlette's TestClient warns about httpx at import
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

REPO = Path(__file__).resolve().parents[2]
CLUSTER = REPO / "examples" / "cluster.yaml"
QUEUES = REPO / "examples" / "queues.yaml"

ADMIN = "admin-token-0123456789abcdef"
RESEARCH = "research-token-0123456789ab"
SERVING = "serving-token-0123456789abc"
NOTEBOOKS = "notebooks-token-0123456789a"
TENANTS = {"research": RESEARCH, "serving": SERVING, "notebooks": NOTEBOOKS}
TOKENS_ENV = ";".join(
    [f"{ADMIN},admin,admin"] + [f"{tok},{ns},tenant,{ns}" for ns, tok in TENANTS.items()]
)


def camel_keys(value: Any) -> Any:
    """``value`` with every mapping's keys as the API writes them (``gpu_milli`` ->
    ``gpuMilli``): the state file's rows compared with the API's answers."""
    from gpupool.control.wire import camel

    if isinstance(value, dict):
        return {camel(k): camel_keys(v) for k, v in value.items()}
    if isinstance(value, list):
        return [camel_keys(v) for v in value]
    return value


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def tokens() -> Tokens:
    return Tokens.from_env(TOKENS_ENV)


class Wall:
    """A wall clock the test moves by hand."""

    def __init__(self, start: float = 1_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def make_plane(state: str | Path, wall: Wall, speed: float = 1.0) -> ControlPlane:
    """A control plane on the example cluster and queues (seeded only if ``state`` is new)."""
    store = Store(state, wall=wall)
    new = store.meta("created") is None
    return ControlPlane(
        store,
        VirtualCluster(),
        Clock(speed, wall=wall),
        nodes=load_cluster(CLUSTER) if new else [],
        queue_docs=load_documents(QUEUES) if new else [],
    )


def client(plane: ControlPlane, max_body_bytes: int = 1 << 20) -> TestClient:
    """An in-process client; server errors come back as 500 responses, not exceptions."""
    return TestClient(
        create_app(plane, tokens(), max_body_bytes=max_body_bytes), raise_server_exceptions=False
    )


def job_doc(
    name: str,
    namespace: str = "research",
    queue: str = "llm",
    *,
    gpus: int | None = 1,
    milli: int | None = None,
    gpu_memory: str | None = None,
    mig: str | None = None,
    models: list[str] | None = None,
    count: int = 1,
    cpu: Any = 4,
    memory: Any = "16Gi",
    duration: str = "10m",
    **spec: Any,
) -> dict[str, Any]:
    """A Job document with one pod set of ``count`` replicas."""
    gpu: dict[str, Any] | None = None
    if mig is not None:
        gpu = {"mig": mig}
    elif milli is not None or gpu_memory is not None:
        gpu = {k: v for k, v in (("milli", milli), ("memory", gpu_memory)) if v is not None}
    elif gpus is not None:
        gpu = {"count": gpus}
    if gpu is not None and models:
        gpu["models"] = models
    pod_set: dict[str, Any] = {"name": "main", "count": count, "cpu": cpu, "memory": memory}
    if gpu is not None:
        pod_set["gpu"] = gpu
    return {
        "apiVersion": "gpupool.io/v1alpha1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"queue": queue, "duration": duration, "podSets": [pod_set], **spec},
    }


def with_changes(doc: Mapping[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A copy of ``doc`` with the value at a dotted path (``spec.podSets.0.cpu``) replaced."""
    out = copy.deepcopy(dict(doc))
    *parents, last = path.split(".")
    node: Any = out
    for p in parents:
        node = node[int(p)] if isinstance(node, list) else node[p]
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
    return out


def dump(state: str | Path) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table of a state file, read through a second connection."""
    db = sqlite3.connect(f"file:{state}?mode=ro", uri=True)
    try:
        tables = [
            r[0]
            for r in db.execute(
                "SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%' "
                "ORDER BY name"
            )
        ]
        return {t: db.execute(f"SELECT * FROM {t} ORDER BY rowid").fetchall() for t in tables}
    finally:
        db.close()


def job_row(state: str | Path, key: str) -> dict[str, Any] | None:
    """The jobs row of ``key`` as a dict, read through a second connection."""
    db = sqlite3.connect(f"file:{state}?mode=ro", uri=True)
    db.row_factory = sqlite3.Row
    try:
        row = db.execute("SELECT * FROM jobs WHERE key=?", (key,)).fetchone()
        return None if row is None else dict(row)
    finally:
        db.close()


def holders_ok(nodes: list[dict[str, Any]]) -> list[str]:
    """Problems with the cards of ``/api/v1/nodes`` items: a card held past its compute or
    memory, a task on two nodes."""
    problems = []
    seen: dict[str, str] = {}
    for n in nodes:
        for g in n["gpus"]:
            milli = sum(h["gpuMilli"] or 0 for h in g["holders"])
            mib = sum(h["memoryMib"] or 0 for h in g["holders"])
            if milli > 1000 or mib > g["memoryMib"]:
                problems.append(
                    f"{n['name']} card {g['index']}: {milli} milli, {mib} MiB of {g['memoryMib']}"
                )
            for h in g["holders"]:
                where = seen.setdefault(h["task"], n["name"])
                if h["task"] and where != n["name"]:
                    problems.append(f"task {h['task']} on {where} and {n['name']}")
    return problems


# -- a real server ---------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """``gpupool serve`` as a child process on a free port, with the test's tokens."""

    def __init__(
        self,
        state: Path,
        *,
        speed: float = 1.0,
        interval: float = 0.05,
        extra: tuple[str, ...] = (),
    ) -> None:
        self.state = state
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = state.parent / f"serve-{self.port}.log"
        env = {**os.environ, "GPUPOOL_TOKENS": TOKENS_ENV}
        cmd = [
            sys.executable,
            "-m",
            "gpupool.cli",
            "serve",
            "--cluster",
            str(CLUSTER),
            "--queues",
            str(QUEUES),
            "--state",
            str(state),
            "--port",
            str(self.port),
            "--speed",
            str(speed),
            "--interval",
            str(interval),
            *extra,
        ]
        self._out = self.log.open("w")
        self.proc = subprocess.Popen(
            cmd, cwd=REPO, env=env, stdout=self._out, stderr=subprocess.STDOUT
        )

    def wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(
                    f"gpupool serve exited with {self.proc.returncode}:\n{self.log.read_text()}"
                )
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/healthz", timeout=1.0).status_code == 200:
                    return
            time.sleep(0.1)
        raise AssertionError(f"gpupool serve not ready after {timeout} s:\n{self.log.read_text()}")

    def client(self, token: str = ADMIN) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers=auth(token), timeout=10.0)

    def kill9(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)
        self._out.close()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self._out.close()


@contextlib.contextmanager
def serving(state: Path, **kwargs: Any) -> Iterator[Server]:
    server = Server(state, **kwargs)
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


def pretty(value: Any) -> str:
    return json.dumps(value, indent=1, default=str)[:2000]
