"""``gpupool submit / get / describe / cancel`` against a real ``gpupool serve``, as a user runs
them: the example job files, tables parsed as a script would, errors and their exit codes,
tenants kept apart.

One server for the module (a child process on a free port, a temporary state file, the
example cluster and queues, tokens from ``GPUPOOL_TOKENS``, cluster time at 60x so the example
jobs, which last 90 minutes or more, keep running for the whole module). Most commands run
in-process through ``gpupool.cli.main``; stdin, ``--watch`` and the environment variables go
through a real ``gpupool`` process.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from gpupool.cli import main
from gpupool.client import errors
from gpupool.client.http import Client
from gpupool.client.render import age, card_mark, job_gpus, table

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples" / "jobs"
ADMIN = "cli-admin-token-0123456789"
RESEARCH = "cli-research-token-012345"
SERVING = "cli-serving-token-0123456"
TOKENS_ENV = (
    f"{ADMIN},admin,admin;{RESEARCH},research,tenant,research;{SERVING},serving,tenant,serving"
)
EXAMPLE_JOBS = {
    "research/llama-ft",
    "notebooks/jupyter-bob",
    "notebooks/mig-experiment",
    "serving/embed-api",
    "research/vit-sweep-lr1e-4",
    "research/vit-sweep-lr3e-4",
    "research/vit-sweep-lr1e-3",
}

Run = Callable[..., tuple[int, str, str]]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    state = tmp_path_factory.mktemp("cli-client") / "state.db"
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = state.parent / "serve.log"
    env = {**os.environ, "GPUPOOL_TOKENS": TOKENS_ENV}
    cmd = [
        sys.executable,
        "-m",
        "gpupool.cli",
        "serve",
        "--cluster",
        str(REPO / "examples" / "cluster.yaml"),
        "--queues",
        str(REPO / "examples" / "queues.yaml"),
        "--state",
        str(state),
        "--port",
        str(port),
        "--speed",
        "60",
        "--interval",
        "0.05",
    ]
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 30
            while True:
                assert proc.poll() is None, f"gpupool serve exited:\n{log.read_text()}"
                with contextlib.suppress(httpx.HTTPError):
                    if httpx.get(f"{url}/healthz", timeout=1.0).status_code == 200:
                        break
                assert time.monotonic() < deadline, f"not ready:\n{log.read_text()}"
                time.sleep(0.1)
            yield url
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)


@pytest.fixture
def run(server: str, capsys: pytest.CaptureFixture[str]) -> Run:
    """``gpupool ARGS --server URL --token TOKEN`` in-process: (exit code, stdout, stderr)."""

    def go(
        *args: str, token: str | None = ADMIN, server_url: str | None = None
    ) -> tuple[int, str, str]:
        capsys.readouterr()
        argv = [*args, "--server", server_url or server]
        if token is not None:
            argv += ["--token", token]
        code = main(argv)
        out = capsys.readouterr()
        return code, out.out, out.err

    return go


def rows(text: str) -> list[dict[str, str]]:
    """A table as a script reads it: split on runs of 2+ spaces, keyed by the header."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    header = lines[0].split()
    out = []
    for ln in lines[1:]:
        cells = [c for c in ln.split("   ") if c.strip()]
        cells = [c.strip() for c in cells]
        out.append(dict(zip(header, cells, strict=False)))
    return out


def taken(text: str) -> str:
    """Submit's output with the phase read as Pending: the answer is the job as it stood when
    the server took it, usually Pending, Running when a cycle ran in between."""
    return re.sub(r"submitted \((Pending|Running),", "submitted (Pending,", text)


def wait_for(predicate: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def phases(url: str, token: str = ADMIN) -> dict[str, str]:
    with Client(url, token) as c:
        return {
            f"{j['metadata']['namespace']}/{j['metadata']['name']}": j["status"]["phase"]
            for j in c.jobs()
        }


def job_file(tmp_path: Path, name: str, namespace: str | None = "research", **spec: Any) -> Path:
    body: dict[str, Any] = {
        "queue": "llm",
        "duration": "2h",
        "podSets": [{"name": "main", "count": 1, "cpu": 2, "memory": "8Gi", "gpu": {"count": 1}}],
    }
    body.update(spec)
    meta = {"name": name, **({"namespace": namespace} if namespace else {})}
    path = tmp_path / f"{name}.yaml"
    path.write_text(
        yaml.safe_dump(
            {"apiVersion": "gpupool.io/v1alpha1", "kind": "Job", "metadata": meta, "spec": body}
        )
    )
    return path


@pytest.fixture(scope="module")
def submitted(server: str) -> dict[str, str]:
    """Every example file submitted once (through the CLI, in-process); its stdout by file."""
    out: dict[str, str] = {}
    for path in sorted(EXAMPLES.glob("*.yaml")):
        lines: list[str] = []
        with contextlib.redirect_stdout(_Lines(lines)):
            code = main(["submit", "-f", str(path), "--server", server, "--token", ADMIN])
        assert code == 0, path
        out[path.name] = "".join(lines)
    wait_for(lambda: all(phases(server).get(k) == "Running" for k in EXAMPLE_JOBS))
    return out


class _Lines:
    def __init__(self, sink: list[str]) -> None:
        self.sink = sink

    def write(self, text: str) -> int:
        self.sink.append(text)
        return len(text)

    def flush(self) -> None:
        pass


# -- submit ----------------------------------------------------------------------------------


def test_example_files_are_accepted_and_run(submitted: dict[str, str]) -> None:
    said = {f: taken(text) for f, text in submitted.items()}
    assert said["training-gang.yaml"] == "job research/llama-ft submitted (Pending, queue llm)\n"
    assert (
        said["mig-pod.yaml"]
        == "job notebooks/mig-experiment submitted (Pending, queue notebooks)\n"
    )
    assert (
        said["notebook-slice.yaml"]
        == "job notebooks/jupyter-bob submitted (Pending, queue notebooks)\n"
    )
    assert said["inference.yaml"] == "job serving/embed-api submitted (Pending, queue serving)\n"
    assert said["sweep.yaml"].splitlines() == [
        f"job research/vit-sweep-{lr} submitted (Pending, queue vision)"
        for lr in ("lr1e-4", "lr3e-4", "lr1e-3")
    ]


def test_submit_reads_stdin_and_the_environment(
    server: str, submitted: dict[str, str], tmp_path: Path
) -> None:
    docs = "\n---\n".join(
        job_file(tmp_path, f"stdin-{i}", namespace=None, queue="vision").read_text()
        for i in range(2)
    )
    env = {**os.environ, "GPUPOOL_SERVER": server, "GPUPOOL_TOKEN": RESEARCH}
    proc = subprocess.run(
        [sys.executable, "-m", "gpupool.cli", "submit", "-f", "-"],
        input=docs,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert taken(proc.stdout).splitlines() == [
        "job research/stdin-0 submitted (Pending, queue vision)",
        "job research/stdin-1 submitted (Pending, queue vision)",
    ]


def test_submit_json_file_with_namespace_flag(
    run: Run, tmp_path: Path, submitted: dict[str, str]
) -> None:
    doc = yaml.safe_load(
        job_file(tmp_path, "from-json", namespace=None, queue="vision").read_text()
    )
    path = tmp_path / "job.json"
    path.write_text(json.dumps(doc))
    code, out, err = run("submit", "-f", str(path), "-n", "research", "-o", "json")
    assert code == 0, err
    job = json.loads(out)
    assert job["metadata"] == {**job["metadata"], "name": "from-json", "namespace": "research"}
    assert job["status"]["phase"] in ("Pending", "Running")
    # the namespace in the file and the flag must agree
    doc["metadata"]["namespace"] = "serving"
    path.write_text(json.dumps(doc))
    code, _, err = run("submit", "-f", str(path), "-n", "research")
    assert code == 2
    assert "metadata.namespace='serving' does not match --namespace research" in err


def test_bad_job_exits_2_naming_the_field(run: Run, tmp_path: Path) -> None:
    bad = job_file(tmp_path, "too-much", podSets=[{"name": "main", "gpu": {"milli": 1500}}])
    code, out, err = run("submit", "-f", str(bad))
    assert code == 2 and out == ""
    assert err.startswith("gpupool: error: InvalidJobError: spec.podSets[0].gpu.milli=1500: ")
    assert len(err.strip().splitlines()) == 1

    unknown = job_file(tmp_path, "typo", podSets=[{"name": "main", "gpus": 1}])
    code, _, err = run("submit", "-f", str(unknown))
    assert code == 2 and "spec.podSets[0].gpus" in err and "unknown field" in err

    broken = tmp_path / "broken.yaml"
    broken.write_text("metadata: {name: x\nspec: [")
    code, _, err = run("submit", "-f", str(broken))
    assert code == 2 and err.startswith(f"gpupool: error: ConfigError: {broken}: not valid YAML")

    code, _, err = run("submit", "-f", str(tmp_path / "missing.yaml"))
    assert code == 2 and "cannot read" in err


def test_one_bad_document_among_several(run: Run, tmp_path: Path, server: str) -> None:
    good = job_file(tmp_path, "multi-good", queue="vision").read_text()
    bad = job_file(tmp_path, "multi-bad", queue="nope").read_text()
    path = tmp_path / "multi.yaml"
    path.write_text(f"{bad}---\n{good}")
    code, out, err = run("submit", "-f", str(path))
    assert code == 2
    assert taken(out) == "job research/multi-good submitted (Pending, queue vision)\n"
    assert "InvalidJobError" in err and "document 1 (research/multi-bad)" in err
    assert "spec.queue='nope'" in err
    assert "research/multi-bad" not in phases(server)


# -- get -------------------------------------------------------------------------------------


def test_get_jobs_table(run: Run, submitted: dict[str, str]) -> None:
    code, out, _ = run("get", "jobs")
    assert code == 0
    assert out.splitlines()[0].split() == [
        "NAMESPACE",
        "NAME",
        "QUEUE",
        "PHASE",
        "GPUS",
        "AGE",
        "WAIT",
        "POSITION",
        "EST.START",
        "REASON",
    ]
    table_ = {f"{r['NAMESPACE']}/{r['NAME']}": r for r in rows(out)}
    assert set(table_) >= EXAMPLE_JOBS
    gang = table_["research/llama-ft"]
    assert (gang["QUEUE"], gang["PHASE"], gang["GPUS"]) == ("llm", "Running", "8")
    assert table_["notebooks/jupyter-bob"]["GPUS"] == "0.25"
    assert table_["notebooks/mig-experiment"]["GPUS"] == "1x1g.5gb"
    assert table_["serving/embed-api"]["GPUS"] == "1"

    code, out, _ = run("get", "jobs", "-n", "notebooks", "--phase", "running")
    assert {r["NAME"] for r in rows(out)} == {"jupyter-bob", "mig-experiment"}
    code, out, _ = run("get", "job", "research/llama-ft", "-o", "wide")
    (row,) = rows(out)
    assert row["FLAVOR"] == "a100" and row["USER"] == "alice" and row["PRIORITY"] == "normal"
    assert all(n.startswith("a100-") for n in row["NODES"].split(","))


def test_output_json_and_yaml_are_the_api_objects(run: Run, submitted: dict[str, str]) -> None:
    code, out, _ = run("get", "jobs", "-o", "json")
    assert code == 0
    items = json.loads(out)["items"]
    keys = {f"{j['metadata']['namespace']}/{j['metadata']['name']}" for j in items}
    assert keys >= EXAMPLE_JOBS
    code, out, _ = run("get", "job", "llama-ft", "-o", "yaml")
    job = yaml.safe_load(out)
    assert job["kind"] == "Job" and job["spec"]["minMember"] == 2
    assert len(job["status"]["placements"]) == 2
    code, out, _ = run("get", "nodes", "-o", "json")
    assert len(json.loads(out)["items"]) == 12
    code, out, _ = run("get", "queues", "llm", "-o", "json")
    assert json.loads(out)["status"]["runningJobs"] >= 1
    code, out, _ = run("get", "jobs", "-n", "serving", "-o", "name")
    assert "job/serving/embed-api" in out.splitlines()


def test_get_nodes_shows_cards(run: Run, submitted: dict[str, str]) -> None:
    code, out, _ = run("get", "nodes")
    assert code == 0
    nodes = {r["NAME"]: r for r in rows(out)}
    assert set(nodes) >= {"h100-0", "a100-0", "a100-mig-0", "a6000-0", "t4-0", "cpu-0"}
    assert nodes["cpu-0"]["GPUS"] == "0" and nodes["cpu-0"]["CARDS"] == "-"
    a100 = [n for name, n in nodes.items() if name.startswith("a100-") and "mig" not in name]
    # the gang holds 8 whole cards and the sweep 3 (other tests add single cards): every
    # card in use on the A100 nodes is a whole one
    full = sum(n["CARDS"].count("#") for n in a100)
    assert full >= 11
    assert all(set(n["CARDS"]) <= set("[#.]") for n in a100)
    assert sum(float(n["ALLOC%"]) for n in a100) == pytest.approx(100 * full / 8, abs=0.2)
    assert nodes["a100-mig-0"]["CARDS"].count(".") == 3  # one MIG instance taken
    assert any(n["CARDS"] != "[....]" for name, n in nodes.items() if name.startswith("t4"))
    code, out, _ = run("get", "nodes", "-o", "wide")
    assert rows(out)[0]["TAINTS"] == "nvidia.com/gpu=present:NoSchedule"


def test_get_queues_and_queue_objects(run: Run, submitted: dict[str, str]) -> None:
    code, out, _ = run("get", "queues")
    assert code == 0
    queues = {r["NAME"]: r for r in rows(out)}
    assert set(queues) == {"llm", "vision", "serving", "notebooks", "burst"}
    assert queues["llm"]["COHORT"] == "research"
    used, nominal = queues["llm"]["GPUS(USED/NOMINAL)"].split("/")
    assert (float(used), float(nominal)) == (8, 20)
    assert float(queues["llm"]["SHARE"]) > 0
    assert float(queues["llm"]["ENTITLED"]) >= 20  # nominal quota first
    code, out, _ = run("get", "cq", "-o", "wide")
    assert "a100:8/8" in rows(out)[0]["FLAVORS"]

    code, out, _ = run("get", "localqueues", "-n", "research")
    assert {(r["NAME"], r["CLUSTERQUEUE"]) for r in rows(out)} == {
        ("llm", "llm"),
        ("vision", "vision"),
        ("burst", "burst"),
    }
    code, out, _ = run("get", "flavors")
    flavors = {r["NAME"]: r for r in rows(out)}
    assert flavors["a100"]["GPUS"] == "24" and flavors["h100"]["NODES"] == "2"
    code, out, _ = run("get", "cohorts")
    assert {r["NAME"]: r["PARENT"] for r in rows(out)} == {
        "org": "-",
        "research": "org",
        "product": "org",
    }


def test_get_events(run: Run, submitted: dict[str, str]) -> None:
    code, out, _ = run("get", "events", "research/llama-ft")
    assert code == 0
    events = rows(out)
    assert [e["REASON"] for e in events][:2] == ["Submitted", "Admitted"]
    assert all(e["OBJECT"] == "research/llama-ft" for e in events)
    code, out, _ = run("get", "events", "--limit", "3", "-o", "json")
    assert len(json.loads(out)["items"]) == 3


def test_watch_prints_jobs_as_they_change(
    server: str, submitted: dict[str, str], run: Run, tmp_path: Path
) -> None:
    env = {**os.environ, "GPUPOOL_SERVER": server, "GPUPOOL_TOKEN": ADMIN}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gpupool.cli",
            "get",
            "jobs",
            "-w",
            "-n",
            "research",
            "--interval",
            "0.2",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().split()[:2] == ["NAMESPACE", "NAME"]
        code, _, err = run("submit", "-f", str(job_file(tmp_path, "watched", queue="vision")))
        assert code == 0, err
        seen = []
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            seen.append(line)
            if line.split()[1:2] == ["watched"]:
                break
        assert any(ln.split()[1:2] == ["watched"] for ln in seen), seen
    finally:
        proc.terminate()
        proc.wait(timeout=10)


# -- describe --------------------------------------------------------------------------------


def test_describe_job_shows_placements_card_by_card(run: Run, submitted: dict[str, str]) -> None:
    code, out, _ = run("describe", "job", "llama-ft")
    assert code == 0
    assert "Namespace:    research" in out
    assert "Phase:            Running" in out and "Flavor:           a100" in out
    assert "Gang:         2 of 2 replicas start together" in out
    # each time: its age, the instant (RFC 3339) and the cluster seconds
    started = next(ln for ln in out.splitlines() if ln.strip().startswith("Started:"))
    assert re.search(r"ago \(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z, t=[\d.]+s\)$", started), (
        started
    )
    placements = out.split("Placements:\n", 1)[1].split("Events:", 1)[0]
    lines = placements.strip().splitlines()
    assert lines[0].split() == ["TASK", "NODE", "CPU", "MEMORY", "CARD", "GPU", "GPU-MEMORY", "MIG"]
    assert len(lines) == 1 + 8  # one line per card
    workers = [ln.split() for ln in lines[1:] if ln.split()[0].startswith("workers-")]
    assert [w[0] for w in workers] == ["workers-0", "workers-1"]
    assert {w[1] for w in workers} <= {"a100-0", "a100-1", "a100-2"}
    events = out.split("Events:\n", 1)[1]
    assert "Submitted" in events and "Admitted" in events


def test_describe_pending_job_gives_the_reason_then_cancel(
    run: Run, tmp_path: Path, server: str
) -> None:
    # 4 x 8 H100 is more than queue llm could ever hold, even borrowing: refused outright
    never = job_file(
        tmp_path,
        "never-fits",
        podSets=[
            {
                "name": "workers",
                "count": 4,
                "cpu": 8,
                "memory": "64Gi",
                "gpu": {"count": 8, "models": ["H100-80GB"]},
            }
        ],
    )
    code, _, err = run("submit", "-f", str(never))
    assert code == 2 and "can never be admitted by ClusterQueue llm" in err, err
    # every H100 the queue may hold, with borrowing, for days; then 8 more must wait
    hold = job_file(
        tmp_path,
        "h100-holder",
        duration="100h",
        podSets=[
            {
                "name": "workers",
                "count": 2,
                "cpu": 8,
                "memory": "64Gi",
                "gpu": {"count": 8, "models": ["H100-80GB"]},
            }
        ],
    )
    assert run("submit", "-f", str(hold))[0] == 0
    big = job_file(
        tmp_path,
        "huge-pretrain",
        podSets=[
            {
                "name": "workers",
                "count": 1,
                "cpu": 8,
                "memory": "64Gi",
                "gpu": {"count": 8, "models": ["H100-80GB"]},
            }
        ],
    )
    code, out, _ = run("submit", "-f", str(big))
    assert out == "job research/huge-pretrain submitted (Pending, queue llm)\n"

    def parked() -> bool:
        with Client(server, ADMIN) as c:
            return "quota" in (c.job("research", "huge-pretrain")["status"]["pendingReason"])

    wait_for(parked)
    code, out, _ = run("describe", "job", "research/huge-pretrain")
    assert code == 0
    assert "Phase:            Pending" in out
    reason = next(ln for ln in out.splitlines() if "Pending reason:" in ln)
    assert "queue llm" in reason and "quota" in reason
    assert "Queue position:" in out and "Placements:   <none>" in out
    code, out, _ = run("get", "jobs", "research/huge-pretrain")
    (row,) = rows(out)
    assert row["PHASE"] == "Pending" and row["POSITION"].isdigit() and "quota" in row["REASON"]

    code, out, _ = run("cancel", "job", "huge-pretrain", "-n", "research")
    assert (code, out) == (0, "job research/huge-pretrain cancelled (was Pending)\n")
    code, out, _ = run("get", "job", "research/huge-pretrain")
    assert rows(out)[0]["PHASE"] == "Cancelled"
    # cancelling again changes nothing: the record stays
    code, out, _ = run("cancel", "job", "research/huge-pretrain")
    assert (code, out) == (
        0,
        "job research/huge-pretrain had ended already (Cancelled): left as it is\n",
    )
    assert rows(run("get", "job", "research/huge-pretrain")[1])[0]["PHASE"] == "Cancelled"
    # delete takes the form -o name prints, and removes the record
    code, out, _ = run("delete", "job/research/huge-pretrain", "-o", "name")
    assert (code, out) == (0, "job/research/huge-pretrain\n")
    code, _, err = run("get", "job", "research/huge-pretrain")
    assert code == 2 and "NotFoundError: job research/huge-pretrain not found" in err


def test_cancel_a_running_job_frees_its_cards(run: Run, tmp_path: Path, server: str) -> None:
    code, _, _ = run("submit", "-f", str(job_file(tmp_path, "short-lived", queue="vision")))
    wait_for(lambda: phases(server).get("research/short-lived") == "Running")
    node = json.loads(run("get", "job", "research/short-lived", "-o", "json")[1])["status"][
        "placements"
    ][0]["node"]
    assert "research/short-lived" in run("describe", "node", node)[1]
    code, out, _ = run("cancel", "job", "research/short-lived")
    assert (code, out) == (0, "job research/short-lived cancelled (was Running)\n")
    assert phases(server)["research/short-lived"] == "Cancelled"
    assert "research/short-lived" not in run("describe", "node", node)[1]


def test_describe_node_lists_cards_and_holders(run: Run, submitted: dict[str, str]) -> None:
    code, out, _ = run("describe", "node", "a100-mig-0")
    assert code == 0
    assert "Flavor:       a100-mig" in out
    cards = out.split("Cards:\n", 1)[1].split("Holders:", 1)[0].strip().splitlines()
    assert len(cards) == 1 + 4 and "1g.5gb" in cards[1]
    holders = out.split("Holders:\n", 1)[1].strip().splitlines()
    assert holders[0].split() == ["CARD", "JOB", "TASK", "GPU", "GPU-MEMORY", "MIG"]
    assert any("notebooks/mig-experiment" in h and "1g.5gb" in h for h in holders)


# -- errors ----------------------------------------------------------------------------------


def test_wrong_or_missing_token_exits_2_with_an_auth_message(run: Run) -> None:
    code, out, err = run("get", "jobs", token="not-a-known-token-at-all")
    assert code == 2 and out == ""
    assert err.startswith("gpupool: error: Unauthorized: the token is not known")
    assert "--token" in err
    code, _, err = run("get", "nodes", token=None)
    assert code == 2 and "Unauthorized: a bearer token is needed" in err


def test_unreachable_server_exits_1(run: Run) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    code, out, err = run("get", "jobs", server_url=url)
    assert code == 1 and out == ""
    assert err.startswith(f"gpupool: error: Unreachable: cannot reach the server at {url}")
    assert len(err.strip().splitlines()) == 1


def test_tenants_see_and_cancel_only_their_own_jobs(
    run: Run, server: str, submitted: dict[str, str], tmp_path: Path
) -> None:
    code, out, _ = run("get", "jobs", token=RESEARCH)
    assert code == 0 and {r["NAMESPACE"] for r in rows(out)} == {"research"}
    code, _, err = run("get", "job", "serving/embed-api", token=RESEARCH)
    assert code == 2 and "NotFoundError: job serving/embed-api not found" in err
    code, _, err = run("describe", "job", "embed-api", token=RESEARCH)
    assert code == 2 and "not found" in err
    code, _, err = run("cancel", "job", "serving/embed-api", token=RESEARCH)
    assert code == 2 and "not found" in err
    assert phases(server)["serving/embed-api"] == "Running"
    # its own namespace is the default for a name alone
    code, out, _ = run("get", "job", "llama-ft", token=RESEARCH)
    assert code == 0 and rows(out)[0]["NAME"] == "llama-ft"
    # submitting into another namespace is refused
    other = job_file(tmp_path, "intruder", namespace="serving", queue="serving")
    code, _, err = run("submit", "-f", str(other), token=RESEARCH)
    assert code == 2 and "Forbidden" in err
    # cards held by other tenants show how much, not by whom
    embed = json.loads(run("get", "job", "serving/embed-api", "-o", "json")[1])
    node = embed["status"]["placements"][0]["node"]
    code, out, _ = run("describe", "node", node, token=RESEARCH)
    assert "(another tenant)" in out and "embed-api" not in out
    # a tenant lists the LocalQueues of its own namespaces
    code, out, _ = run("get", "localqueues", token=SERVING)
    assert {r["NAMESPACE"] for r in rows(out)} == {"serving"}


def test_unknown_names(run: Run) -> None:
    code, _, err = run("get", "node", "nope")
    assert code == 2 and "NotFoundError: node nope not found" in err
    code, _, err = run("describe", "job", "no-such-job")
    assert code == 2 and "job no-such-job not found" in err
    with pytest.raises(SystemExit) as exc:
        main(["get", "pods"])
    assert exc.value.code == 2


# -- pieces ----------------------------------------------------------------------------------


def test_errors_map_status_and_name_to_classes() -> None:
    from gpupool.core import errors as core

    e = errors.from_response(
        422,
        {
            "error": "InvalidJobError",
            "message": "a.b=1: rule",
            "details": {"field": "a.b", "value": 1, "rule": "rule"},
        },
        "POST x",
    )
    assert isinstance(e, core.InvalidJobError) and isinstance(e, errors.InvalidJobError)
    assert (e.field, e.value, e.rule, str(e)) == ("a.b", 1, "rule", "a.b=1: rule")
    assert isinstance(
        errors.from_response(404, {"error": "NotFoundError", "message": "m"}, ""),
        core.NotFoundError,
    )
    assert isinstance(
        errors.from_response(409, {"error": "ConflictError", "message": "m"}, ""),
        core.ConflictError,
    )
    assert (
        type(errors.from_response(401, {"error": "Unauthorized", "message": "m"}, ""))
        is errors.Unauthorized
    )
    assert (
        type(errors.from_response(403, {"error": "Forbidden", "message": "m"}, ""))
        is errors.Forbidden
    )
    e = errors.from_response(413, {"error": "PayloadTooLarge", "message": "big"}, "")
    assert type(e) is errors.BadRequest and str(e) == "PayloadTooLarge: big"
    e = errors.from_response(500, {"error": "InternalError", "message": "boom"}, "")
    assert isinstance(e, core.AdapterError) and str(e) == "InternalError: boom"
    e = errors.from_response(502, "<html>bad gateway</html>", "GET http://h/api/v1/jobs")
    assert isinstance(e, errors.ServerError) and "GET http://h/api/v1/jobs: HTTP 502" in str(e)


def test_every_error_response_is_a_response_error_and_the_old_name_warns() -> None:
    for status, name in (
        (400, "BadRequest"),
        (404, "NotFoundError"),
        (422, "InvalidRequest"),
        (503, "AdapterError"),
    ):
        e = errors.from_response(status, {"error": name, "message": "m"}, "")
        assert isinstance(e, errors.ResponseError) and e.status == status
    with pytest.warns(DeprecationWarning, match="ResponseError"):
        from gpupool.client.errors import ApiError  # the root's earlier name
    assert ApiError is errors.ResponseError
    with pytest.raises(AttributeError, match="NoSuchError"):
        errors.NoSuchError  # noqa: B018


def test_render_pieces() -> None:
    assert [
        age(s) for s in (5, 130, 600, 3 * 3600 + 60, 30 * 3600, 3 * 86400 + 7200, 20 * 86400)
    ] == ["5s", "2m10s", "10m", "3h1m", "30h", "3d2h", "20d"]
    assert card_mark({"usedMilli": 0}) == "."
    assert card_mark({"usedMilli": 250}) == "3"
    assert card_mark({"usedMilli": 1000}) == "#"
    assert card_mark({"usedMilli": 0, "healthy": False}) == "x"
    assert card_mark({"usedMilli": 1000, "mig": [{"count": 7, "free": 0}]}) == "#"
    # a MIG card shows the server's figure (core.mig): its one 1g instance of a 1g and a 3g
    # taken is its declared 140, not half the card
    assert (
        card_mark(
            {
                "usedMilli": 140,
                "mig": [
                    {"profile": "1g.10gb", "count": 1, "free": 0},
                    {"profile": "3g.40gb", "count": 1, "free": 1},
                ],
            }
        )
        == "2"
    )
    assert (
        job_gpus(
            {"podSets": [{"count": 2, "gpu": {"count": 4}}, {"count": 1, "gpu": {"mig": "1g.5gb"}}]}
        )
        == "8+1x1g.5gb"
    )
    assert table(("A", "LONG"), [("xx", None), ("", "y z")]) == "A    LONG\nxx   -\n-    y z"


def test_get_jobs_hides_ended_jobs_unless_asked(run: Run, tmp_path: Path, server: str) -> None:
    code, _, _ = run(
        "submit", "-f", str(job_file(tmp_path, "quick-one", queue="vision", duration="1m"))
    )
    assert code == 0
    wait_for(lambda: phases(server).get("research/quick-one") == "Succeeded")
    names = {r["NAME"] for r in rows(run("get", "jobs", "-n", "research")[1])}
    assert "quick-one" not in names and names  # the running example jobs are there
    assert all(r["PHASE"] in ("Pending", "Running") for r in rows(run("get", "jobs")[1]))
    assert "quick-one" in {r["NAME"] for r in rows(run("get", "jobs", "--show-all")[1])}
    assert "quick-one" in {r["NAME"] for r in rows(run("get", "jobs", "-a")[1])}
    shown = rows(run("get", "jobs", "--phase", "Succeeded")[1])
    assert {r["NAME"] for r in shown} == {"quick-one"}
    assert rows(run("get", "job", "research/quick-one")[1])[0]["PHASE"] == "Succeeded"


def test_a_long_reason_is_printed_whole() -> None:
    from gpupool.client.render import jobs_table

    reason = (
        "0/12 nodes fit: "
        + "8 no GPU with 500 milli and 20000 MiB free, " * 4
        + "4 cordoned; queue llm at quota (6/6 GPUs)"
    )
    job = {
        "metadata": {"namespace": "research", "name": "waits"},
        "spec": {},
        "status": {"phase": "Pending", "pendingReason": reason, "submitTimeSeconds": 0.0},
    }
    assert jobs_table([job], 10.0).splitlines()[1].endswith(reason)
