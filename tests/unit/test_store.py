"""The state file of ``gpupool serve``: schema versions, transactions, what survives a reopen."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest

from gpupool.core.errors import AdapterError, ConflictError
from gpupool.store import MIGRATIONS, NewEvent, Store
from gpupool.store import sqlite as store_module


def event(obj: str, namespace: str = "", reason: str = "Submitted") -> NewEvent:
    return NewEvent(1.0, "Normal", reason, "Job", obj, namespace, f"{reason} {obj}")


def tables(path: Path) -> dict[str, list[tuple[object, ...]]]:
    db = sqlite3.connect(path)
    try:
        names = [
            r[0]
            for r in db.execute(
                "SELECT name FROM sqlite_master WHERE type='table' "
                "AND name NOT LIKE 'sqlite_%' ORDER BY name"
            )
        ]
        return {n: db.execute(f"SELECT * FROM {n} ORDER BY rowid").fetchall() for n in names}
    finally:
        db.close()


def user_version(path: Path) -> int:
    db = sqlite3.connect(path)
    try:
        return int(db.execute("PRAGMA user_version").fetchone()[0])
    finally:
        db.close()


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "nested" / "state.db"


# -- schema versions ---------------------------------------------------------------------------


def test_a_new_file_gets_the_latest_schema_in_wal_mode(path: Path) -> None:
    store = Store(path)
    assert store.schema_version == len(MIGRATIONS) >= 1
    store.close()
    assert user_version(path) == len(MIGRATIONS)
    assert {"meta", "objects", "jobs", "events"} <= set(tables(path))
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    db.close()


def test_a_file_from_a_newer_gpupool_is_refused_and_left_alone(path: Path) -> None:
    Store(path).close()
    db = sqlite3.connect(path)
    db.execute(f"PRAGMA user_version={len(MIGRATIONS) + 1}")
    db.commit()
    db.close()
    before = tables(path)
    with pytest.raises(
        AdapterError,
        match=rf"schema version {len(MIGRATIONS) + 1}.*"
        rf"up to {len(MIGRATIONS)}.*upgrade",
    ):
        Store(path)
    assert tables(path) == before
    assert user_version(path) == len(MIGRATIONS) + 1


def test_an_older_file_is_migrated_in_order_and_keeps_its_data(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store(path)
    with store.transaction() as tx:
        tx.insert_job("research/a", "research", "a", "research/llm", {"x": 1}, 5.0)
    store.close()
    later = (
        *MIGRATIONS,
        "ALTER TABLE jobs ADD COLUMN node_hint TEXT NOT NULL DEFAULT ''",
        "CREATE TABLE leases (name TEXT PRIMARY KEY, holder TEXT NOT NULL)",
    )
    monkeypatch.setattr(store_module, "MIGRATIONS", later)
    store = Store(path)
    assert store.schema_version == len(later)
    assert [j.key for j in store.jobs()] == ["research/a"]
    store.close()
    t = tables(path)
    assert "leases" in t and t["jobs"][0][-1] == ""  # the new column, defaulted


def test_a_version_1_file_gets_the_alternative_column_with_its_jobs_in_their_own_form(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_module, "MIGRATIONS", MIGRATIONS[:1])
    store = Store(path)
    with store.transaction() as tx:
        tx.insert_job("t1/a", "t1", "a", "t1/jobs", {"x": 1}, 5.0)
        tx.update_job("t1/a", phase="Running", flavor="h100")
    store.close()
    monkeypatch.setattr(store_module, "MIGRATIONS", MIGRATIONS)
    store = Store(path)
    assert store.schema_version == len(MIGRATIONS) >= 2
    (row,) = store.jobs()
    assert (row.flavor, row.alternative) == ("h100", "")
    with store.transaction() as tx:
        tx.update_job("t1/a", alternative="ascend")
    store.close()
    store = Store(path)
    assert store.jobs()[0].alternative == "ascend"
    store.close()


def test_a_failed_migration_changes_nothing(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = Store(path)
    with store.transaction() as tx:
        tx.set_meta("created", "1")
    store.close()
    before = tables(path)
    broken = (*MIGRATIONS, "CREATE TABLE fine (a INTEGER); ALTER TABLE nowhere ADD COLUMN b")
    monkeypatch.setattr(store_module, "MIGRATIONS", broken)
    with pytest.raises(AdapterError, match="nowhere"):
        Store(path)
    assert user_version(path) == len(MIGRATIONS)
    assert tables(path) == before  # not even the first statement of the migration


def test_an_unreadable_state_file_is_an_adapter_error(tmp_path: Path) -> None:
    bad = tmp_path / "state.db"
    bad.write_bytes(b"this is not a database, it only looks like one" * 100)
    with pytest.raises(AdapterError, match=r"state\.db"):
        Store(bad)
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(AdapterError):
        Store(blocker / "state.db")  # its directory is a file


# -- transactions ------------------------------------------------------------------------------


def test_a_duplicate_job_key_is_a_conflict_and_its_transaction_leaves_nothing(path: Path) -> None:
    store = Store(path)
    with store.transaction() as tx:
        uid = tx.insert_job("research/a", "research", "a", "research/llm", {"n": 1}, 1.0)
        tx.add_events([event("research/a")])
    assert uid == 1
    before = tables(path)
    with pytest.raises(ConflictError, match="UNIQUE"), store.transaction() as tx:
        tx.add_events([event("research/a", reason="Again")])
        tx.insert_job("research/a", "research", "a", "research/llm", {"n": 2}, 2.0)
    assert tables(path) == before
    row = store.job("research/a")
    assert row is not None and row.document == {"n": 1}
    with store.transaction() as tx:  # the store is still usable
        assert tx.insert_job("research/b", "research", "b", "research/llm", {}, 3.0) == 2


def test_any_error_inside_a_transaction_rolls_all_of_it_back(path: Path) -> None:
    store = Store(path)
    with store.transaction() as tx:
        tx.set_meta("created", "1")
    before = tables(path)
    with pytest.raises(RuntimeError, match="mid-way"), store.transaction() as tx:
        tx.insert_job("research/a", "research", "a", "research/llm", {}, 1.0)
        tx.put_object("ClusterQueue", "llm", {"spec": {}})
        tx.add_events([event("research/a")])
        tx.set_meta("created", "2")
        raise RuntimeError("mid-way")
    assert tables(path) == before
    assert store.jobs() == [] and store.objects() == [] and store.events() == []
    assert store.meta("created") == "1"


def test_a_bad_statement_is_an_adapter_error_and_rolls_back(path: Path) -> None:
    store = Store(path)
    before = tables(path)
    with pytest.raises(AdapterError, match="write failed"), store.transaction() as tx:
        tx.insert_job("research/a", "research", "a", "research/llm", {}, 1.0)
        tx.update_job("research/a", no_such_column=1)
    assert tables(path) == before


def test_a_commit_is_visible_to_another_connection_at_once(path: Path) -> None:
    store = Store(path)
    with store.transaction() as tx:
        tx.insert_job("research/a", "research", "a", "research/llm", {"k": "v"}, 1.0)
    other = sqlite3.connect(path)
    try:
        assert other.execute("SELECT key, phase FROM jobs").fetchall() == [
            ("research/a", "Pending")
        ]
    finally:
        other.close()


def test_transactions_from_many_threads_all_land(path: Path) -> None:
    store = Store(path)

    def write(t: int) -> None:
        for i in range(25):
            with store.transaction() as tx:
                tx.insert_job(f"ns/j{t}-{i}", "ns", f"j{t}-{i}", "ns/q", {}, float(i))
                tx.add_events([event(f"ns/j{t}-{i}", "ns")])

    threads = [threading.Thread(target=write, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert len(store.jobs()) == 100 and len(store.events(limit=1000)) == 100
    assert sorted(j.uid for j in store.jobs()) == list(range(1, 101))


# -- what the tables hold ----------------------------------------------------------------------


def test_everything_written_survives_a_reopen(path: Path) -> None:
    store = Store(path, wall=lambda: 1234.5)
    placements = [
        {
            "task": "research/a/main-0",
            "node": "h100-0",
            "cpu_milli": 4000,
            "memory_mib": 1024,
            "gpus": [{"index": 3, "gpu_milli": 500, "memory_mib": 2048, "mig_profile": None}],
        }
    ]
    with store.transaction() as tx:
        tx.set_meta("created", "now")
        assert tx.put_object("ClusterQueue", "llm", {"spec": {"a": 1}}) == 1
        assert tx.put_object("ClusterQueue", "llm", {"spec": {"a": 2}}) == 2
        tx.put_object("Node", "h100-0", {"node": {"name": "h100-0"}, "failed": False})
        tx.insert_job("research/a", "research", "a", "research/llm", {"spec": {}}, 7.0)
        tx.update_job(
            "research/a", phase="Running", started_s=8.0, flavor="h100", placements=placements
        )
        tx.add_events([event("research/a", "research"), event("h100-0", reason="NodeAdded")])
    store.close()

    again = Store(path)
    assert again.meta("created") == "now"
    assert again.objects("ClusterQueue") == [("ClusterQueue", "llm", {"spec": {"a": 2}}, 2)]
    assert [o[1] for o in again.objects()] == ["llm", "h100-0"]
    (row,) = again.jobs(["Running"])
    assert (row.uid, row.key, row.namespace, row.name, row.queue, row.phase) == (
        1,
        "research/a",
        "research",
        "a",
        "research/llm",
        "Running",
    )
    assert (row.submitted_s, row.started_s, row.finished_s, row.flavor) == (7.0, 8.0, None, "h100")
    assert row.placements == placements and row.document == {"spec": {}}
    assert again.jobs(["Pending"]) == []
    assert again.counts() == {"Running": 1}
    events = again.events()
    assert [e.reason for e in events] == ["Submitted", "NodeAdded"]
    assert events[0].wall == 1234.5 and events[0].namespace == "research"


def test_objects_and_jobs_can_be_deleted(path: Path) -> None:
    store = Store(path)
    with store.transaction() as tx:
        tx.put_object("Cohort", "org", {})
        tx.insert_job("research/a", "research", "a", "research/llm", {}, 1.0)
    with store.transaction() as tx:
        assert tx.delete_object("Cohort", "org") is True
        assert tx.delete_object("Cohort", "org") is False
        tx.delete_job("research/a")
    assert store.objects() == [] and store.job("research/a") is None
    with store.transaction() as tx:  # a deleted key may be used again; its uid is new
        assert tx.insert_job("research/a", "research", "a", "research/llm", {}, 2.0) == 2


def test_events_page_by_sequence_and_filter_by_namespace(path: Path) -> None:
    store = Store(path)
    with store.transaction() as tx:
        tx.add_events(
            [
                event("research/a", "research"),
                event("serving/b", "serving"),
                event("h100-0", "", "NodeAdded"),
                event("research/c", "research"),
            ]
        )
    assert [e.seq for e in store.events()] == [1, 2, 3, 4]
    assert [e.seq for e in store.events(since=1, limit=2)] == [2, 3]
    assert [e.object for e in store.events(namespaces=["research"])] == [
        "research/a",
        "h100-0",
        "research/c",
    ]  # the cluster's own events are everyone's
    assert [e.seq for e in store.last_events(2)] == [3, 4]
    assert [e.seq for e in store.last_events(2, namespaces=["serving"])] == [2, 3]
    with store.transaction() as tx:
        tx.trim_events(keep=2)
    assert [e.seq for e in store.events()] == [3, 4]
    assert store.events()[0].to_json()["reason"] == "NodeAdded"


def test_an_in_memory_store_works_the_same(tmp_path: Path) -> None:
    store = Store(":memory:")
    assert store.schema_version == len(MIGRATIONS)
    with store.transaction() as tx:
        tx.insert_job("a/b", "a", "b", "a/q", {}, 0.0)
    assert store.job("a/b") is not None
    assert not list(tmp_path.iterdir())
