"""One state file, one server: a second ``gpupool serve`` on a state file in use stops before
it does anything, naming the pid that serves it; and a state file in which two running jobs
hold one card (as two servers would have left it) still opens: the job that started first
keeps the card, the later one goes back to its queue with a Warning event."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

from gpupool.control.statelock import StateLock
from gpupool.core.errors import ConflictError
from tests.e2e.serve_kit import (
    CLUSTER,
    QUEUES,
    REPO,
    TOKENS_ENV,
    Wall,
    dump,
    free_port,
    job_doc,
    job_row,
    make_plane,
    serving,
)


def test_a_second_server_on_the_same_state_file_stops_naming_the_first(tmp_path: Path) -> None:
    state = tmp_path / "state.db"
    with serving(state, interval=3600) as first:  # no cycle: the file changes only if written
        with first.client() as c:
            assert c.post("/api/v1/jobs", json=job_doc("mine")).status_code == 201
        before = dump(state)
        port = free_port()
        out = subprocess.run(
            [
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
                str(port),
            ],
            cwd=REPO,
            env={**os.environ, "GPUPOOL_TOKENS": TOKENS_ENV},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert out.returncode == 2, out.stderr
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1, out.stderr
        assert f"already served by pid {first.proc.pid}" in lines[0], lines[0]
        assert str(state) in lines[0]
        after = dump(state)
        assert after["jobs"] == before["jobs"]  # the second server wrote nothing
        with first.client() as c:  # and the first one serves on
            assert c.get("/api/v1/jobs/research/mine").status_code == 200


def test_the_lock_goes_with_its_holder(tmp_path: Path) -> None:
    state = tmp_path / "state.db"
    with StateLock(state):
        other = StateLock(state)
        try:
            other.acquire()
        except ConflictError as exc:
            assert f"pid {os.getpid()}" in str(exc)
        else:
            raise AssertionError("a second lock on a held state file was granted")
    with StateLock(state):  # released: taken again
        pass


def test_a_restore_requeues_the_later_of_two_holders_of_a_card(tmp_path: Path) -> None:
    state, wall = tmp_path / "state.db", Wall()
    plane = make_plane(state, wall)
    plane.submit(job_doc("first", gpus=8, models=["H100-80GB"], duration="1h"))
    plane.tick()
    wall.advance(5)
    plane.submit(job_doc("later", gpus=8, models=["H100-80GB"], duration="1h"))
    plane.tick()
    assert plane.job("research/first").phase == plane.job("research/later").phase == "Running"
    plane.store.close()
    # what two servers on one file leave: the later job on the first one's cards
    db = sqlite3.connect(state)
    db.execute(
        "UPDATE jobs SET placements=(SELECT replace(placements, ?, ?) FROM jobs "
        "WHERE key=?) WHERE key=?",
        ("research/first", "research/later", "research/first", "research/later"),
    )
    db.commit()
    db.close()

    again = make_plane(state, wall)  # opens: no ConflictError
    first, later = again.job("research/first"), again.job("research/later")
    assert first.phase == "Running" and first.placements
    assert later.phase == "Pending" and not later.placements
    assert "held by another job" in later.message
    row = job_row(state, "research/later")
    assert row is not None and row["phase"] == "Pending" and row["placements"] == "[]"
    warnings = [e for e in again.store.events(limit=1000) if e.reason == "RestoreConflict"]
    assert len(warnings) == 1 and warnings[0].type == "Warning"
    assert warnings[0].object == "research/later"
    again.tick()  # the other H100 node is free: it runs again, on cards of its own
    later = again.job("research/later")
    assert later.phase == "Running"
    held = {(p.node, s.index) for p in first.placements for s in p.shares}
    assert not held & {(p.node, s.index) for p in later.placements for s in p.shares}
