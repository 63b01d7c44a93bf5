"""Events aggregated as Kubernetes' own components aggregate them (client-go's
``EventCorrelator``, ``tools/record/events_cache.go``), so a pod parked every cycle does not
create an Event every cycle:

- **the same event again** (same source, object, type, reason and message) is not a new
  object: the existing Event's ``count`` goes up by one and its ``lastTimestamp`` moves, in
  one PATCH (client-go's ``eventLogger``);
- **similar events** (same source, object, type and reason, a different message): after
  ``max_similar`` (10) distinct messages within ``interval_s`` (600 s), further ones are
  folded into one Event whose message starts ``(combined from similar events): ``
  (client-go's ``EventAggregator``), itself counted as the same event again.

:class:`EventCorrelator` decides; it holds no connection and reads no clock (``now`` is
passed), so it is tested alone. The status writer (``k8s/status.py``) carries its answers
out. Its memory is bounded: at most ``max_keys`` events are remembered (least recently seen
dropped first, as client-go's LRU caches of 4096 entries).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["COMBINED", "EventCorrelator", "EventWrite"]

COMBINED = "(combined from similar events): "


@dataclass(frozen=True, slots=True)
class EventWrite:
    """What to write: a new Event (``name`` empty, ``count`` 1) or a repeat of one already
    written (``name`` set: PATCH its ``count`` and ``lastTimestamp``)."""

    key: tuple[str, ...]  # the event's identity, as client-go's getEventKey
    namespace: str
    involved: Mapping[str, Any]
    type: str
    reason: str
    message: str
    count: int
    first_s: float
    name: str = ""


@dataclass(slots=True)
class _Seen:
    name: str  # the Event object's name once created ("" until then)
    count: int
    first_s: float


class EventCorrelator:
    def __init__(
        self,
        component: str,
        *,
        max_similar: int = 10,
        interval_s: float = 600.0,
        max_keys: int = 4096,
    ) -> None:
        self.component = component
        self.max_similar = max_similar
        self.interval_s = interval_s
        self.max_keys = max_keys
        self._seen: OrderedDict[tuple[str, ...], _Seen] = OrderedDict()
        # aggregate key -> (distinct messages seen, first time of the window)
        self._similar: OrderedDict[tuple[str, ...], tuple[set[str], float]] = OrderedDict()

    def correlate(
        self, obj: Mapping[str, Any], type_: str, reason: str, message: str, now: float
    ) -> EventWrite:
        meta = obj.get("metadata") or {}
        involved = {
            "apiVersion": obj.get("apiVersion", "v1"),
            "kind": obj.get("kind", "Pod"),
            "name": meta.get("name"),
            "namespace": meta.get("namespace"),
            "uid": meta.get("uid"),
        }
        namespace = str(meta.get("namespace") or "default")
        base = (
            self.component,
            str(involved["kind"]),
            namespace,
            str(meta.get("name")),
            str(meta.get("uid") or ""),
            type_,
            reason,
        )
        messages, since = self._similar.pop(base, (set(), now))
        if now - since > self.interval_s:
            messages, since = set(), now
        if message not in messages and len(messages) >= self.max_similar:
            message = COMBINED + message  # one Event for every further similar message
        else:
            messages.add(message)
        self._remember(self._similar, base, (messages, since))
        key = (*base, message)
        seen = self._seen.pop(key, None)
        if seen is None:
            seen = _Seen("", 1, now)
        else:
            seen.count += 1
        self._remember(self._seen, key, seen)
        return EventWrite(
            key, namespace, involved, type_, reason, message, seen.count, seen.first_s, seen.name
        )

    def created(self, key: tuple[str, ...], name: str) -> None:
        """The Event for ``key`` was created with ``name``: repeats PATCH it."""
        seen = self._seen.get(key)
        if seen is not None:
            seen.name = name

    def lost(self, key: tuple[str, ...]) -> None:
        """The Event for ``key`` is gone (404 on a repeat): the next one creates it again."""
        self._seen.pop(key, None)

    def _remember(self, cache: OrderedDict[Any, Any], key: Any, value: Any) -> None:
        cache[key] = value
        while len(cache) > self.max_keys:
            cache.popitem(last=False)
