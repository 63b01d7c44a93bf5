"""A new queue configuration applied to a running controller in place, whichever objects it
came from (Kueue's ``kueue.x-k8s.io`` kinds or gpupool's own ``gpupool.io`` ones): the core's
``Scheduler.update_config`` keeps running jobs, their cards and the users' usage; no informer,
HTTP server or Lease is restarted. A configuration the scheduler refuses changes nothing.

Pods whose queue is gone are refused with that reason (``requeue``); pods refused because
their queue did not exist, or did not admit their namespace, are offered again when it now
does (``readmit``)."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

from gpupool.core.errors import ConfigError, ConflictError, NotFoundError
from gpupool.core.model import JobId
from gpupool.core.quota import QueueConfig

if TYPE_CHECKING:
    from gpupool.k8s.controller import Controller

__all__ = ["apply_config", "readmit", "requeue"]

log = logging.getLogger("gpupool.k8s")


def apply_config(ctl: Controller, config: QueueConfig, source: str) -> bool:
    """Apply ``config`` (read from ``source``, for the log) in place; whether it changed.
    ConfigError or ConflictError from the scheduler leave the last configuration in use
    (logged, and re-raised for a caller that marks the objects)."""
    if config == ctl.config:
        return False
    if ctl.sched is not None:
        try:
            dropped = ctl.sched.update_config(config)
        except (ConfigError, ConflictError) as exc:
            log.error("%s: %s; the last configuration stays", source, exc)
            raise
        requeue(ctl, [p.job.id for p in dropped])
    ctl.config = config
    if ctl.sched is not None:
        readmit(ctl)
    log.info(
        "%s: configuration applied in place (%d cluster queues, %d local queues)",
        source,
        len(config.cluster_queues),
        len(config.local_queues),
    )
    return True


def requeue(ctl: Controller, jobs: Iterable[JobId]) -> None:
    """Pods of jobs whose queue is gone: refused with the reason (and offered again by
    :func:`readmit` once their queue is back)."""
    for job in jobs:
        info = ctl.jobs.pop(job, None)
        if info is None:
            continue
        for key in info.pods:
            ctl.pod_job.pop(key, None)
        ctl._reject(info.pods, f"queue {info.queue} no longer exists")


def readmit(ctl: Controller) -> None:
    """Pods refused because their queue did not exist or did not admit their namespace,
    whose queue now does: offered again."""
    for key, reason in list(ctl.rejected.items()):
        if (
            "does not exist" not in reason
            and "no longer exists" not in reason
            and "does not admit" not in reason
        ):
            continue
        pod = ctl.pod_informer.cache.get(key)
        if pod is None:
            continue
        try:
            ctl.resolve_queue(pod)
        except NotFoundError:
            continue
        del ctl.rejected[key]
        ctl._admit(key)
    ctl.wake()
