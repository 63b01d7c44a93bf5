"""Durable state of ``gpupool serve`` in one SQLite file.

- WAL journal, and the WAL file is fsync'ed after each commit (what ``synchronous=FULL`` does):
  a commit is on disk when ``transaction()`` returns, so an acknowledged write (an HTTP 201)
  survives ``kill -9`` and a power cut. ``transaction(durable=False)`` leaves the fsync to a
  later ``sync()``, which the caller makes before acknowledging, outside its own locks:
  callers that sync at the same time share one fsync (group commit).
- Every write is one transaction: a job and its "Submitted" event, or a whole cycle's
  decisions (binds, evictions, completions and their events), land together or not at all.
- The schema is versioned (``PRAGMA user_version``); ``MIGRATIONS`` are applied in order at
  open, each in its own transaction.
- One connection, shared by the API's threads and the scheduling loop behind a lock; SQLite
  serialises writers anyway and every statement here is short.

Rows hold JSON documents; the service decides what they mean. Foreign errors are translated
once, here: ``sqlite3.IntegrityError`` on a duplicate key becomes ConflictError, anything else
from SQLite becomes AdapterError.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpupool.core.errors import AdapterError, ConflictError

MIGRATIONS: tuple[str, ...] = (
    # 1: objects, jobs, events, meta
    """
    CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
    CREATE TABLE objects (
        kind TEXT NOT NULL, name TEXT NOT NULL, body TEXT NOT NULL,
        version INTEGER NOT NULL, PRIMARY KEY (kind, name));
    CREATE TABLE jobs (
        uid INTEGER PRIMARY KEY AUTOINCREMENT,
        key TEXT NOT NULL UNIQUE, namespace TEXT NOT NULL, name TEXT NOT NULL,
        queue TEXT NOT NULL, document TEXT NOT NULL, phase TEXT NOT NULL,
        submitted_s REAL NOT NULL, started_s REAL, finished_s REAL,
        flavor TEXT NOT NULL DEFAULT '', placements TEXT NOT NULL DEFAULT '[]',
        preemptions INTEGER NOT NULL DEFAULT 0, message TEXT NOT NULL DEFAULT '');
    CREATE INDEX jobs_phase ON jobs (phase);
    CREATE INDEX jobs_namespace ON jobs (namespace, uid);
    CREATE TABLE events (
        seq INTEGER PRIMARY KEY AUTOINCREMENT, wall REAL NOT NULL, time_s REAL NOT NULL,
        type TEXT NOT NULL, reason TEXT NOT NULL, kind TEXT NOT NULL, object TEXT NOT NULL,
        namespace TEXT NOT NULL DEFAULT '', message TEXT NOT NULL);
    CREATE INDEX events_namespace ON events (namespace, seq);
    """,
    # 2: the alternative a running job runs as ('' its own request)
    """
    ALTER TABLE jobs ADD COLUMN alternative TEXT NOT NULL DEFAULT '';
    """,
)

ACTIVE_PHASES = ("Pending", "Running")


@dataclass(slots=True)
class JobRow:
    uid: int
    key: str
    namespace: str
    name: str
    queue: str
    document: dict[str, Any]
    phase: str
    submitted_s: float
    started_s: float | None
    finished_s: float | None
    flavor: str
    placements: list[dict[str, Any]]
    preemptions: int
    message: str
    alternative: str = ""  # the alternative a running job runs as ("" its own request)


@dataclass(frozen=True, slots=True)
class EventRow:
    """One event of the event log as the state file keeps it (``NewEvent`` is one to write);
    ``/api/v1/events`` shows it as an ``EventView``."""

    seq: int
    wall: float
    time_s: float
    type: str  # "Normal" | "Warning"
    reason: str
    kind: str  # "Job" | "Node" | "ClusterQueue" | ...
    object: str
    namespace: str
    message: str

    def to_json(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "wall": self.wall,
            "time_s": round(self.time_s, 3),
            "type": self.type,
            "reason": self.reason,
            "kind": self.kind,
            "object": self.object,
            "namespace": self.namespace,
            "message": self.message,
        }


@dataclass(frozen=True, slots=True)
class NewEvent:
    time_s: float
    type: str
    reason: str
    kind: str
    object: str
    namespace: str
    message: str


_JOB_COLUMNS = (
    "uid, key, namespace, name, queue, document, phase, submitted_s, started_s, "
    "finished_s, flavor, placements, preemptions, message, alternative"
)


def _job(row: Sequence[Any]) -> JobRow:
    return JobRow(
        row[0],
        row[1],
        row[2],
        row[3],
        row[4],
        json.loads(row[5]),
        row[6],
        row[7],
        row[8],
        row[9],
        row[10],
        json.loads(row[11]),
        row[12],
        row[13],
        row[14],
    )


class Store:
    """The SQLite file behind ``gpupool serve``. ``path`` ":memory:" keeps it in memory."""

    def __init__(self, path: str | Path, *, wall: Any = None) -> None:
        import time

        self.path = str(path)
        self._wall = wall or time.time
        self._lock = threading.RLock()
        # group commit: commits counted, the count the WAL is known durable up to
        self._sync = threading.Condition(threading.Lock())
        self._committed = 0
        self._synced = 0
        self._syncing = False
        self._wal_fd: int | None = None
        try:
            if self.path != ":memory:":
                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(
                self.path, isolation_level=None, check_same_thread=False, timeout=30.0
            )
            self._db.execute("PRAGMA journal_mode=WAL")
            # NORMAL syncs the WAL before each checkpoint and the database after it; the
            # fsync after each commit is ours (sync()), so that it can be shared
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute("PRAGMA foreign_keys=ON")
            self._migrate()
        except (sqlite3.Error, OSError) as exc:
            raise AdapterError(f"opening the state file {self.path} failed: {exc}") from exc

    # -- schema ----------------------------------------------------------------------------

    @property
    def schema_version(self) -> int:
        return int(self._db.execute("PRAGMA user_version").fetchone()[0])

    def _migrate(self) -> None:
        current = self.schema_version
        if current > len(MIGRATIONS):
            raise AdapterError(
                f"{self.path} has schema version {current}; this gpupool knows "
                f"versions up to {len(MIGRATIONS)}: upgrade gpupool"
            )
        for version in range(current + 1, len(MIGRATIONS) + 1):
            with self.transaction() as db:
                db.executescript_in_tx(MIGRATIONS[version - 1])
                db.execute(f"PRAGMA user_version={version}")

    @contextmanager
    def transaction(self, *, durable: bool = True) -> Iterator[_Tx]:
        """One write transaction (BEGIN IMMEDIATE ... COMMIT); rolled back on any error. On
        disk when it returns, unless ``durable`` is False: then it is on disk once a later
        ``sync()`` returns (until then a power cut may lose it; ``kill -9`` does not)."""
        with self._lock:
            try:
                self._db.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise AdapterError(f"{self.path}: cannot begin a transaction: {exc}") from exc
            tx = _Tx(self._db, self._wall)
            try:
                yield tx
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            try:
                self._db.execute("COMMIT")
            except sqlite3.Error as exc:
                self._db.execute("ROLLBACK")
                raise AdapterError(f"{self.path}: commit failed: {exc}") from exc
            self._committed += 1
        if durable:
            self.sync()

    def sync(self) -> None:
        """Make every transaction committed so far durable: one fsync of the WAL file. A
        caller that arrives while another's fsync runs waits for it, then at most one more
        covers everyone who arrived meanwhile."""
        with self._sync:
            upto = self._committed
            while self._synced < upto:
                if not self._syncing:
                    break
                self._sync.wait()
            else:
                return
            self._syncing = True
            upto = self._committed
        ok = False
        try:
            self._fsync_wal()
            ok = True
        finally:
            with self._sync:
                self._syncing = False
                if ok:
                    self._synced = max(self._synced, upto)
                self._sync.notify_all()

    def _fsync_wal(self) -> None:
        if self.path == ":memory:":
            return
        wal = self.path + "-wal"
        try:
            if self._wal_fd is not None and os.fstat(self._wal_fd).st_ino != os.stat(wal).st_ino:
                os.close(self._wal_fd)  # the WAL file was made anew
                self._wal_fd = None
            if self._wal_fd is None:
                self._wal_fd = os.open(wal, os.O_RDONLY)
            os.fsync(self._wal_fd)
        except OSError as exc:
            raise AdapterError(f"{wal}: fsync failed: {exc}") from exc

    def close(self) -> None:
        with self._lock:
            self._db.close()
            if self._wal_fd is not None:
                os.close(self._wal_fd)
                self._wal_fd = None

    # -- reads -----------------------------------------------------------------------------

    def meta(self, key: str) -> str | None:
        with self._lock:
            row = self._db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def objects(self, kind: str | None = None) -> list[tuple[str, str, dict[str, Any], int]]:
        """(kind, name, body, version) in insertion order of names within a kind."""
        with self._lock:
            if kind is None:
                rows = self._db.execute(
                    "SELECT kind, name, body, version FROM objects ORDER BY rowid"
                ).fetchall()
            else:
                rows = self._db.execute(
                    "SELECT kind, name, body, version FROM objects WHERE kind=? ORDER BY rowid",
                    (kind,),
                ).fetchall()
        return [(k, n, json.loads(b), v) for k, n, b, v in rows]

    def jobs(self, phases: Sequence[str] | None = None) -> list[JobRow]:
        """Jobs in submission order (by uid), optionally only those in ``phases``."""
        with self._lock:
            if phases is None:
                rows = self._db.execute(f"SELECT {_JOB_COLUMNS} FROM jobs ORDER BY uid")
            else:
                marks = ",".join("?" * len(phases))
                rows = self._db.execute(
                    f"SELECT {_JOB_COLUMNS} FROM jobs WHERE phase IN ({marks}) ORDER BY uid",
                    tuple(phases),
                )
            return [_job(r) for r in rows.fetchall()]

    def job(self, key: str) -> JobRow | None:
        with self._lock:
            row = self._db.execute(
                f"SELECT {_JOB_COLUMNS} FROM jobs WHERE key=?", (key,)
            ).fetchone()
        return None if row is None else _job(row)

    def events(
        self, since: int = 0, limit: int = 200, namespaces: Sequence[str] | None = None
    ) -> list[EventRow]:
        """Events after ``since`` (oldest first), at most ``limit``; with ``namespaces``, only
        theirs and the cluster's own (namespace '')."""
        with self._lock:
            if namespaces is None:
                rows = self._db.execute(
                    "SELECT * FROM events WHERE seq>? ORDER BY seq LIMIT ?", (since, limit)
                )
            else:
                marks = ",".join("?" * (len(namespaces) + 1))
                rows = self._db.execute(
                    f"SELECT * FROM events WHERE seq>? AND namespace IN ({marks}) "
                    "ORDER BY seq LIMIT ?",
                    (since, "", *namespaces, limit),
                )
            return [EventRow(*r) for r in rows.fetchall()]

    def last_events(
        self, limit: int = 200, namespaces: Sequence[str] | None = None
    ) -> list[EventRow]:
        """The newest ``limit`` events, oldest first."""
        with self._lock:
            if namespaces is None:
                rows = self._db.execute("SELECT * FROM events ORDER BY seq DESC LIMIT ?", (limit,))
            else:
                marks = ",".join("?" * (len(namespaces) + 1))
                rows = self._db.execute(
                    f"SELECT * FROM events WHERE namespace IN ({marks}) ORDER BY seq DESC LIMIT ?",
                    ("", *namespaces, limit),
                )
            return [EventRow(*r) for r in reversed(rows.fetchall())]

    def counts(self) -> dict[str, int]:
        with self._lock:
            rows = self._db.execute("SELECT phase, COUNT(*) FROM jobs GROUP BY phase")
            return {str(p): int(n) for p, n in rows.fetchall()}


class _Tx:
    """The writes of one transaction."""

    def __init__(self, db: sqlite3.Connection, wall: Any) -> None:
        self._db = db
        self._wall = wall

    def execute(self, sql: str, args: Sequence[Any] = ()) -> sqlite3.Cursor:
        try:
            return self._db.execute(sql, args)
        except sqlite3.IntegrityError as exc:
            raise ConflictError(str(exc)) from exc
        except sqlite3.Error as exc:
            raise AdapterError(f"state file write failed: {exc}") from exc

    def executescript_in_tx(self, script: str) -> None:
        for statement in script.split(";"):
            if statement.strip():
                self.execute(statement)

    def set_meta(self, key: str, value: str) -> None:
        self.execute(
            "INSERT INTO meta(key, value) VALUES(?, ?) ON CONFLICT(key) DO UPDATE "
            "SET value=excluded.value",
            (key, value),
        )

    def put_object(self, kind: str, name: str, body: Mapping[str, Any]) -> int:
        """Create or replace; returns the object's new version (1 when created)."""
        row = self._db.execute(
            "SELECT version FROM objects WHERE kind=? AND name=?", (kind, name)
        ).fetchone()
        version = 1 if row is None else int(row[0]) + 1
        text = json.dumps(body, sort_keys=True)
        if row is None:
            self.execute(
                "INSERT INTO objects(kind, name, body, version) VALUES(?, ?, ?, ?)",
                (kind, name, text, version),
            )
        else:
            self.execute(
                "UPDATE objects SET body=?, version=? WHERE kind=? AND name=?",
                (text, version, kind, name),
            )
        return version

    def delete_object(self, kind: str, name: str) -> bool:
        return (
            self.execute("DELETE FROM objects WHERE kind=? AND name=?", (kind, name)).rowcount > 0
        )

    def insert_job(
        self,
        key: str,
        namespace: str,
        name: str,
        queue: str,
        document: Mapping[str, Any],
        submitted_s: float,
    ) -> int:
        """A new job, Pending; ConflictError when ``key`` exists. Returns its uid."""
        cur = self.execute(
            "INSERT INTO jobs(key, namespace, name, queue, document, phase, submitted_s) "
            "VALUES(?, ?, ?, ?, ?, 'Pending', ?)",
            (key, namespace, name, queue, json.dumps(document, sort_keys=True), submitted_s),
        )
        return int(cur.lastrowid or 0)

    def update_job(self, key: str, **fields: Any) -> None:
        """Set columns of a job (``placements`` as a list, the rest as they are)."""
        if "placements" in fields:
            fields["placements"] = json.dumps(fields["placements"])
        sets = ", ".join(f"{k}=?" for k in fields)
        self.execute(f"UPDATE jobs SET {sets} WHERE key=?", (*fields.values(), key))

    def delete_job(self, key: str) -> None:
        self.execute("DELETE FROM jobs WHERE key=?", (key,))

    def add_events(self, events: Sequence[NewEvent]) -> list[EventRow]:
        wall = float(self._wall())
        out = []
        for e in events:
            cur = self.execute(
                "INSERT INTO events(wall, time_s, type, reason, kind, object, namespace, "
                "message) VALUES(?, ?, ?, ?, ?, ?, ?, ?)",
                (wall, e.time_s, e.type, e.reason, e.kind, e.object, e.namespace, e.message),
            )
            out.append(
                EventRow(
                    int(cur.lastrowid or 0),
                    wall,
                    e.time_s,
                    e.type,
                    e.reason,
                    e.kind,
                    e.object,
                    e.namespace,
                    e.message,
                )
            )
        return out

    def trim_events(self, keep: int) -> None:
        self.execute("DELETE FROM events WHERE seq <= (SELECT MAX(seq) FROM events) - ?", (keep,))
