"""List + watch with bookmarks, and a re-list that diffs when the watch is too old.

An :class:`Informer` keeps a cache of one kind of object (keyed ``namespace/name``) and calls
``handler(event, obj, old)`` for every change, in order, from one task:

1. list in pages (``limit``, then ``continue``: one page of ``page_size`` objects in memory at
   a time, never one huge answer), remember the list's resourceVersion, report every object
   as ``ADDED``; when a ``continue`` token has expired (``410 Gone`` mid-list, after etcd
   compacted the list's version away) the pages read so far are dropped and the list starts
   again from the first page at a new version (client-go's pager falls back the same way),
   so the cache is always one consistent snapshot;
2. watch from that version with ``allowWatchBookmarks`` (bookmarks only move the version on);
3. when the watch ends, watch again from the last version seen;
4. when the server says the version is gone (``410 Gone``, as an HTTP status or an ``ERROR``
   event), list again and **diff** against the cache: objects no longer there are reported
   ``DELETED`` (no ghost pods), changed ones ``MODIFIED``, new ones ``ADDED``. Nothing is
   reported twice and nothing is missed, whatever happened while the watch was down.

Other failures (connection refused while the API server restarts, 5xx) are retried with
backoff, resuming from the last version seen; a 410 then turns into step 4.

``transform`` maps each object before it is cached and reported, so an informer over many
objects keeps only what its handler needs (``k8s/slim.py``); by default it drops
``managedFields`` and the last-applied annotation. Objects are transformed page by page and
event by event, so the full JSON of at most one page is alive at once.

With ``shape`` (``k8s/projection.py``) and simdjson installed, list pages are parsed lazily
and only the fields the shape names become Python objects before ``transform`` runs. A
watch event (one object) is parsed by ``json`` and, when it is another scheduler's pod,
projected with shared strings (``projection.event``), with or without simdjson.

Handlers run on the event loop; the informer yields to other tasks every
``yield_every`` objects of a list, so a list of 100,000 pods does not hold the loop for the
whole of it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from gpupool.k8s import projection
from gpupool.k8s.kube import Kube, KubeError
from gpupool.k8s.slim import drop_managed_fields, strip

__all__ = ["Handler", "Informer", "object_key"]

log = logging.getLogger("gpupool.k8s.informer")

Handler = Callable[[str, dict[str, Any], dict[str, Any] | None], Awaitable[None] | None]


def object_key(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    return f"{ns}/{meta.get('name')}" if ns else str(meta.get("name"))


class Informer:
    def __init__(
        self,
        kube: Kube,
        path: str,
        handler: Handler,
        *,
        params: Mapping[str, str] | None = None,
        name: str = "",
        watch_timeout_s: int = 240,
        transform: Callable[[dict[str, Any]], dict[str, Any]] | None = strip,
        page_size: int = 500,
        yield_every: int = 500,
        shape: Callable[[Any], projection.Shape | None] | None = None,
    ) -> None:
        self.kube = kube
        self.path = path
        self.handler = handler
        self.params = dict(params or {})
        self.name = name or path
        self.watch_timeout_s = watch_timeout_s
        self.transform = transform
        self.page_size = page_size
        self.shape = shape  # lists parsed lazily, only this much of each object built
        self.yield_every = yield_every
        self.cache: dict[str, dict[str, Any]] = {}
        self.resource_version = ""
        self.synced = asyncio.Event()
        self.relists = 0  # how many times a 410 forced a re-list
        self.expired_lists = 0  # lists started again because a continue token expired
        self.pages = 0  # pages read, all lists together
        self._resume_from: str | None = None
        self._open = asyncio.Event()
        self._open.set()
        self._watch_task: asyncio.Task[None] | None = None

    def resume_from(self, version: str) -> None:
        """Make the next watch start at ``version`` (an old one forces a 410 and a re-list)."""
        self._resume_from = version

    def hold(self) -> None:
        """Stop watching until :meth:`release` (tests: changes made meanwhile are missed by
        the watch and must come back through the re-list)."""
        self._open.clear()
        if self._watch_task is not None:
            self._watch_task.cancel()

    def release(self) -> None:
        self._open.set()

    async def _emit(self, event: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        result = self.handler(event, obj, old)
        if result is not None:
            await result

    async def _list(self) -> tuple[dict[str, dict[str, Any]], str]:
        """Every object (transformed, by key) and the list's resourceVersion, page by page;
        an expired continue token starts the list again."""
        while True:
            fresh: dict[str, dict[str, Any]] = {}
            token = ""
            try:
                while True:
                    params = dict(self.params)
                    if self.page_size:
                        params["limit"] = str(self.page_size)
                    if token:
                        params["continue"] = token
                    _, version, token = await self._page(params, fresh)
                    self.pages += 1
                    await asyncio.sleep(0)
                    if not token:
                        return fresh, version
            except KubeError as exc:
                if exc.status != 410 or not token:
                    raise
                self.expired_lists += 1
                log.info(
                    "%s: the list's continue token expired after %d objects; listing "
                    "again from the start",
                    self.name,
                    len(fresh),
                )

    async def _page(
        self, params: dict[str, str], into: dict[str, dict[str, Any]]
    ) -> tuple[str, str, str]:
        """One page into ``into``: (kind, the list's version, the continue token)."""
        if self.shape is not None and projection.available():
            raw = await self.kube.request_raw("GET", self.path, params=params, timeout_s=120)
            parsed = projection.items(raw, self.shape)
            head = next(parsed)
            assert isinstance(head, tuple)
            kind = head[0].removesuffix("List")
            for item in parsed:
                assert isinstance(item, dict)
                self._keep(item, kind, into)
            return kind, head[1], head[2]
        body = await self.kube.request(
            "GET", self.path, params=params, timeout_s=120, raw_filter=drop_managed_fields
        )
        kind = str(body.get("kind", "")).removesuffix("List")
        for item in body.pop("items", None) or ():
            self._keep(item, kind, into)
        meta = body.get("metadata") or {}
        return kind, str(meta.get("resourceVersion", "")), str(meta.get("continue") or "")

    def _keep(self, item: dict[str, Any], kind: str, into: dict[str, dict[str, Any]]) -> None:
        item.setdefault("kind", kind)
        if self.transform is not None:
            item = self.transform(item)
        into[object_key(item)] = item

    async def relist(self) -> None:
        """List everything and report the difference with the cache."""
        fresh, version = await self._list()
        gone = [k for k in self.cache if k not in fresh]
        n = 0
        for key in gone:
            last = self.cache.pop(key)
            await self._emit("DELETED", last, last)
            n += 1
            if n % self.yield_every == 0:
                await asyncio.sleep(0)
        for key, obj in fresh.items():
            old = self.cache.get(key)
            self.cache[key] = obj
            if old is None:
                await self._emit("ADDED", obj, None)
            elif _version(old) != _version(obj):
                await self._emit("MODIFIED", obj, old)
            n += 1
            if n % self.yield_every == 0:
                await asyncio.sleep(0)
        self.resource_version = version

    async def run(self) -> None:
        backoff = 0.2
        need_list = True
        while True:
            try:
                if need_list:
                    await self.relist()
                    need_list = False
                    self.synced.set()
                await self._open.wait()
                self._watch_task = asyncio.create_task(self._watch())
                try:
                    await self._watch_task
                except asyncio.CancelledError:
                    me = asyncio.current_task()
                    if self._open.is_set() or (me is not None and me.cancelling()):
                        raise  # cancelled from outside, not held
                finally:
                    self._watch_task = None
                backoff = 0.2
            except KubeError as exc:
                if exc.status == 410:
                    log.info(
                        "%s: watch from %s is too old, listing again",
                        self.name,
                        self.resource_version,
                    )
                    self.relists += 1
                    need_list = True
                    continue
                log.warning("%s: %s; retrying in %.1f s", self.name, exc, backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)

    async def _watch(self) -> None:
        version = self.resource_version
        if self._resume_from is not None:
            version, self._resume_from = self._resume_from, None
        params = {
            **self.params,
            "resourceVersion": version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(self.watch_timeout_s),
        }
        parse = None
        if self.shape is not None:  # events need no simdjson (projection.event)
            shape = self.shape

            def parse(line: bytes) -> dict[str, Any]:
                return projection.event(line, shape)

        async for ev in self.kube.watch(self.path, params, drop_managed_fields, parse):
            kind = ev.get("type")
            obj = ev.get("object") or {}
            if kind == "ERROR":
                code = int(obj.get("code") or 0)
                raise KubeError(
                    code,
                    str(obj.get("reason", "")),
                    str(obj.get("message", "")),
                    f"WATCH {self.path}",
                )
            rv = str((obj.get("metadata") or {}).get("resourceVersion", ""))
            if kind == "BOOKMARK":
                self.resource_version = rv
                continue
            if self.transform is not None and kind in ("ADDED", "MODIFIED", "DELETED"):
                obj = self.transform(obj)
            key = object_key(obj)
            old = self.cache.get(key)
            if kind == "DELETED":
                self.cache.pop(key, None)
                await self._emit("DELETED", obj, old)
            elif kind in ("ADDED", "MODIFIED"):
                self.cache[key] = obj
                await self._emit("ADDED" if old is None else "MODIFIED", obj, old)
            self.resource_version = rv or self.resource_version


def _version(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion", ""))
