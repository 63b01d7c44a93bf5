"""A real kube-apiserver (with etcd) for the tests that need one, started once per session.

``scripts/k8s-fixture.sh install`` (run by ``make test``) builds the binaries once into
``$GPUPOOL_K8S_CACHE`` (default ``~/.cache/gpupool-k8s``). When they are missing these tests
skip, saying how to build them. Each pytest-xdist worker runs its own control plane on its
own ports (26443 + 20 x worker number, etcd at +1000 and +1001), so tests that restart the
API server or break watches disturb no other worker; within a worker tests run one at a time
and clean up the cluster-scoped objects they make.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "k8s-fixture.sh"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "k8s: runs against a real kube-apiserver (scripts/k8s-fixture.sh); "
        "skipped when it is not built",
    )


@dataclass
class ControlPlane:
    """One running control plane: ``env`` is what the fixture script needs to act on it."""

    port: int
    home: Path
    env: dict[str, str] = field(default_factory=dict)

    @property
    def kubeconfig(self) -> str:
        return str(self.home / "kubeconfig")

    def script(self, *args: str, extra: dict[str, str] | None = None, timeout: float = 120) -> str:
        proc = subprocess.run(
            [str(SCRIPT), *args],
            env={**self.env, **(extra or {})},
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"k8s-fixture.sh {' '.join(args)} failed:\n{proc.stderr}")
        return proc.stdout

    def kubectl(
        self, *args: str, stdin: str | None = None, check: bool = True, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        if shutil.which("kubectl") is None:
            pytest.skip("kubectl is not on PATH")
        proc = subprocess.run(
            ["kubectl", "--kubeconfig", self.kubeconfig, "--request-timeout=30s", *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and proc.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)}: {proc.stderr}")
        return proc

    def restart_apiserver(self, *flags: str) -> None:
        """Stops kube-apiserver (etcd keeps the data) and starts it again, with ``flags``
        added to its command line until the next restart."""
        self.script("stop-apiserver")
        self.script("start", extra={"GPUPOOL_K8S_APISERVER_ARGS": " ".join(flags)})

    def compact_etcd(self) -> int:
        """Compacts etcd's history up to now (as the API server does every 5 minutes), so a
        watch from an older version is answered 410 Gone. Returns the revision."""
        endpoint = f"127.0.0.1:{self.port + 1000}"
        env = {**self.env, "ETCDCTL_API": "3"}
        out = subprocess.run(
            ["etcdctl", f"--endpoints={endpoint}", "endpoint", "status", "-w", "json"],
            env=env,
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        ).stdout
        revision = int(json.loads(out)[0]["Status"]["header"]["revision"])
        subprocess.run(
            ["etcdctl", f"--endpoints={endpoint}", "compaction", str(revision)],
            env=env,
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        )
        return revision

    def token(self, line: int) -> str:
        return (self.home / "pki" / "tokens.csv").read_text().splitlines()[line].split(",")[0]


def _worker_index() -> int:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    digits = "".join(ch for ch in worker if ch.isdigit())
    return int(digits or 0)


@pytest.fixture(scope="session")
def control_plane() -> Iterator[ControlPlane]:
    env = dict(os.environ)
    built = subprocess.run([str(SCRIPT), "built"], env=env, capture_output=True, check=False)
    if built.returncode != 0:
        cache = env.get("GPUPOOL_K8S_CACHE", "~/.cache/gpupool-k8s")
        pytest.skip(
            f"kube-apiserver is not built in {cache}: run `make k8s-fixture` "
            "(scripts/k8s-fixture.sh install; about 10-15 minutes once)"
        )
    index = _worker_index()
    # GPUPOOL_K8S_TEST_PORT moves the whole range, so that two test runs on one machine (two
    # checkouts) do not share an API server.
    base = int(os.environ.get("GPUPOOL_K8S_TEST_PORT", "26443"))
    port = base + 20 * index
    home = Path(f"/tmp/gpupool-k8s-test-{os.getuid()}-{port}")
    env.update(GPUPOOL_K8S_PORT=str(port), GPUPOOL_K8S_HOME=str(home), GPUPOOL_K8S_CONTROLLERS="")
    cp = ControlPlane(port=port, home=home, env=env)
    cp.script("clean")
    try:
        cp.script("start")
    except RuntimeError as exc:
        pytest.skip(f"the k8s fixture did not start: {exc}")
    try:
        yield cp
    finally:
        cp.script("clean")
