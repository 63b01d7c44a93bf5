"""``gpupool submit``, ``get``, ``describe`` and ``cancel``: the client of ``gpupool serve``."""

from __future__ import annotations

from typing import Any


def add_parsers(sub: Any) -> None:
    """Add the client commands to the ``gpupool`` parser."""
