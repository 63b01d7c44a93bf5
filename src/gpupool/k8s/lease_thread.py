"""The Lease renewed on a thread of its own, so that nothing on the scheduler's loop can
starve it.

Scheduling cycles, JSON parsing of large lists and the handlers of 100,000 pod events all
run on the controller's event loop; a renewal queued behind them waits as long as they do,
and a stall longer than the lease's duration hands the lease to another replica while this
one still binds. :class:`LeaseThread` runs a :class:`~gpupool.k8s.lease.LeaderElector` on its
own thread, with its own event loop and its own API server connection (an aiohttp session
belongs to one loop). The GIL still lets it run while the main loop computes: CPython
switches threads every few milliseconds, and blocking calls release the GIL.

The controller's loop learns the outcome two ways:

- :meth:`is_leader` reads the elector's state directly (a float and a bool, written by
  the lease thread): the check before each bind is never late;
- ``on_started``/``on_stopped`` are handed to the controller's loop
  (``run_coroutine_threadsafe``) and not waited for: rebuilding the core when this replica
  becomes leader takes as long as it takes, and renewals go on meanwhile.

Cancelling :meth:`run` (the controller stopping) gives the lease up at once, so the next
replica need not wait for it to expire.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
from collections.abc import Awaitable, Callable

from gpupool.k8s.kube import Kube
from gpupool.k8s.lease import LeaderElector

__all__ = ["LeaseThread"]

log = logging.getLogger("gpupool.k8s.lease")

Callback = Callable[[], Awaitable[None]]


class LeaseThread:
    def __init__(
        self,
        kube: Kube,
        namespace: str,
        name: str,
        identity: str,
        *,
        lease_s: float = 15.0,
        renew_s: float = 2.0,
        margin_s: float = 2.0,
        on_started: Callback | None = None,
        on_stopped: Callback | None = None,
    ) -> None:
        self.kube = kube
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_s = lease_s
        self.renew_s = renew_s
        self.margin_s = margin_s
        self.on_started = on_started
        self.on_stopped = on_stopped
        self.elector: LeaderElector | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._main: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._thread: threading.Thread | None = None
        self._ended: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._ready = threading.Event()

    # -- what the controller's loop sees ----------------------------------------------------

    def is_leader(self) -> bool:
        return self.elector is not None and self.elector.is_leader()

    @property
    def transitions(self) -> int:
        return self.elector.transitions if self.elector is not None else 0

    async def run(self) -> None:
        """Starts the lease thread and waits for it; cancelled, gives the lease up."""
        self._main = asyncio.get_running_loop()
        self._thread = threading.Thread(
            target=self._thread_main, daemon=True, name=f"lease {self.namespace}/{self.name}"
        )
        self._thread.start()
        try:
            await asyncio.wrap_future(self._ended)
        finally:
            await self.release()

    async def release(self) -> None:
        """Gives the lease up (when held) and ends the thread; idempotent."""
        thread = self._thread
        if thread is None:
            return
        await asyncio.to_thread(self._ready.wait, 10)
        loop = self._loop
        if loop is not None and not loop.is_closed() and thread.is_alive():
            try:
                fut = asyncio.run_coroutine_threadsafe(self._end(), loop)
                await asyncio.wrap_future(fut)
            except (RuntimeError, concurrent.futures.CancelledError):
                pass  # the loop closed meanwhile
        await asyncio.to_thread(thread.join, 10)
        self._thread = None

    # -- the lease thread -------------------------------------------------------------------

    def _relay(self, callback: Callback | None) -> Callback:
        async def relay() -> None:
            main = self._main
            if callback is None or main is None or main.is_closed():
                return
            with contextlib.suppress(RuntimeError):  # the controller's loop is closing
                asyncio.run_coroutine_threadsafe(_called(callback), main)

        return relay

    def _thread_main(self) -> None:
        try:
            asyncio.run(self._thread_run())
        except BaseException as exc:
            if not self._ended.done():
                self._ended.set_exception(exc)
        finally:
            self._ready.set()
            if not self._ended.done():
                self._ended.set_result(None)

    async def _thread_run(self) -> None:
        self._loop = asyncio.get_running_loop()
        kube = Kube(self.kube.cfg, connections=4)
        self.elector = LeaderElector(
            kube,
            self.namespace,
            self.name,
            self.identity,
            lease_s=self.lease_s,
            renew_s=self.renew_s,
            margin_s=self.margin_s,
            on_started=self._relay(self.on_started),
            on_stopped=self._relay(self.on_stopped),
        )
        self._task = asyncio.current_task()
        self._ready.set()
        try:
            await self.elector.run()
        except asyncio.CancelledError:
            pass
        finally:
            await kube.close()

    async def _end(self) -> None:
        if self.elector is not None:
            await self.elector.release()
        if self._task is not None:
            self._task.cancel()


async def _called(callback: Callback) -> None:
    try:
        await callback()
    except Exception:
        log.exception("leadership callback failed")
