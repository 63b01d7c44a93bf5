"""Every Namespace's labels, watched: what a ``namespaceSelector`` is matched against.

Two readers: a pod (anti-)affinity term's non-empty ``namespaceSelector`` (kube-scheduler
matches it against the labels of the namespace of each pod it counts), and Kueue's
ClusterQueue ``namespaceSelector`` (``k8s/kueue/``). Namespaces are watched only where the
service account may list them (``deploy/rbac.yaml`` grants it); where it may not, a warning
says so, :attr:`Namespaces.watched` stays False and selectors are not resolved (the pod is
told which of its fields are not honoured).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from gpupool.k8s import slim
from gpupool.k8s.informer import Informer
from gpupool.k8s.kube import Kube, KubeError

__all__ = ["NAMESPACES", "Namespaces", "listable"]

log = logging.getLogger("gpupool.k8s")

NAMESPACES = "/api/v1/namespaces"


async def listable(kube: Kube, path: str, what: str) -> bool:
    """Whether this service account may list ``path`` (a warning says ``what`` is lost when
    it may not)."""
    try:
        await kube.request("GET", path, params={"limit": "1"})
    except KubeError as exc:
        if exc.status not in (403, 404):
            raise
        log.warning("%s are not listable (%s): %s", path, exc, what)
        return False
    return True


class Namespaces:
    """Namespace name -> labels, kept by a metadata-only informer; ``on_change(name)`` is
    called once synced whenever a Namespace appears, goes, or changes its labels."""

    def __init__(self, kube: Kube, on_change: Callable[[str], None]) -> None:
        self.labels: dict[str, dict[str, str]] = {}
        self.watched = False  # True once listed and synced
        self.informer = Informer(
            kube, NAMESPACES, self._on_event, name="namespaces", transform=slim.metadata_only
        )
        self._on_change = on_change

    def _on_event(self, event: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        meta = obj.get("metadata") or {}
        name = str(meta.get("name") or "")
        before = self.labels.get(name)
        if event == "DELETED":
            self.labels.pop(name, None)
            after = None
        else:
            after = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
            self.labels[name] = after
        if before != after and self.informer.synced.is_set():
            self._on_change(name)

    def known(self) -> dict[str, dict[str, str]] | None:
        """The labels to resolve selectors with; None while Namespaces are not watched."""
        return self.labels if self.watched else None
