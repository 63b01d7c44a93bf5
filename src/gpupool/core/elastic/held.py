"""What a binder holds: ElasticGPUClasses, ElasticGPUs and claims by name, each ElasticGPU's
card, slice or MIG instance held in the ClusterState as a placement of its own.

Here are what operators and failures do to those objects directly, as they do to
PersistentVolumes: a class registered or deleted; an ElasticGPU made by an operator (a static
PV: Available, holding its card at once), deleted, or made Available again after a claim's
``Retain``; the objects a store kept, taken back after a restart with no new decision; a node
that leaves or a card that fails, whose ElasticGPUs fail and whose claims are Lost. Binding
claims is the ``Binder``'s (``binder.py``), which builds on this.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import replace

from gpupool.core.cluster import ClusterState
from gpupool.core.elastic.classes import ElasticGPUClass
from gpupool.core.elastic.objects import (
    ClaimPhase,
    ElasticGPU,
    ElasticGPUClaim,
    GpuPhase,
    Source,
)
from gpupool.core.elastic.resolution import TASK_PREFIX, task_of
from gpupool.core.errors import ConfigError, ConflictError, NotFoundError
from gpupool.core.model import WHOLE_GPU_MILLI, GpuShare, JobId, NodeName, Placement, TaskId


class HeldObjects:
    """The three kinds of objects, and the cards ElasticGPUs hold in the ClusterState (shared
    with the scheduler, so ElasticGPUs and jobs see each other's cards taken)."""

    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self._classes: dict[str, ElasticGPUClass] = {}
        self._claims: dict[str, ElasticGPUClaim] = {}
        self._gpus: dict[str, ElasticGPU] = {}

    # -- views -------------------------------------------------------------------------------

    def classes(self) -> list[ElasticGPUClass]:
        return [self._classes[k] for k in sorted(self._classes)]

    def claims(self) -> list[ElasticGPUClaim]:
        return list(self._claims.values())

    def gpus(self) -> list[ElasticGPU]:
        return [self._gpus[k] for k in sorted(self._gpus)]

    def get_class(self, name: str) -> ElasticGPUClass:
        try:
            return self._classes[name]
        except KeyError:
            raise NotFoundError(
                f"ElasticGPUClass {name!r} does not exist; known: "
                f"{', '.join(sorted(self._classes)) or 'none'}"
            ) from None

    def claim(self, key: str) -> ElasticGPUClaim:
        try:
            return self._claims[key]
        except KeyError:
            raise NotFoundError(f"ElasticGPUClaim {key!r} does not exist") from None

    def gpu(self, name: str) -> ElasticGPU:
        try:
            return self._gpus[name]
        except KeyError:
            raise NotFoundError(f"ElasticGPU {name!r} does not exist") from None

    def bound_to(self, key: str) -> list[ElasticGPU]:
        """The ElasticGPUs a claim is bound to (empty unless Bound or Lost)."""
        return [self._gpus[n] for n in self.claim(key).elastic_gpus if n in self._gpus]

    # -- classes -----------------------------------------------------------------------------

    def add_class(self, cls: ElasticGPUClass) -> ElasticGPUClass:
        """Register a class (validated when it was built). The same class again is a no-op;
        a different one under a taken name is a ConflictError (classes do not change)."""
        if not isinstance(cls, ElasticGPUClass):
            raise ConfigError(f"expected an ElasticGPUClass, found {type(cls).__name__}")
        old = self._classes.get(cls.name)
        if old is not None and old != cls:
            raise ConflictError(
                f"ElasticGPUClass {cls.name} exists with other settings; "
                "classes do not change: delete it and create it again"
            )
        self._classes[cls.name] = cls
        return cls

    def delete_class(self, name: str) -> ElasticGPUClass:
        """Remove a class; ElasticGPUs it made and claims bound through it are not touched,
        and claims still pending on it stay pending."""
        cls = self.get_class(name)
        del self._classes[name]
        return cls

    # -- ElasticGPUs made by an operator -------------------------------------------------------

    def add_gpu(self, gpu: ElasticGPU) -> ElasticGPU:
        """A pre-provisioned ElasticGPU (a static PV): Available, holding its card at once.

        ConflictError when the card (or the share of it) is taken already, or the name is;
        NotFoundError for an unknown node or card; nothing changes then.
        """
        old = self._gpus.get(gpu.name)
        if old is not None:
            if old == gpu:
                return old
            raise ConflictError(f"ElasticGPU {gpu.name} exists already")
        if gpu.phase is not GpuPhase.AVAILABLE or gpu.claim_ref is not None:
            raise ConfigError(
                f"ElasticGPU {gpu.name}: phase={gpu.phase.value!r}: an operator "
                "creates ElasticGPUs Available and unbound; claims bind them"
            )
        if gpu.source is Source.REMOTE:
            if any(g.pool == gpu.pool and g.card == gpu.card for g in self._gpus.values()):
                raise ConflictError(
                    f"ElasticGPU {gpu.name}: GPU {gpu.card} of remote pool "
                    f"{gpu.pool} has an ElasticGPU already"
                )
            self._gpus[gpu.name] = gpu
            return gpu
        gpu = self._take_card(gpu, "static")
        self._gpus[gpu.name] = gpu
        return gpu

    def _take_card(self, gpu: ElasticGPU, owner: str) -> ElasticGPU:
        """Hold ``gpu``'s card, slice or MIG instance in the ClusterState; fills its model
        and UUID from the card when not given."""
        node = self.state.node(NodeName(gpu.node))
        card = next((g for g in node.gpus if g.index == gpu.card), None)
        if card is None:
            raise NotFoundError(f"ElasticGPU {gpu.name}: node {gpu.node} has no GPU {gpu.card}")
        if gpu.source is Source.MIG:
            share = GpuShare(gpu.card, 0, 0, gpu.mig_profile)
        elif gpu.source is Source.PHYSICAL:
            share = GpuShare(gpu.card, WHOLE_GPU_MILLI, card.memory_mib)
        else:
            share = GpuShare(gpu.card, gpu.capacity.gpu_milli, gpu.capacity.memory_mib)
        self._hold(gpu.name, owner, NodeName(gpu.node), share)
        return replace(gpu, model=gpu.model or card.model, uuid=gpu.uuid or card.uuid)

    def restore(self, gpus: Iterable[ElasticGPU], claims: Iterable[ElasticGPUClaim]) -> None:
        """Objects as a store kept them, taken back after a restart with no new decision:
        every ElasticGPU that is not Failed holds its card again, claims keep their phase and
        set. All or nothing: ConflictError (a card taken, a name known already, a bound claim
        whose ElasticGPUs do not name it back) and nothing changes."""
        gpus, claims = list(gpus), list(claims)
        by_name = {g.name: g for g in gpus}
        for c in claims:
            if c.key in self._claims:
                raise ConflictError(f"ElasticGPUClaim {c.key} exists already")
            if c.class_name and c.class_name not in self._classes:
                raise ConflictError(
                    f"ElasticGPUClaim {c.key}: ElasticGPUClass "
                    f"{c.class_name} is not known; add the classes first"
                )
            for n in c.elastic_gpus:
                g = by_name.get(n)
                if g is None or g.claim_ref is None or g.claim_ref.key != c.key:
                    raise ConflictError(
                        f"ElasticGPUClaim {c.key}: ElasticGPU {n} is missing "
                        "or bound to another claim"
                    )
        held: list[TaskId] = []
        kept: list[ElasticGPU] = []
        try:
            for g in gpus:
                if g.name in self._gpus:
                    raise ConflictError(f"ElasticGPU {g.name} exists already")
                if g.source is not Source.REMOTE and g.phase is not GpuPhase.FAILED:
                    owner = g.claim_ref.key if g.claim_ref is not None else "static"
                    g = self._take_card(g, owner)
                    held.append(task_of(g.name))
                kept.append(g)
        except Exception:
            for t in held:
                self.state.forget(t)
            raise
        for g in kept:
            self._gpus[g.name] = g
        for c in claims:
            self._claims[c.key] = c

    def delete_gpu(self, name: str) -> ElasticGPU:
        """An operator deletes an ElasticGPU that no claim holds; its capacity is freed."""
        g = self.gpu(name)
        if g.phase is GpuPhase.BOUND:
            raise ConflictError(
                f"ElasticGPU {name} is bound to claim "
                f"{g.claim_ref.key if g.claim_ref else '?'}; delete the claim "
                "first"
            )
        self._drop(g)
        return g

    def make_available(self, name: str) -> ElasticGPU:
        """A Released ElasticGPU (kept by Retain) made bindable again, as an operator clears a
        released PersistentVolume's claimRef."""
        g = self.gpu(name)
        if g.phase is not GpuPhase.RELEASED:
            raise ConflictError(
                f"ElasticGPU {name} is {g.phase.value}; only a Released one can be made Available"
            )
        g = replace(g, phase=GpuPhase.AVAILABLE, claim_ref=None, message="")
        self._gpus[name] = g
        return g

    # -- failures ------------------------------------------------------------------------------

    def node_removed(self, node: str) -> list[ElasticGPUClaim]:
        """A node left: its ElasticGPUs fail and the claims bound to them are Lost. Call it
        before or after ``ClusterState.remove_node``; either order holds."""
        return self._fail(
            [g for g in self._gpus.values() if g.node == node], f"node {node} left the cluster"
        )

    def card_failed(self, node: str, card: int) -> list[ElasticGPUClaim]:
        """A card became unhealthy: its ElasticGPUs fail, their claims are Lost."""
        return self._fail(
            [
                g
                for g in self._gpus.values()
                if g.node == node and g.card == card and g.source is not Source.REMOTE
            ],
            f"GPU {card} of node {node} failed",
        )

    def _fail(self, hit: list[ElasticGPU], why: str) -> list[ElasticGPUClaim]:
        lost: dict[str, ElasticGPUClaim] = {}
        for g in hit:
            task = task_of(g.name)
            if self.state.placement(task) is not None:
                self.state.forget(task)
            self._gpus[g.name] = replace(g, phase=GpuPhase.FAILED, message=why)
            if g.claim_ref is not None and g.claim_ref.key in self._claims:
                c = self._claims[g.claim_ref.key]
                if c.phase is ClaimPhase.BOUND:
                    lost[c.key] = self._put(replace(c, phase=ClaimPhase.LOST, message=why))
        return list(lost.values())

    # -- small helpers -------------------------------------------------------------------------

    def _hold(self, name: str, owner: str, node: NodeName, share: GpuShare) -> None:
        p = Placement(task_of(name), JobId(f"{TASK_PREFIX}{owner}"), node, 0, 0, (share,))
        self.state.assume(p)
        self.state.confirm(p.task)

    def _drop(self, g: ElasticGPU) -> None:
        task = task_of(g.name)
        if g.source is not Source.REMOTE and self.state.placement(task) is not None:
            self.state.forget(task)
        del self._gpus[g.name]

    def _put(self, c: ElasticGPUClaim) -> ElasticGPUClaim:
        self._claims[c.key] = c
        return c

    def __iter__(self) -> Iterator[ElasticGPUClaim]:
        return iter(self.claims())
