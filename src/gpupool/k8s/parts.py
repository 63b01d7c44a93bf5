"""What the pieces of the controller (``k8s/pods.py``, ``k8s/rebuild.py``) see of it: the
shared state and methods that :class:`~gpupool.k8s.controller.Controller` defines, declared
for the type checker only."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import asyncio

    from gpupool.core.decisions import Bind
    from gpupool.core.model import JobId, Node, Placement
    from gpupool.core.quota import QueueConfig
    from gpupool.core.scheduler import Scheduler
    from gpupool.k8s.binding import BindItem, PodBinder
    from gpupool.k8s.constraints import Constraints
    from gpupool.k8s.extended import ExtendedLedger
    from gpupool.k8s.hami.mig import MigAllocation
    from gpupool.k8s.hooks import ElasticHook, ProvisioningHook
    from gpupool.k8s.informer import Informer
    from gpupool.k8s.inventory import Inventory, NodeMemo
    from gpupool.k8s.jobs import JobInfo
    from gpupool.k8s.kube import Kube
    from gpupool.k8s.migledger import MigLedger
    from gpupool.k8s.namespaces import Namespaces
    from gpupool.k8s.podview import NodeUsage
    from gpupool.k8s.status import StatusWriter
    from gpupool.k8s.translate import GangRef, PodRequest, RecordedPlacement
    from gpupool.k8s.vendors.switch import FormSwitcher


__all__ = ["ControllerParts"]


class ControllerParts:
    if TYPE_CHECKING:
        kube: Kube
        config: QueueConfig
        opt: Any
        stats: Any
        clock: Callable[[], float]
        sched: Scheduler | None
        nodes_by_name: dict[str, Node]
        jobs: dict[JobId, JobInfo]
        pod_job: dict[str, JobId]
        requests: dict[str, PodRequest]
        constraints: dict[str, Constraints]
        uids: dict[str, str]
        rejected: dict[str, str]
        gated: dict[str, tuple[str, ...]]
        backoff: dict[str, tuple[float, float]]
        _backoff_timers: set[str]
        bad_nodes: dict[str, str]
        gangs: dict[JobId, tuple[GangRef, dict[str, PodRequest]]]
        gang_of: dict[str, JobId]
        unclaimed: dict[JobId, dict[str, RecordedPlacement]]
        unclaimed_job: dict[str, JobId]
        job_sizes: dict[str, int]
        evicting: dict[str, str]
        deferred: dict[JobId, tuple[Bind, float]]
        usage: NodeUsage
        namespaces: Namespaces
        extended: ExtendedLedger
        mig: MigLedger
        _mig_recheck: bool
        extended_asks: dict[str, dict[str, int]]
        node_informer: Informer
        pod_informer: Informer
        status: StatusWriter
        binder: PodBinder
        elastic: ElasticHook | None
        provisioning: ProvisioningHook | None
        switcher: FormSwitcher
        _dirty: asyncio.Event
        _inventory: Inventory | None
        node_memo: NodeMemo
        resubmit_at: dict[str, float]

        def _spawn(self, coro: Any) -> None: ...
        def _bind_item(
            self,
            key: str,
            p: Placement,
            info: JobInfo,
            flavor: str,
            now: float,
            pod: Mapping[str, Any] | None,
        ) -> BindItem: ...
        def _victim_gone(self, key: str) -> None: ...
        def _bad_node(self, obj: Mapping[str, Any], reason: str) -> None: ...
        def _apply_usage(self) -> None: ...
        def _restore(self, job_id: JobId, members: list[tuple[str, RecordedPlacement]]) -> None: ...
        def _count(self, event: str, key: str, obj: Mapping[str, Any]) -> None: ...
        def _admit(self, key: str) -> None: ...
        def all_pods(self) -> list[tuple[str, dict[str, Any]]]: ...
        def pod(self, key: str) -> dict[str, Any] | None: ...
        def own_pod(self, key: str) -> dict[str, Any] | None: ...
        def is_leader(self) -> bool: ...
        def _pod_ended(self, key: str) -> None: ...
        def _mig_changed(self, name: str) -> None: ...
        def _count_mig(self, key: str, obj: Mapping[str, Any], node: str, gone: bool) -> None: ...
        def _asks(self, key: str, pod: Mapping[str, Any]) -> dict[str, int]: ...
        def _bound_elsewhere(self, key: str, obj: Mapping[str, Any]) -> None: ...
        def _back_off(self, key: str) -> None: ...
        def recorded(self, pod: Mapping[str, Any]) -> RecordedPlacement | None: ...
        def read_request(self, pod: Mapping[str, Any]) -> PodRequest: ...
        def resolve_queue(self, pod: Mapping[str, Any]) -> str: ...
        def _in_gang(self, key: str) -> bool: ...
        def _choose_mig_again(self) -> None: ...
        def _node_from(self, obj: Mapping[str, Any]) -> Node: ...
        def _report_binds_in_flight(self) -> None: ...
        def _bind_failed(self, key: str, reason: str | None) -> None: ...
        def _mig_placements(self, key: str, p: Placement) -> list[MigAllocation] | str: ...
