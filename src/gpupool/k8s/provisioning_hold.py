"""Queued provisioning on Kubernetes: the nodes of a Provisioned request, found and held.

The rules for which nodes are a request's live in ``k8s/provisioning_nodes.py`` (labelled for
it; matching the details its class reports; or the booking of free nodes that fit, newest
first). This part of ``ProvisioningAdapter`` applies them to the controller's nodes: it holds
the nodes found in the controller's view (with the request's label and taint, in the core
only), records them on the request (``gpupool.io/nodes``, read back after a restart), offers
nodes that register later to requests still short of nodes, tells the core the request is
Provisioned once its nodes hold all its pods, and gives the nodes back when it ends.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from gpupool.core.model import Node, NodeName
from gpupool.core.provisioning import REQUEST_LABEL, CheckRecord, ProvisioningRequest
from gpupool.k8s.kube import MERGE_PATCH, Kube, KubeError
from gpupool.k8s.provisioning_nodes import NodeBook, enough, fits, matching, pick
from gpupool.k8s.provisioning_objects import (
    NODES_ANNOTATION,
    class_details,
    nodes_annotation,
    ns_path,
    wall_s,
)
from gpupool.k8s.translate import TranslateError, node_from_k8s

if TYPE_CHECKING:
    from collections.abc import Coroutine

    from gpupool.k8s.controller import Controller

__all__ = ["HoldNodes"]

log = logging.getLogger("gpupool.k8s.provisioning")


class HoldNodes:
    """The nodes half of ``ProvisioningAdapter``: a Provisioned request's nodes found
    (``_attribute``), held in the controller's view (``mark``, ``_refresh``), recorded on the
    request, offered when they register late (``_offer``), and let go (``_release``)."""

    kube: Kube
    controller: Controller
    booking: NodeBook  # the nodes each Provisioned request holds

    if TYPE_CHECKING:

        def _fact(self, what: str, key: str, *args: object) -> None: ...

        def _spawn(self, coro: Coroutine[Any, Any, None]) -> None: ...

        def _record(self, req: ProvisioningRequest) -> CheckRecord | None: ...

    def nodes_of(self, key: str) -> list[str]:
        """The request's nodes: labelled for it, or held for it in gpupool's view."""
        ns, name = key.split("/", 1)
        value = f"{ns}.{name}"
        held = self.booking.nodes(key)
        return sorted(
            {
                n.name
                for n in self.controller.nodes_by_name.values()
                if n.labels.get(REQUEST_LABEL) == value and n.name not in held
            }
            | set(held)
        )

    def _book_request(self, key: str) -> ProvisioningRequest | None:
        sched = self.controller.sched
        checks = sched.checks if sched is not None else None
        return checks.request(key) if checks is not None else None

    def mark(self, node: Node) -> Node:
        """The controller's view of a node it read: with the label and taint of the request
        holding it; a free node that joined is offered to requests still taking nodes."""
        key = self.booking.holder.get(node.name)
        if (
            key is None
            and REQUEST_LABEL not in node.labels
            and (self.booking.short or self.booking.selector)
        ):
            self._offer(node)
        elif key is not None and (key in self.booking.short or key in self.booking.arriving):
            self._arrived(key, node)
        return self.booking.mark(node)

    def _arrived(self, key: str, fresh: Node) -> None:
        """Whether the nodes held for ``key`` (``fresh`` as it is now) hold all its pods:
        then it takes no more, and the core hears it is Provisioned if it has not yet."""
        req = self._book_request(key)
        if req is None:
            return
        held = [
            fresh if n == fresh.name else self.controller.nodes_by_name.get(n)
            for n in self.booking.nodes(key)
        ]
        if not enough(req.pod_sets, [n for n in held if n is not None]):
            return
        self.booking.short.discard(key)
        if key in self.booking.arriving:  # every node is there: Provisioned now
            self.booking.arriving.discard(key)
            self._fact("provisioned", key, self.booking.nodes(key))

    def _busy(self, name: str) -> bool:
        sched = self.controller.sched
        return sched is not None and bool(sched.placements_on(NodeName(name)))

    def _offer(self, node: Node) -> None:
        sched = self.controller.sched
        if sched is None or not node.schedulable:
            return
        for key in sorted({*self.booking.short, *self.booking.selector}):
            req = self._book_request(key)
            if req is None or req.ended or req.consumed_s is not None:
                self.booking.short.discard(key)
                self.booking.arriving.discard(key)
                continue
            if key not in self.booking.selector and self._busy(node.name):
                return
            if not self.booking.wants(key, node, req.pod_sets):
                continue
            self.booking.hold(key, req.node_label, [node.name])
            log.info("ProvisioningRequest %s: node %s joined its booking", key, node.name)
            self._spawn(self._record_nodes(key))
            self._arrived(key, node)
            self.controller.wake()
            return

    def _created(self, name: str) -> float:
        obj = self.controller.node_informer.cache.get(name) or {}
        return wall_s((obj.get("metadata") or {}).get("creationTimestamp")) or 0.0

    def _config_details(self, req: ProvisioningRequest) -> dict[str, str]:
        """node label -> provisioningClassDetails key, of the request's config."""
        rec = self._record(req)
        sched = self.controller.sched
        check = (
            rec.check
            if rec is not None
            else sched.checks.check_for(req.queue)
            if sched is not None and sched.checks
            else None
        )
        return dict(check.config.node_selector_details) if check is not None else {}

    def _attribute(self, key: str, obj: dict[str, Any]) -> tuple[list[str], bool]:
        """A request is Provisioned: find its nodes (see ``k8s/provisioning_nodes.py``),
        hold them in gpupool's view and record them on the request; and whether they hold
        all its pods (if not, nodes that register later are taken until they do)."""
        req = self._book_request(key)
        if req is None:
            return [], False
        ctl = self.controller
        labelled = [
            n.name
            for n in ctl.nodes_by_name.values()
            if n.labels.get(REQUEST_LABEL) == req.node_label
        ]
        if labelled:
            return sorted(labelled), True
        held = [ctl.nodes_by_name[n] for n in self.booking.nodes(key) if n in ctl.nodes_by_name]
        free = [
            n
            for n in ctl.nodes_by_name.values()
            if n.name not in self.booking.holder
            and REQUEST_LABEL not in n.labels
            and n.schedulable
            and not self._busy(n.name)
        ]
        wanted = self._config_details(req)
        details = class_details(obj)
        if wanted and all(d in details for d in wanted.values()):
            selector = {label: details[d] for label, d in wanted.items()}
            self.booking.selector[key] = selector
            chosen = matching(selector, free)
            full = enough(req.pod_sets, [*held, *chosen])
        else:
            since = wall_s((obj.get("metadata") or {}).get("creationTimestamp")) or 0.0
            free = [n for n in free if any(fits(ps, n) for ps in req.pod_sets)]
            free.sort(key=lambda n: (self._created(n.name) < since, -self._created(n.name), n.name))
            chosen, full = pick(req.pod_sets, free, held)
            if not full:
                self.booking.short.add(key)
        self.booking.hold(key, req.node_label, [n.name for n in chosen])
        for n in chosen:
            self._refresh(n.name)
        self._spawn(self._record_nodes(key))
        return self.booking.nodes(key), full

    def _release(self, key: str) -> None:
        for name in self.booking.release(key):
            self._refresh(name)

    def _refresh(self, name: str) -> None:
        """The core's node ``name`` again from the informer's object, with its marks."""
        ctl = self.controller
        obj = ctl.node_informer.cache.get(name)
        if ctl.sched is None or obj is None or name not in ctl.nodes_by_name:
            return
        try:
            node = self.booking.mark(node_from_k8s(obj))
        except TranslateError:
            return
        if ctl.nodes_by_name.get(name) != node:
            ctl.nodes_by_name[name] = node
            ctl.sched.update_node(node)
            ctl.wake()

    async def _record_nodes(self, key: str) -> None:
        """``gpupool.io/nodes`` on the request: its booking, read back after a restart."""
        ns, name = key.split("/", 1)
        value = ",".join(self.booking.nodes(key))
        try:
            await self.kube.request(
                "PATCH",
                ns_path(ns, "provisioningrequests", name),
                {"metadata": {"annotations": {NODES_ANNOTATION: value}}},
                content_type=MERGE_PATCH,
            )
        except KubeError as exc:
            if exc.status != 404:
                log.warning("ProvisioningRequest %s: nodes not recorded: %s", key, exc)

    def _held_back(self, key: str, obj: dict[str, Any]) -> None:
        """A booking recorded on the request (after a restart) is held again."""
        names = nodes_annotation(obj)
        if not names or key in self.booking.label:
            return
        ns, name = key.split("/", 1)
        self.booking.hold(key, f"{ns}.{name}", names)
        for n in names:
            self._refresh(n)
