"""The loops' wake-up wait never swallows a cancellation, even when the event is set in the
same step (Python 3.11's ``asyncio.wait_for`` does, and a controller loop then runs for ever)."""

from __future__ import annotations

import asyncio
import contextlib

from gpupool.k8s.wakeup import wait_event


async def _loop(event: asyncio.Event) -> None:
    while True:
        await wait_event(event, 10.0)
        event.clear()


def test_cancellation_survives_a_wake_up_in_the_same_step() -> None:
    async def main() -> int:
        lost = 0
        for i in range(100):
            event = asyncio.Event()
            task = asyncio.create_task(_loop(event))
            for _ in range(i % 5):
                await asyncio.sleep(0)
            event.set()
            for _ in range(i % 3):
                await asyncio.sleep(0)
            task.cancel()
            done, _ = await asyncio.wait({task}, timeout=0.5)
            if not done:
                lost += 1
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            else:
                assert task.cancelled()
        return lost

    assert asyncio.run(main()) == 0


def test_reports_whether_the_event_came() -> None:
    async def main() -> tuple[bool, bool]:
        event = asyncio.Event()
        late = await wait_event(event, 0.01)
        event.set()
        return late, await wait_event(event, 0.01)

    assert asyncio.run(main()) == (False, True)
