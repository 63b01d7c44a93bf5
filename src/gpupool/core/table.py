"""NodeTable: the cluster as columns, one row per node and one cell per card.

Placement filters and scores read whole columns at once (numpy), so a decision over 10,000
nodes costs a handful of vector operations rather than 10,000 Python calls. Every change of a
row goes through ``apply`` (a placement in or out) or ``set_node`` (inventory), which keep the
derived columns current and stamp the row with a fresh generation number; caches keyed by
(row, generation) stay valid until that row changes, as kube-scheduler's NodeInfo generations.

Cells of cards a node does not have, cards that are unhealthy, MIG-partitioned cards and cards
holding as many placements as their ``max_holders`` allows hold -1 in ``free_milli`` and
``free_mib``, so "a card with at least m free" never matches them. ``holders`` counts the
placements holding part of each card (HAMi's per-card ``Used``), ``holder_cap`` their limit.

``gpu_device`` names each card's division rule (``core/devices.py``) by its index in
``devices``; what a slice takes of each card under its rule is ``core/table_shapes.py``'s, and
whether a placement has room before ``apply`` takes it is ``core/table_room.py``'s.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import numpy.typing as npt

from gpupool.core import table_shapes
from gpupool.core.devices import NVIDIA, DeviceClass
from gpupool.core.errors import ConflictError, NotFoundError
from gpupool.core.model import WHOLE_GPU_MILLI, GpuRequest, GpuShare, Node, NodeName, Placement
from gpupool.core.table_room import check_room

I64 = npt.NDArray[np.int64]
I32 = npt.NDArray[np.int32]
Bool = npt.NDArray[np.bool_]

_ROW_COLUMNS = (
    "cpu_cap",
    "cpu_free",
    "mem_cap",
    "mem_free",
    "cpu_outside",
    "mem_outside",
    "schedulable",
    "alive",
    "gpu_count",
    "free_whole",
    "rank",
    "milli_total",
    "milli_free",
    "max_free_milli",
    "max_free_mib",
    "binds_in_flight",
)
_KIND_COLUMNS = ("tasks_by_kind",)
_CELL_COLUMNS = (
    "gpu_usable",
    "gpu_mig",
    "gpu_model",
    "gpu_mem_cap",
    "used_milli",
    "used_mib",
    "free_milli",
    "free_mib",
    "holders",
    "holder_cap",
    "gpu_uuid",
    "gpu_device",
)
NO_HOLDER_LIMIT = 1 << 40
"""``holder_cap`` of a card without a split count."""


class NodeTable:
    """Capacity and free resources of every node, as numpy columns.

    Row ``i`` is ``nodes[i]``; rows are never reused, a removed node's row stays dead
    (``alive`` False) so indices held elsewhere remain valid.
    """

    def __init__(self, gpu_width: int = 8, capacity: int = 16) -> None:
        self.width = max(1, gpu_width)
        self.n = 0
        self.nodes: list[Node] = []
        self.index: dict[NodeName, int] = {}
        self.models: list[str] = []
        self.model_code: dict[str, int] = {}
        self.mig_profiles: dict[str, int] = {}
        self.uuid_code: dict[str, int] = {}
        self.devices: list[DeviceClass] = [NVIDIA]
        self.device_code: dict[DeviceClass, int] = {NVIDIA: 0}
        self.plain = True  # every device class seen divides as NVIDIA's
        self.version = 0  # bumped whenever inventory (not usage) changes
        self._counter = 0
        self._alloc(capacity)

    # -- storage ---------------------------------------------------------------------------

    def _alloc(self, capacity: int) -> None:
        w = self.width
        self.cap_rows = capacity
        self.cpu_cap: I64 = np.zeros(capacity, np.int64)
        self.cpu_free: I64 = np.zeros(capacity, np.int64)
        self.mem_cap: I64 = np.zeros(capacity, np.int64)
        self.mem_free: I64 = np.zeros(capacity, np.int64)
        # what work placed by someone else holds (another scheduler's pods, DaemonSets):
        # taken from the free columns, not from the capacity
        self.cpu_outside: I64 = np.zeros(capacity, np.int64)
        self.mem_outside: I64 = np.zeros(capacity, np.int64)
        self.schedulable: Bool = np.zeros(capacity, np.bool_)
        self.alive: Bool = np.zeros(capacity, np.bool_)
        # GPU placements whose bind is still being carried out on the node (the adapter
        # says how many; each GPU placement taken adds one until it next says)
        self.binds_in_flight: I64 = np.zeros(capacity, np.int64)
        self.gpu_count: I64 = np.zeros(capacity, np.int64)
        self.free_whole: I64 = np.zeros(capacity, np.int64)
        self.rank: I64 = np.zeros(capacity, np.int64)
        # Per-node sums and maxima of the cells, kept with them, so the common questions
        # ("how full is this node", "could any card hold this slice") read one value a node.
        self.milli_total: I64 = np.zeros(capacity, np.int64)
        self.milli_free: I64 = np.zeros(capacity, np.int64)
        self.max_free_milli: I64 = np.full(capacity, -1, np.int64)
        self.max_free_mib: I64 = np.full(capacity, -1, np.int64)
        self.gen: I64 = np.zeros(capacity, np.int64)
        self.gpu_usable: Bool = np.zeros((capacity, w), np.bool_)
        self.gpu_mig: Bool = np.zeros((capacity, w), np.bool_)
        self.gpu_model: I64 = np.full((capacity, w), -1, np.int64)
        self.gpu_mem_cap: I64 = np.zeros((capacity, w), np.int64)
        self.used_milli: I64 = np.zeros((capacity, w), np.int64)
        self.used_mib: I64 = np.zeros((capacity, w), np.int64)
        self.free_milli: I64 = np.full((capacity, w), -1, np.int64)
        self.free_mib: I64 = np.full((capacity, w), -1, np.int64)
        self.holders: I64 = np.zeros((capacity, w), np.int64)
        self.holder_cap: I64 = np.full((capacity, w), NO_HOLDER_LIMIT, np.int64)
        self.gpu_uuid: I64 = np.full((capacity, w), -1, np.int64)
        self.gpu_device: I64 = np.zeros((capacity, w), np.int64)
        self.mig_free: dict[str, I64] = {
            p: np.zeros((capacity, w), np.int64) for p in self.mig_profiles
        }
        # Tasks per node by kind: column 0 no GPU, 1 a slice or MIG instance, 1+k k whole GPUs.
        self.tasks_by_kind: I64 = np.zeros((capacity, w + 2), np.int64)

    def _grow(self, rows: int, width: int) -> None:
        if rows <= self.cap_rows and width <= self.width:
            return
        names = (*_ROW_COLUMNS, "gen", *_CELL_COLUMNS, *_KIND_COLUMNS)
        old = {name: getattr(self, name) for name in names}
        old_mig = self.mig_free
        old_width = self.width
        self.width = max(self.width, width)
        self._alloc(max(rows, self.cap_rows * 2) if rows > self.cap_rows else self.cap_rows)
        n = self.n
        for name, arr in old.items():
            new = getattr(self, name)
            if arr.ndim == 1:
                new[:n] = arr[:n]
            else:
                new[:n, : arr.shape[1]] = arr[:n]
        for p, arr in old_mig.items():
            self.mig_free[p][:n, :old_width] = arr[:n]

    def _stamp(self, i: int) -> None:
        self._counter += 1
        self.gen[i] = self._counter

    # -- inventory -------------------------------------------------------------------------

    def add_node(self, node: Node) -> int:
        if node.name in self.index:
            raise ConflictError(f"node {node.name} already exists")
        self._grow(self.n + 1, len(node.gpus))
        i = self.n
        self.n += 1
        self.nodes.append(node)
        self.index[node.name] = i
        self.rank[i] = i
        self._write_inventory(i, node)
        self.cpu_free[i] = node.cpu_milli
        self.mem_free[i] = node.memory_mib
        self.cpu_outside[i] = 0
        self.mem_outside[i] = 0
        self.used_milli[i] = 0
        self.used_mib[i] = 0
        self.holders[i] = 0
        self.tasks_by_kind[i] = 0
        for gpu in node.gpus:
            for inst in gpu.mig:
                self.mig_free[inst.profile][i, gpu.index] = inst.count
        self._derive(i)
        return i

    def set_node(self, node: Node) -> int:
        """Replace a node's spec (cordon, health, labels) keeping what is allocated on it."""
        i = self.row(node.name)
        old = self.nodes[i]
        if len(node.gpus) != len(old.gpus):
            raise ConflictError(
                f"node {node.name}: GPU count cannot change from {len(old.gpus)} to "
                f"{len(node.gpus)} while it is in the cluster; remove and add it"
            )
        self.nodes[i] = node
        self.cpu_free[i] += node.cpu_milli - self.cpu_cap[i]
        self.mem_free[i] += node.memory_mib - self.mem_cap[i]
        self._write_inventory(i, node)
        # a MIG card's instance counts may change (an adapter that counts what its placements
        # leave): the held instances stay held, the difference is free
        before = {g.index: {m.profile: m.count for m in g.mig} for g in old.gpus}
        for gpu in node.gpus:
            was = before.get(gpu.index, {})
            now = {m.profile: m.count for m in gpu.mig}
            for profile in set(was) | set(now):
                change = now.get(profile, 0) - was.get(profile, 0)
                if change:
                    self.mig_free[profile][i, gpu.index] += change
        self._derive(i)
        return i

    def set_outside(self, name: NodeName, cpu_milli: int, memory_mib: int) -> int:
        """What work the scheduler did not place holds on a node (absolute amounts): it
        comes off the node's free CPU and memory, never off its capacity, so a request is
        still judged against what the node could ever give."""
        i = self.row(name)
        self.cpu_free[i] -= cpu_milli - self.cpu_outside[i]
        self.mem_free[i] -= memory_mib - self.mem_outside[i]
        self.cpu_outside[i] = cpu_milli
        self.mem_outside[i] = memory_mib
        self._stamp(i)
        return i

    def set_binds_in_flight(self, name: NodeName, count: int) -> int:
        """How many placements on a node are still being bound (absolute)."""
        i = self.row(name)
        if self.binds_in_flight[i] != count:
            self.binds_in_flight[i] = count
            self._stamp(i)
        return i

    def remove_node(self, name: NodeName) -> int:
        i = self.row(name)
        self.alive[i] = False
        self.schedulable[i] = False
        del self.index[name]
        self.version += 1
        self._stamp(i)
        return i

    def _write_inventory(self, i: int, node: Node) -> None:
        self.version += 1
        self.cpu_cap[i] = node.cpu_milli
        self.mem_cap[i] = node.memory_mib
        self.schedulable[i] = node.schedulable
        self.alive[i] = True
        self.gpu_count[i] = len(node.gpus)
        self.gpu_usable[i] = False
        self.gpu_mig[i] = False
        self.gpu_model[i] = -1
        self.gpu_mem_cap[i] = 0
        self.holder_cap[i] = NO_HOLDER_LIMIT
        self.gpu_uuid[i] = -1
        self.gpu_device[i] = 0
        for gpu in node.gpus:
            if not 0 <= gpu.index < len(node.gpus):
                raise ConflictError(
                    f"node {node.name}: GPU index {gpu.index} outside 0..{len(node.gpus) - 1}"
                )
            code = self.model_code.get(gpu.model)
            if code is None:
                code = self.model_code[gpu.model] = len(self.models)
                self.models.append(gpu.model)
            for inst in gpu.mig:
                if inst.profile not in self.mig_profiles:
                    self.mig_profiles[inst.profile] = len(self.mig_profiles)
                    self.mig_free[inst.profile] = np.zeros((self.cap_rows, self.width), np.int64)
            self.gpu_model[i, gpu.index] = code
            dev = self.device_code.get(gpu.device)
            if dev is None:
                dev = self.device_code[gpu.device] = len(self.devices)
                self.devices.append(gpu.device)
                self.plain = self.plain and gpu.device.is_plain
            self.gpu_device[i, gpu.index] = dev
            self.gpu_mem_cap[i, gpu.index] = gpu.memory_mib
            self.gpu_mig[i, gpu.index] = gpu.is_mig
            self.gpu_usable[i, gpu.index] = gpu.healthy and not gpu.is_mig
            if gpu.max_holders > 0:
                self.holder_cap[i, gpu.index] = gpu.max_holders
            if gpu.uuid:
                code = self.uuid_code.get(gpu.uuid)
                if code is None:
                    code = self.uuid_code[gpu.uuid] = len(self.uuid_code)
                self.gpu_uuid[i, gpu.index] = code

    def _derive(self, i: int) -> None:
        usable = self.gpu_usable[i]
        open_ = usable & (self.holders[i] < self.holder_cap[i])
        self.free_milli[i] = np.where(open_, WHOLE_GPU_MILLI - self.used_milli[i], -1)
        self.free_mib[i] = np.where(open_, self.gpu_mem_cap[i] - self.used_mib[i], -1)
        self.free_whole[i] = int(
            np.count_nonzero(usable & (self.used_milli[i] == 0) & (self.used_mib[i] == 0))
        )
        self.milli_total[i] = WHOLE_GPU_MILLI * int(np.count_nonzero(usable))
        free = self.free_milli[i]
        self.milli_free[i] = int(free[free > 0].sum())
        self.max_free_milli[i] = int(free.max())
        self.max_free_mib[i] = int(self.free_mib[i].max())
        self._stamp(i)

    def row(self, name: NodeName) -> int:
        try:
            return self.index[name]
        except KeyError:
            raise NotFoundError(f"node {name!r} is not in the cluster") from None

    # -- usage -----------------------------------------------------------------------------

    def apply(self, p: Placement, sign: int = 1) -> int:
        """Take (sign=1) or give back (sign=-1) what ``p`` holds; all or nothing.

        Raises ConflictError, changing nothing, when taking would over-commit a node or card.
        """
        i = self.row(p.node)
        if sign > 0:
            check_room(self, i, p)
        self.cpu_free[i] -= sign * p.cpu_milli
        self.mem_free[i] -= sign * p.memory_mib
        for s in p.shares:
            if s.mig_profile is not None:
                self.mig_free[s.mig_profile][i, s.index] -= sign
            else:
                self.used_milli[i, s.index] += sign * s.gpu_milli
                self.used_mib[i, s.index] += sign * s.memory_mib
                self.holders[i, s.index] += sign
        self.tasks_by_kind[i, task_kind(p)] += sign
        if p.shares:
            self.binds_in_flight[i] = max(0, int(self.binds_in_flight[i]) + sign)
        self._derive(i)
        return i

    # -- copies ----------------------------------------------------------------------------

    def copy(self) -> NodeTable:
        other = NodeTable.__new__(NodeTable)
        other.width = self.width
        other.n = self.n
        other.nodes = list(self.nodes)
        other.index = dict(self.index)
        other.models = list(self.models)
        other.model_code = dict(self.model_code)
        other.mig_profiles = dict(self.mig_profiles)
        other.uuid_code = dict(self.uuid_code)
        other.devices = list(self.devices)
        other.device_code = dict(self.device_code)
        other.plain = self.plain
        other.version = self.version
        other._counter = self._counter
        other.cap_rows = self.cap_rows
        for name in (*_ROW_COLUMNS, "gen", *_CELL_COLUMNS, *_KIND_COLUMNS):
            setattr(other, name, getattr(self, name).copy())
        other.mig_free = {p: a.copy() for p, a in self.mig_free.items()}
        return other

    def copy_rows(self, src: NodeTable, rows: Iterable[int] | npt.NDArray[np.int64]) -> None:
        """Make ``rows`` equal to ``src``'s (same inventory version), with fresh generations."""
        idx = np.fromiter(rows, np.int64) if not isinstance(rows, np.ndarray) else rows
        if idx.size == 0:
            return
        for name in (*_ROW_COLUMNS, *_CELL_COLUMNS, *_KIND_COLUMNS):
            getattr(self, name)[idx] = getattr(src, name)[idx]
        for p, arr in src.mig_free.items():
            self.mig_free[p][idx] = arr[idx]
        for i in idx.tolist():
            self.nodes[i] = src.nodes[i]
        start = self._counter + 1
        self._counter += int(idx.size)
        self.gen[idx] = np.arange(start, self._counter + 1, dtype=np.int64)

    # -- reading ---------------------------------------------------------------------------

    def live(self) -> npt.NDArray[np.int64]:
        return np.flatnonzero(self.alive[: self.n])

    def card_state(self, i: int) -> list[tuple[int, int, int]]:
        """(index, free milli, free MiB) of each usable card of row ``i``."""
        return [
            (g, int(self.free_milli[i, g]), int(self.free_mib[i, g]))
            for g in range(int(self.gpu_count[i]))
            if self.gpu_usable[i, g]
        ]

    # what a slice takes of each card under its division rule: ``core/table_shapes.py``

    def slice_room(self, rows: npt.NDArray[np.int64], req: GpuRequest) -> Bool:
        return table_shapes.slice_room(self, rows, req)

    def slice_need(self, rows: npt.NDArray[np.int64], req: GpuRequest) -> tuple[I64, I64]:
        return table_shapes.slice_need(self, rows, req)

    def shaped(self, row: int, shares: tuple[GpuShare, ...]) -> tuple[GpuShare, ...]:
        return table_shapes.shaped(self, row, shares)

    def device(self, row: int, card: int) -> DeviceClass:
        return self.devices[int(self.gpu_device[row, card])]


def task_kind(p: Placement) -> int:
    """Column of ``tasks_by_kind`` for a placement: 0 no GPU, 1 a share of one card, 1+k k cards."""
    if not p.shares:
        return 0
    if len(p.shares) == 1 and (p.shares[0].mig_profile or p.shares[0].gpu_milli < WHOLE_GPU_MILLI):
        return 1
    return 1 + len(p.shares)
