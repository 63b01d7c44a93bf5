"""The composition root of ``gpupool serve``: state file, virtual cluster, control plane, API,
the scheduling loop and (with ``--demo``) a stream of example jobs, wired and run.

Three threads: uvicorn's event loop (plus its worker threads for handlers), the scheduling
loop (``tick`` every ``--interval`` seconds) and, with ``--demo``, the job stream. They meet
only in ``ControlPlane``, behind its lock.

``command.py`` holds the command (its flags, the checks made before anything is written, the
run), ``service.py`` what it runs (``Service``), ``endpoint.py`` the listening socket and the
bearer tokens.
"""

from __future__ import annotations

from gpupool.app.command import (
    DATA,
    DEFAULT_CLUSTER,
    DEFAULT_QUEUES,
    DEFAULT_STATE,
    DEMO_SPEED,
    add_parser,
    serve,
)
from gpupool.app.endpoint import listen
from gpupool.app.service import Service

__all__ = [
    "DATA",
    "DEFAULT_CLUSTER",
    "DEFAULT_QUEUES",
    "DEFAULT_STATE",
    "DEMO_SPEED",
    "Service",
    "add_parser",
    "listen",
    "serve",
]
