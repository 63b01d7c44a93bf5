"""Durable state for ``gpupool serve``: one SQLite file (WAL), versioned schema."""

from gpupool.store.sqlite import ACTIVE_PHASES, MIGRATIONS, EventRow, JobRow, NewEvent, Store

__all__ = ["ACTIVE_PHASES", "MIGRATIONS", "EventRow", "JobRow", "NewEvent", "Store"]
