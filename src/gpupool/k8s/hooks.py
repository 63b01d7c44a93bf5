"""The typed seams by which Elastic GPU objects and queued provisioning attach to the
scheduler for pods (``k8s/controller.py``).

``k8s/main.py`` makes each one and attaches it with :meth:`Controller.attach`; the
controller calls only what these Protocols name, at fixed points:

- rebuild: ``ElasticHook.ready()`` after bound pods are taken back and before pending pods
  are submitted; ``ProvisioningHook.restore(sched)`` then, and ``sweep()`` at the end;
- reading a pod: ``ElasticHook.consumer_request`` (a claim-consuming pod asks for no GPU of
  its own);
- a cycle: ``ProvisioningHook.handle(result)``; a submission: ``resubmitted(job)``;
- a bind: both hooks' ``bind_annotations``, written with the Binding.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from gpupool.core.decisions import CycleResult
from gpupool.core.model import JobId, Node
from gpupool.core.scheduler import Scheduler
from gpupool.k8s.informer import Informer
from gpupool.k8s.translate import PodRequest, ResourceNames

__all__ = ["ElasticHook", "ProvisioningHook"]


class ElasticHook(Protocol):
    @property
    def informers(self) -> Mapping[str, Informer]: ...

    def ready(self) -> Any: ...

    def consumer_request(self, pod: Mapping[str, Any], req: PodRequest) -> PodRequest: ...

    def bind_annotations(
        self, pod: Mapping[str, Any], node: str, now_s: float
    ) -> dict[str, str]: ...

    def admit_pod(self, pod: Mapping[str, Any], names: ResourceNames) -> list[dict[str, Any]]: ...

    def admit_claim(self, obj: Mapping[str, Any]) -> None: ...


class ProvisioningHook(Protocol):
    @property
    def informer(self) -> Informer: ...

    def handle(self, result: CycleResult) -> None: ...

    def restore(self, sched: Scheduler) -> None: ...

    def sweep(self) -> None: ...

    def resubmitted(self, job: JobId) -> None: ...

    def bind_annotations(self, job: JobId) -> dict[str, str]: ...

    def mark(self, node: Node) -> Node: ...
