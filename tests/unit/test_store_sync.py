"""Store.sync: the group commit behind ``transaction(durable=False)``."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from gpupool.store import Store
from gpupool.store import sqlite as store_module


def test_a_durable_transaction_fsyncs_the_wal(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = Store(path)
    calls: list[int] = []
    real = os.fsync
    monkeypatch.setattr(store_module.os, "fsync", lambda fd: (calls.append(fd), real(fd)))
    with store.transaction() as tx:
        tx.insert_job("ns/a", "ns", "a", "ns/q", {}, 1.0)
    assert len(calls) == 1
    with store.transaction(durable=False) as tx:
        tx.insert_job("ns/b", "ns", "b", "ns/q", {}, 1.0)
    assert len(calls) == 1, "a non-durable commit leaves the fsync to sync()"
    store.sync()
    store.sync()  # nothing new: no second fsync
    assert len(calls) == 2


def test_callers_that_sync_together_share_fsyncs(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store(path)
    calls: list[int] = []
    real = os.fsync

    def slow_fsync(fd: int) -> None:
        calls.append(fd)
        time.sleep(0.05)
        real(fd)

    monkeypatch.setattr(store_module.os, "fsync", slow_fsync)
    start = threading.Barrier(8)

    def submit(i: int) -> None:
        with store.transaction(durable=False) as tx:
            tx.insert_job(f"ns/j{i}", "ns", f"j{i}", "ns/q", {}, 1.0)
        start.wait()
        store.sync()

    threads = [threading.Thread(target=submit, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(store.jobs()) == 8
    assert 1 <= len(calls) <= 2, f"{len(calls)} fsyncs for 8 callers arriving together"


def test_a_failed_fsync_is_an_adapter_error_and_the_next_sync_tries_again(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpupool.core.errors import AdapterError

    store = Store(path)
    with store.transaction(durable=False) as tx:
        tx.insert_job("ns/a", "ns", "a", "ns/q", {}, 1.0)
    real = os.fsync

    def broken(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(store_module.os, "fsync", broken)
    with pytest.raises(AdapterError, match="fsync failed"):
        store.sync()
    calls: list[int] = []
    monkeypatch.setattr(store_module.os, "fsync", lambda fd: (calls.append(fd), real(fd)))
    store.sync()
    assert len(calls) == 1


def test_a_synced_write_survives_the_process_dying(path: Path) -> None:
    code = (
        "import os, sys\n"
        "from gpupool.store import Store\n"
        "s = Store(sys.argv[1])\n"
        "with s.transaction(durable=False) as tx:\n"
        "    tx.insert_job('ns/a', 'ns', 'a', 'ns/q', {'k': 1}, 1.0)\n"
        "s.sync()\n"
        "os._exit(0)\n"
    )  # no close, no checkpoint
    subprocess.run([sys.executable, "-c", code, str(path)], check=True, timeout=60)
    assert [r.key for r in Store(path).jobs()] == ["ns/a"]


def test_an_in_memory_store_syncs_as_a_no_op() -> None:
    store = Store(":memory:")
    with store.transaction(durable=False) as tx:
        tx.insert_job("ns/a", "ns", "a", "ns/q", {}, 1.0)
    store.sync()
    assert len(store.jobs()) == 1


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "state.db"
