"""Nodes into the core: a Node event adds, updates or removes the core's node (a node
whose inventory cannot be read is left out, with a Warning Event naming why), and what the
pods outside the core take of each node's CPU and memory is passed on. Mixed into
:class:`~gpupool.k8s.controller.Controller`."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from gpupool.core.model import NodeName
from gpupool.k8s.parts import ControllerParts
from gpupool.k8s.translate import TranslateError

__all__ = ["NodeEvents"]

log = logging.getLogger("gpupool.k8s")


class NodeEvents(ControllerParts):
    """The node half of the controller (mixed into it)."""

    def _apply_usage(self, names: Iterable[str] | None = None) -> None:
        """Nodes whose other pods changed: the core learns what those pods hold."""
        assert self.sched is not None
        for name in self.usage.take_changed() if names is None else names:
            if name in self.nodes_by_name:
                used = self.usage.of(name)
                self.sched.set_outside(NodeName(name), used.get("cpu", 0), used.get("memory", 0))

    def _on_node(self, event: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        name = str((obj.get("metadata") or {}).get("name"))
        self.binder.node_changed(name)  # its lock may have been released
        self.extended.set_node(name, None if event == "DELETED" else obj)
        if self.sched is None:
            return
        if event == "DELETED":
            self.node_memo.forget(name)
            self._remove_node(name)
            return
        try:
            node = self._node_from(obj)
        except TranslateError as exc:
            self.node_memo.forget(name)
            self._bad_node(obj, str(exc))
            self._remove_node(name)
            return
        self.bad_nodes.pop(name, None)
        known = self.nodes_by_name.get(name)
        if known == node:
            return
        if known is None:
            self.sched.add_node(node)
        else:
            self.sched.update_node(node)
        self.nodes_by_name[name] = node
        if any(g.mig for g in node.gpus):
            self._mig_recheck = True  # pending pods' MIG profiles are chosen again
        if known is None:
            self._apply_usage([name])  # pods seen on it before the node
        self._inventory = None
        self._dirty.set()

    def _remove_node(self, name: str) -> None:
        assert self.sched is not None
        if name not in self.nodes_by_name:
            return
        del self.nodes_by_name[name]
        self._inventory = None
        for job_id in self.sched.remove_node(NodeName(name), self.clock()):
            # Its pods stay bound to the node that left; they will not run anywhere else.
            self.sched.cancel(job_id, self.clock())
            info = self.jobs.pop(job_id, None)
            for key in info.pods if info else ():
                self.pod_job.pop(key, None)
        self._dirty.set()

    def _bad_node(self, obj: Mapping[str, Any], reason: str) -> None:
        name = str((obj.get("metadata") or {}).get("name"))
        if self.bad_nodes.get(name) == reason:
            return
        self.bad_nodes[name] = reason
        log.warning("node %s ignored: %s", name, reason)
        if self.is_leader():
            self._spawn(self.status.event(obj, "Warning", "InvalidNode", reason))
