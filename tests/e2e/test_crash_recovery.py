"""``kill -9`` of a real ``gpupool serve`` mid-load, then a restart on the same state file.

The promise (issue 5, "Durable state"): a 201 means the job is on disk; after ``kill -9`` and
a restart nothing acknowledged is lost, no GPU is allocated twice, running jobs carry on where
they ran, and the scheduler goes on.

The server runs at x60 (a 2-minute job takes 2 wall seconds), and threads submit jobs of every
kind (whole GPUs, gangs, slices, MIG instances, CPU only) from each tenant's token, as fast as
it answers, until the process is killed under them. The first restart runs no scheduling cycle
(``--interval`` of an hour), so what it serves is exactly what it read from the file; the
second runs cycles again.
"""

from __future__ import annotations

import itertools
import os
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from tests.e2e.serve_kit import (
    ADMIN,
    TENANTS,
    TOKENS_ENV,
    Server,
    camel_keys,
    holders_ok,
    job_doc,
    pretty,
    serving,
)

SPEED = 60.0
DURATIONS = ["1m", "2m", "20m", "1h"]  # 1 to 60 wall seconds at x60
SHAPES: list[tuple[str, str, dict[str, Any]]] = [
    ("research", "llm", {"gpus": 1}),
    ("research", "llm", {"gpus": 8, "count": 2}),  # a gang of two whole nodes
    ("research", "vision", {"gpus": 2}),
    ("research", "vision", {"gpus": 4}),
    ("serving", "serving", {"milli": 250, "gpu_memory": "4Gi"}),
    ("serving", "serving", {"milli": 500, "gpu_memory": "8Gi", "count": 2}),
    ("notebooks", "notebooks", {"mig": "1g.5gb"}),
    ("notebooks", "notebooks", {"milli": 300, "gpu_memory": "6Gi"}),
    ("research", "llm", {"gpus": None, "cpu": 2, "memory": "4Gi"}),  # CPU only
]


class Load:
    """Threads submitting jobs until the server stops answering; every 201 is recorded."""

    def __init__(self, url: str, threads: int = 4) -> None:
        self.url = url
        self.acked: list[str] = []
        self.refused: list[str] = []
        self.lock = threading.Lock()
        self.counter = itertools.count()
        self.stop = threading.Event()
        self.threads = [
            threading.Thread(target=self._run, args=(t,), daemon=True) for t in range(threads)
        ]
        self.threads.append(threading.Thread(target=self._churn, daemon=True))
        self.threads.append(threading.Thread(target=self._watch, daemon=True))
        self.seen_running: dict[str, list[dict[str, Any]]] = {}  # key -> placements, as read
        self.cancelled: list[str] = []  # cancels answered 200 with the job Cancelled
        self.deleted: list[str] = []  # deletes answered 200: the record is gone
        self.nodes: dict[tuple[str, str], bool] = {}  # (node, field) -> last acknowledged
        self.in_flight: tuple[str, str] | None = None  # a node change sent, not answered
        self.job_in_flight: str | None = None  # a cancel or delete sent, not answered

    def start(self) -> Load:
        for t in self.threads:
            t.start()
        return self

    def _run(self, t: int) -> None:
        clients = {
            ns: httpx.Client(
                base_url=self.url, timeout=5.0, headers={"Authorization": f"Bearer {tok}"}
            )
            for ns, tok in TENANTS.items()
        }
        try:
            while not self.stop.is_set():
                n = next(self.counter)
                ns, queue, shape = SHAPES[n % len(SHAPES)]
                doc = job_doc(
                    f"load-{n}", ns, queue, duration=DURATIONS[n % 4 if n % 7 else 1], **shape
                )
                try:
                    r = clients[ns].post("/api/v1/jobs", json=doc)
                except httpx.HTTPError:
                    return  # the server is gone
                with self.lock:
                    if r.status_code == 201:
                        self.acked.append(f"{ns}/load-{n}")
                    else:
                        self.refused.append(f"{r.status_code} {r.text[:200]}")
        finally:
            for c in clients.values():
                c.close()

    def _churn(self) -> None:
        """The admin at work meanwhile: cancelling jobs, failing and recovering a node,
        cordoning and uncordoning another."""
        c = httpx.Client(
            base_url=self.url, timeout=5.0, headers={"Authorization": f"Bearer {ADMIN}"}
        )
        chosen: set[str] = set()
        try:
            for k in itertools.count():
                if self.stop.is_set():
                    return
                time.sleep(0.03)
                if k % 2:
                    node, what = ("a6000-0", "failed") if k % 4 == 1 else ("t4-0", "unschedulable")
                    value = not self.nodes.get((node, what), False)
                    self.in_flight = (node, what)
                    r = c.patch(f"/api/v1/nodes/{node}", json={what: value})
                    assert r.status_code == 200, r.text
                    self.nodes[(node, what)] = value
                    self.in_flight = None
                else:
                    with self.lock:
                        todo = [key for key in self.acked[-40:] if key not in chosen]
                    if not todo:
                        continue
                    key = todo[k % len(todo)]
                    chosen.add(key)
                    self.job_in_flight = key  # (one sent as it died may have landed or not)
                    if k % 4 == 2:  # a delete: its record goes, whatever its phase
                        r = c.delete(f"/api/v1/jobs/{key}")
                        assert r.status_code == 200, r.text
                        self.deleted.append(key)
                    else:  # a cancel: an active job is Cancelled, an ended one stays
                        r = c.post(f"/api/v1/jobs/{key}/cancel")
                        assert r.status_code == 200, r.text
                        if r.json()["status"]["phase"] == "Cancelled":
                            self.cancelled.append(key)
                    self.job_in_flight = None
        except httpx.HTTPError:
            return
        finally:
            c.close()

    def _watch(self) -> None:
        """A reader meanwhile: every job it once saw running, and where."""
        c = httpx.Client(
            base_url=self.url, timeout=5.0, headers={"Authorization": f"Bearer {ADMIN}"}
        )
        try:
            while not self.stop.is_set():
                page = c.get("/api/v1/jobs", params={"phase": "Running", "limit": 5000})
                for j in page.json()["items"]:
                    key = f"{j['metadata']['namespace']}/{j['metadata']['name']}"
                    self.seen_running[key] = j["status"]["placements"]
                time.sleep(0.05)
        except httpx.HTTPError:
            return
        finally:
            c.close()

    def join(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=10)


def rows(state: Path) -> dict[str, dict[str, Any]]:
    """The jobs table as the killed process left it (a reader recovers the WAL)."""
    import json

    db = sqlite3.connect(state)
    db.row_factory = sqlite3.Row
    try:
        return {
            r["key"]: {**dict(r), "placements": json.loads(r["placements"])}
            for r in db.execute("SELECT * FROM jobs")
        }
    finally:
        db.close()


def all_jobs(c: httpx.Client) -> dict[str, dict[str, Any]]:
    """Every job through the API, page by page."""
    out: dict[str, dict[str, Any]] = {}
    after = 0
    while True:
        page = c.get("/api/v1/jobs", params={"limit": 400, "after": after}).json()
        for j in page["items"]:
            out[f"{j['metadata']['namespace']}/{j['metadata']['name']}"] = j
        if page["continue"] is None:
            return out
        after = page["continue"]


def check_cards(c: httpx.Client) -> None:
    """No card over-held, no task on two nodes, and the cards' holders are exactly the
    running jobs' placements: read as one view (the nodes the same before and after the
    jobs are read, since a server that schedules meanwhile moves both)."""
    for _ in range(50):
        nodes = c.get("/api/v1/nodes").json()["items"]
        jobs = all_jobs(c)
        if c.get("/api/v1/nodes").json()["items"] == nodes:
            break
    else:
        raise AssertionError("the cards changed under every read of the jobs")
    assert holders_ok(nodes) == []
    held = sorted(
        (n["name"], g["index"], h["task"], h["migProfile"] or (h["gpuMilli"], h["memoryMib"]))
        for n in nodes
        for g in n["gpus"]
        for h in g["holders"]
    )
    placed = sorted(
        (p["node"], s["index"], p["task"], s["migProfile"] or (s["gpuMilli"], s["memoryMib"]))
        for j in jobs.values()
        if j["status"]["phase"] == "Running"
        for p in j["status"]["placements"]
        for s in p["gpus"]
    )
    assert held == placed
    for j in jobs.values():  # (an ended job keeps where it ran, as a record)
        if j["status"]["phase"] == "Pending":
            assert j["status"]["placements"] == [], pretty(j)


def wait_for(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"not within {timeout} s: {what}")


def test_kill_9_mid_load_loses_nothing_acknowledged_and_running_jobs_carry_on(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state.db"

    # -- load, then kill -9 while the submitters are still going ----------------------------
    server = Server(state, speed=SPEED, interval=0.05)
    try:
        server.wait_ready()
        with server.client() as c:  # node changes before the load: they must persist too
            assert c.patch("/api/v1/nodes/t4-1", json={"unschedulable": True}).is_success
            assert c.patch("/api/v1/nodes/a6000-1", json={"failed": True}).is_success
            assert (
                c.post(
                    "/api/v1/nodes",
                    json={
                        "name": "extra",
                        "count": 1,
                        "cpu": 64,
                        "memory": "256Gi",
                        "labels": {"gpupool.io/flavor": "a6000"},
                        "gpus": {"model": "RTX-A6000", "count": 4, "memory": "48Gi"},
                    },
                ).status_code
                == 201
            )
        load = Load(server.url).start()
        with server.client() as c:
            wait_for(
                lambda: (
                    len(load.acked) >= 300
                    and c.get("/api/v1/cluster").json()["jobs"]["Running"] >= 10
                ),
                60,
                "300 jobs acknowledged and 10 running",
            )
        server.kill9()
    finally:
        server.stop()
    load.join()
    acked = list(load.acked)
    assert not [r for r in load.refused if not r.startswith("422")], load.refused[:5]

    on_disk = rows(state)
    assert load.cancelled and load.nodes
    for key in load.cancelled:
        assert on_disk[key]["phase"] == "Cancelled", on_disk[key]
    assert not [k for k in load.deleted if k in on_disk]
    acked = [k for k in acked if k not in load.deleted and k != load.job_in_flight]
    missing = [k for k in acked if k not in on_disk]
    assert not missing, f"{len(missing)} acknowledged jobs not in the state file: {missing[:5]}"
    running_at_kill = {k: r for k, r in on_disk.items() if r["phase"] == "Running"}
    pending_at_kill = {k for k, r in on_disk.items() if r["phase"] == "Pending"}
    assert running_at_kill and pending_at_kill

    # -- restart without cycles: what it serves is what it read ------------------------------
    with serving(state, speed=SPEED, interval=3600.0) as server, server.client() as c:
        jobs = all_jobs(c)
        assert set(on_disk) == set(jobs)
        for key, row in running_at_kill.items():
            status = jobs[key]["status"]
            assert status["phase"] == "Running", pretty(jobs[key])
            assert status["placements"] == camel_keys(row["placements"])
            assert status["startTimeSeconds"] == round(row["started_s"], 3)
        for key in pending_at_kill:
            assert jobs[key]["status"]["phase"] == "Pending"
        check_cards(c)
        nodes = {n["name"]: n for n in c.get("/api/v1/nodes").json()["items"]}
        assert [nodes[n]["state"] for n in ("t4-1", "a6000-1", "extra-0")] == [
            "cordoned",
            "failed",
            "ready",
        ]
        for (node, what), value in load.nodes.items():
            if load.in_flight != (node, what):  # (one sent as it died may have landed or not)
                assert nodes[node][what] is value, (node, what)
        failed = {n for n, v in nodes.items() if v["failed"]}
        assert not [
            j
            for j in jobs.values()
            if j["status"]["phase"] == "Running"
            and {p["node"] for p in j["status"]["placements"]} & failed
        ]
        for key in load.cancelled:
            assert jobs[key]["status"]["phase"] == "Cancelled"
        # what a client saw running, it finds running there still, or ended, unless a
        # decision since moved it: a cancel, a preemption, the churned node failing
        assert len(load.seen_running) >= 10
        for key, placements in load.seen_running.items():
            status = jobs[key]["status"] if key in jobs else None
            if status is None:
                assert key in (*load.deleted, load.job_in_flight)
                continue
            moved = (
                key in (*load.cancelled, load.job_in_flight)
                or status["preemptions"] > 0
                or any(p["node"] == "a6000-0" for p in placements)
            )
            if status["phase"] == "Running":
                assert moved or status["placements"] == placements, (key, pretty(status))
            else:
                assert moved or status["phase"] in ("Succeeded", "Failed"), (key, status)
        cluster = c.get("/api/v1/cluster").json()
        assert cluster["gpuMilli"]["used"] == sum(
            s["gpu_milli"]
            for r in running_at_kill.values()
            for p in r["placements"]
            for s in p["gpus"]
        )
        recovered = [
            e
            for e in c.get("/api/v1/events", params={"limit": 50}).json()["items"]
            if e["reason"] == "Recovered"
        ]
        assert recovered and f"{len(running_at_kill)} running" in recovered[-1]["message"]
        server.kill9()  # and once more, idle this time

    # -- restart with cycles: the scheduler carries on ----------------------------------------
    with serving(state, speed=SPEED, interval=0.05) as server, server.client() as c:
        short = [
            k
            for k, r in running_at_kill.items()
            if r["document"] and '"duration": "1m"' in r["document"]
        ]

        def carried_on() -> bool:
            jobs = all_jobs(c)
            started = [k for k in pending_at_kill if jobs[k]["status"]["phase"] != "Pending"]
            ended = all(jobs[k]["status"]["phase"] == "Succeeded" for k in short)
            return bool(started) and ended

        wait_for(carried_on, 60, "a job pending at the kill admitted; 1-minute jobs ended")
        jobs = all_jobs(c)
        assert set(acked) <= set(jobs)
        for key, row in running_at_kill.items():
            status = jobs[key]["status"]
            if status["preemptions"] > row["preemptions"]:
                continue  # preempted since by the scheduler: a decision, not a loss
            assert status["phase"] in ("Running", "Succeeded"), pretty(jobs[key])
            if status["phase"] == "Running":
                assert status["placements"] == camel_keys(row["placements"])
        check_cards(c)
        # new work is taken as before
        r = httpx.post(
            f"{server.url}/api/v1/jobs",
            json=job_doc("after-restart"),
            headers={"Authorization": f"Bearer {ADMIN}"},
        )
        assert r.status_code == 201, r.text


def test_serve_refuses_a_state_file_from_a_newer_gpupool_and_leaves_it(tmp_path: Path) -> None:
    state = tmp_path / "state.db"
    db = sqlite3.connect(state)
    db.execute("PRAGMA user_version=99")
    db.commit()
    db.close()
    db = sqlite3.connect(state)
    db.execute("CREATE TABLE mine (a INTEGER)")  # a table gpupool does not know
    db.commit()
    db.close()
    out = subprocess.run(
        [sys.executable, "-m", "gpupool.cli", "serve", "--state", str(state), "--port", "0"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "GPUPOOL_TOKENS": TOKENS_ENV},
    )
    assert out.returncode == 1  # the outside world (the state file) is the problem
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "schema version 99" in lines[0] and "upgrade" in lines[0]
    db = sqlite3.connect(state)
    assert db.execute("PRAGMA user_version").fetchone()[0] == 99
    assert [r[0] for r in db.execute("SELECT name FROM sqlite_master")] == ["mine"]
    db.close()
