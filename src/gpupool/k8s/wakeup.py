"""Waiting for a loop's wake-up event, or its interval, whichever comes first.

``asyncio.wait_for(event.wait(), t)`` on Python 3.11 returns normally when the event is set in
the same step as the task is cancelled, so a ``while True`` loop around it can swallow its own
cancellation and run for ever. ``asyncio.timeout`` counts cancellations and does not.
"""

from __future__ import annotations

import asyncio


async def wait_event(event: asyncio.Event, timeout_s: float) -> bool:
    """True when ``event`` was set within ``timeout_s`` seconds; a cancellation always
    propagates."""
    try:
        async with asyncio.timeout(timeout_s):
            await event.wait()
    except TimeoutError:
        return False
    return True
