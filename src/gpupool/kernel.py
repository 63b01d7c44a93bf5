"""The simulation kernel: one event queue for every simulator and the virtual cluster.

``EventQueue`` holds what is due when, in SimPy's shape (``schedule``, ``peek``, ``step``-like
``pop``, ``run(until)``): events come out by time, and events at the same time in the order
they were scheduled (SimPy breaks ties with an event counter the same way), so one input
gives one order, run after run. A scheduled event can be cancelled by the id ``schedule``
returned; cancelled events never come out.

It holds no clock of its own beyond the time of the last event it handed out (``now``), reads
no wall clock and does no I/O: the simulators (``sim/engine.py``, the scenario run loop), the
simulated cloud (``cloud/region.py``), the virtual cluster ``serve`` runs jobs on
(``virtual/cluster.py``) and the benchmarks' departure lists all drive it with their own time.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterable, Iterator
from typing import Generic, NewType, TypeVar

__all__ = ["EventId", "EventQueue"]

T = TypeVar("T")

EventId = NewType("EventId", int)
"""What ``schedule`` returns: the event's place in scheduling order, unique in its queue."""


class EventQueue(Generic[T]):
    """Events ordered by (time, then scheduling order)."""

    __slots__ = ("_cancelled", "_heap", "_last", "_live", "now")

    def __init__(self, now: float = 0.0) -> None:
        self._heap: list[tuple[float, int, T]] = []
        self._live: set[int] = set()  # ids scheduled, not yet handed out nor cancelled
        self._cancelled: set[int] = set()  # cancelled, still in the heap
        self._last = 0  # the id of the last event scheduled
        self.now = now  # the time of the last event handed out (or the start)

    # -- scheduling -----------------------------------------------------------------------

    def schedule(self, at_s: float, item: T) -> EventId:
        """``item`` is due at ``at_s``; returns its id (for ``cancel``)."""
        if math.isnan(at_s):
            raise ValueError(f"at_s={at_s!r} is not a time: an event needs a number")
        self._last += 1
        heapq.heappush(self._heap, (at_s, self._last, item))
        self._live.add(self._last)
        return EventId(self._last)

    def cancel(self, event: EventId) -> None:
        """The event will not come out. Cancelling one already handed out, or twice, does
        nothing."""
        if event in self._live:
            self._live.discard(event)
            self._cancelled.add(event)
            self._drop_cancelled()

    # -- reading --------------------------------------------------------------------------

    def peek(self) -> float:
        """The time of the next event; infinity when none is left (as SimPy's ``peek``)."""
        return self._heap[0][0] if self._heap else math.inf

    def __len__(self) -> int:
        return len(self._live)

    def __bool__(self) -> bool:
        return bool(self._live)

    def __contains__(self, event: object) -> bool:
        """Whether the event with this id is still due."""
        return event in self._live

    @property
    def last_id(self) -> int:
        """The id of the last event scheduled (0 before the first)."""
        return self._last

    # -- taking events out ----------------------------------------------------------------

    def pop(self) -> tuple[float, T]:
        """The next event, as (time, item); ``now`` moves to its time."""
        if not self._heap:
            raise IndexError("pop from an empty EventQueue")
        at_s, seq, item = heapq.heappop(self._heap)
        self._live.discard(seq)
        self._drop_cancelled()
        self.now = max(self.now, at_s)
        return at_s, item

    def pop_until(self, until_s: float) -> Iterator[tuple[float, T]]:
        """Every event due at or before ``until_s``, in order, including those scheduled
        (for no later than ``until_s``) while this runs."""
        while self._heap and self._heap[0][0] <= until_s:
            yield self.pop()

    def run(self, until_s: float, handle: Callable[[float, T], object]) -> int:
        """Hand each event due at or before ``until_s`` to ``handle(time, item)``, in order
        (``handle`` may schedule more); ``now`` ends at ``until_s``. Returns how many ran."""
        n = 0
        for at_s, item in self.pop_until(until_s):
            handle(at_s, item)
            n += 1
        self.now = max(self.now, until_s)
        return n

    # -- across a restart -----------------------------------------------------------------

    def entries(self) -> list[tuple[float, int, T]]:
        """The events still due, as (time, id, item), in the order they will come out."""
        return sorted(
            ((t, seq, item) for t, seq, item in self._heap if seq in self._live),
            key=lambda e: (e[0], e[1]),
        )

    @classmethod
    def restored(
        cls, entries: Iterable[tuple[float, int, T]], last_id: int, now: float = 0.0
    ) -> EventQueue[T]:
        """A queue holding ``entries()``'s output again; new ids follow ``last_id``."""
        queue: EventQueue[T] = cls(now)
        queue._heap = list(entries)
        heapq.heapify(queue._heap)
        queue._live = {seq for _, seq, _ in queue._heap}
        if len(queue._live) != len(queue._heap):
            raise ValueError("two events share an id: ids must stay unique")
        top = max((seq for _, seq, _ in queue._heap), default=0)
        if top > last_id:
            raise ValueError(
                f"last_id={last_id} is below an event's id ({top}): ids must stay unique"
            )
        queue._last = last_id
        return queue

    # -- internals ------------------------------------------------------------------------

    def _drop_cancelled(self) -> None:
        """Keep a cancelled event off the top, so ``peek`` sees only live ones."""
        while self._heap and self._heap[0][1] in self._cancelled:
            self._cancelled.discard(heapq.heappop(self._heap)[1])
