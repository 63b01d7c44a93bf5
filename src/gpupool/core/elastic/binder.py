"""The binder: claims bound to existing ElasticGPUs or to ones made for them, exactly once.

As Kubernetes binds PersistentVolumeClaims:

1. a claim names its class (or none: then the first class, by name, that can serve it). A
   claim no class can serve, a TFLOPS figure for a model without a published peak, or a
   request the cluster can never hold is rejected at ``submit`` with InvalidJobError naming
   the field, the value and the rule, and nothing is stored;
2. an ``Immediate`` claim is bound at once when it can be; a ``WaitForFirstConsumer`` one when
   the adapter reports the node its first pod was placed on (``consume``). A claim that
   cannot be bound yet stays Pending with the reason, and ``reconcile`` tries again;
3. binding first looks for Available ElasticGPUs of the class that satisfy the claim (the
   smallest that does), then provisions new ones through the class. Cards, slices and MIG
   instances are placed by the core's placement (``place_task`` on the ClusterState's
   snapshot, with a task built from the claim) and held in the ClusterState as placements of
   their own, so no card is ever over-committed, by claims or by jobs. A MIG claim takes the
   smallest profile that holds it and has a free instance; a TFLOPS claim is converted per
   model (``tflops.convert``), the least powerful model that serves it with the fewest cards
   first, and ``serving_models`` on the claim says which models can serve it and how;
4. a bound claim is never bound again: ``submit`` of the same claim is a no-op, and a claim
   binds to one set of ElasticGPUs (all on one node, or in one remote pool);
5. when a claim is deleted its ElasticGPUs follow their reclaim policy: ``Delete`` removes
   them and frees their capacity; ``Retain`` keeps them Released, still holding it, until an
   operator deletes them (``delete_gpu``) or makes them Available again (``make_available``).

A pod that consumes a bound claim runs on the claim's node and asks the scheduler for no GPU
of its own: the cards are held by the ElasticGPUs (the webhook writes their devices into the
container). ElasticGPUs are not charged to any ClusterQueue's quota.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from gpupool.core.cluster import ClusterState
from gpupool.core.elastic import making
from gpupool.core.elastic.classes import ElasticGPUClass
from gpupool.core.elastic.held import HeldObjects
from gpupool.core.elastic.objects import (
    BindingMode,
    ClaimPhase,
    ClaimRef,
    ElasticGPU,
    ElasticGPUClaim,
    GpuPhase,
    Provisioner,
    ReclaimPolicy,
    ServingModel,
    Source,
)
from gpupool.core.elastic.resolution import (
    GPU_TOLERATION,
    TASK_PREFIX,
    Option,
    Resolver,
    task_of,
)
from gpupool.core.errors import ConflictError, InvalidJobError
from gpupool.core.model import JobId, NodeName, PodSet, Task, TaskId
from gpupool.core.placement.framework import Profile
from gpupool.core.placement.place import place_task
from gpupool.core.placement.registry import default_profile


@dataclass(frozen=True, slots=True)
class Release:
    """What deleting a claim did to its ElasticGPUs."""

    claim: str
    deleted: tuple[str, ...]  # reclaimPolicy Delete: gone, capacity freed
    retained: tuple[str, ...]  # reclaimPolicy Retain: Released (or Failed), capacity held


class Binder(HeldObjects):
    """Binds claims, holding the three kinds of objects (``HeldObjects``: views, classes,
    ElasticGPUs made by operators, restore, failures); the ClusterState is shared with the
    scheduler, so ElasticGPUs and jobs see each other's cards taken."""

    def __init__(
        self,
        state: ClusterState,
        profile: Profile | None = None,
        classes: Iterable[ElasticGPUClass] = (),
    ) -> None:
        super().__init__(state)
        self.profile = profile or default_profile()
        self._resolver = Resolver(state, self._classes)
        for c in classes:
            self.add_class(c)

    # -- claims --------------------------------------------------------------------------------

    def submit(self, claim: ElasticGPUClaim) -> ElasticGPUClaim:
        """Accept a claim and, in Immediate mode, bind it when it can be bound now.

        The same claim (same key, requests and class) again returns it as it stands, bound
        once. A different claim under a taken key is a ConflictError. InvalidJobError when no
        class can ever serve it; nothing is stored then. Status fields given are ignored.
        """
        old = self._claims.get(claim.key)
        if old is not None:
            if old.requests == claim.requests and claim.class_name in ("", old.class_name):
                return old
            raise ConflictError(
                f"ElasticGPUClaim {claim.key} exists with other requests; "
                "claims do not change: delete it and create it again"
            )
        cls, options = self._resolver.resolve(claim)
        serving = tuple(o.serving for o in options if o.serving is not None)
        c = ElasticGPUClaim(
            name=claim.name,
            namespace=claim.namespace,
            requests=claim.requests,
            class_name=cls.name,
            serving_models=_unique_serving(serving),
        )
        self._claims[c.key] = c
        if cls.binding_mode is BindingMode.WAIT_FOR_FIRST_CONSUMER:
            return self._put(
                replace(
                    c, message="waiting for its first consumer (bindingMode WaitForFirstConsumer)"
                )
            )
        return self._bind(c, cls, None)

    def reconcile(self) -> list[ElasticGPUClaim]:
        """Try every pending Immediate claim again (capacity may have been freed or added),
        in the order they were submitted; returns those bound now."""
        bound = []
        for c in list(self._claims.values()):
            if c.phase is not ClaimPhase.PENDING:
                continue
            cls = self._classes.get(c.class_name)
            if cls is None:
                self._put(replace(c, message=f"ElasticGPUClass {c.class_name} was deleted"))
                continue
            if cls.binding_mode is not BindingMode.IMMEDIATE:
                continue
            c = self._bind(c, cls, None)
            if c.phase is ClaimPhase.BOUND:
                bound.append(c)
        return bound

    def consume(self, key: str, node: str) -> ElasticGPUClaim:
        """The first pod consuming a claim was placed on ``node``: a WaitForFirstConsumer claim
        is bound there (cards, slices and MIG instances of that node; a remote pool serves any
        node). A claim bound already is returned as it is: the pod must run on its node."""
        c = self.claim(key)
        if c.phase is not ClaimPhase.PENDING:
            return c
        cls = self._classes.get(c.class_name)
        if cls is None:
            return self._put(replace(c, message=f"ElasticGPUClass {c.class_name} was deleted"))
        self.state.node(NodeName(node))  # NotFoundError for an unknown node
        return self._bind(c, cls, node)

    def delete_claim(self, key: str) -> Release:
        """Delete a claim; its ElasticGPUs follow their reclaim policy (see the module
        docstring). Deleting a pending claim deletes only the claim."""
        c = self.claim(key)
        del self._claims[key]
        deleted: list[str] = []
        retained: list[str] = []
        for name in c.elastic_gpus:
            g = self._gpus.get(name)
            if g is None:
                continue
            if g.reclaim_policy is ReclaimPolicy.DELETE:
                self._drop(g)
                deleted.append(name)
                continue
            if g.phase is not GpuPhase.FAILED:
                self._gpus[name] = replace(
                    g,
                    phase=GpuPhase.RELEASED,
                    message=f"claim {key} was deleted; kept by reclaimPolicy Retain",
                )
            retained.append(name)
        return Release(key, tuple(deleted), tuple(retained))

    # -- binding -----------------------------------------------------------------------------

    def _bind(self, c: ElasticGPUClaim, cls: ElasticGPUClass, node: str | None) -> ElasticGPUClaim:
        try:
            options, problem = self._resolver.options(c, cls)
        except InvalidJobError as exc:  # pragma: no cover - options never raise
            problem, options = (exc.field, exc.value, exc.rule), []
        if problem is not None:
            return self._put(
                replace(
                    c, message=f"cannot be served now: {problem[0]}={problem[1]!r}: {problem[2]}"
                )
            )
        for o in options:
            found = self._match(cls, o, node)
            if found:
                return self._attach(c, found)
        why = ""
        for o in options:
            made, why = self._provision(c, cls, o, node)
            if made:
                return self._attach(c, made)
        return self._put(replace(c, message=why or "no capacity for it now"))

    def _attach(self, c: ElasticGPUClaim, gpus: list[ElasticGPU]) -> ElasticGPUClaim:
        ref = ClaimRef(c.namespace, c.name)
        for g in gpus:
            assert g.phase is GpuPhase.AVAILABLE or g.claim_ref == ref, g
            self._gpus[g.name] = replace(g, phase=GpuPhase.BOUND, claim_ref=ref, message="")
        node = gpus[0].node
        return self._put(
            replace(
                c,
                phase=ClaimPhase.BOUND,
                elastic_gpus=tuple(g.name for g in gpus),
                node=node,
                message="",
            )
        )

    def _match(self, cls: ElasticGPUClass, o: Option, node: str | None) -> list[ElasticGPU]:
        """Available ElasticGPUs of the class that serve the option: the smallest that does."""
        req = o.request
        free = [
            g
            for g in self._gpus.values()
            if g.phase is GpuPhase.AVAILABLE
            and g.class_name == cls.name
            and g.source is cls.source
            and (not req.models or g.model in req.models)
            and (node is None or g.source is Source.REMOTE or g.node == node)
        ]
        if not free:
            return []
        if cls.source is Source.REMOTE:
            free.sort(key=lambda g: (g.pool, g.card, g.name))
            return free[: o.remote_cards] if len(free) >= o.remote_cards else []
        if cls.source is Source.PHYSICAL:
            by_node: dict[str, list[ElasticGPU]] = {}
            for g in free:
                if g.capacity.memory_mib >= req.memory_mib:
                    by_node.setdefault(g.node, []).append(g)
            for n in sorted(by_node):
                cards = sorted(by_node[n], key=lambda g: (g.card, g.name))
                if len(cards) >= req.count:
                    return cards[: req.count]
            return []
        if cls.source is Source.MIG:
            same = sorted(
                (g for g in free if g.mig_profile == req.mig_profile), key=lambda g: g.name
            )
            return same[:1]
        fits = [
            g
            for g in free
            if g.capacity.gpu_milli >= req.gpu_milli and g.capacity.memory_mib >= req.memory_mib
        ]
        fits.sort(key=lambda g: (g.capacity.gpu_milli, g.capacity.memory_mib, g.name))
        return fits[:1]

    def _provision(
        self, c: ElasticGPUClaim, cls: ElasticGPUClass, o: Option, node: str | None
    ) -> tuple[list[ElasticGPU], str]:
        if cls.provisioner is Provisioner.REMOTE:
            return self._provision_remote(c, cls, o)
        task = Task(
            TaskId(f"{TASK_PREFIX}{c.key}"),
            JobId(f"{TASK_PREFIX}{c.key}"),
            PodSet("claim", 1, 0, 0, gpu=o.request, tolerations=(GPU_TOLERATION,)),
        )
        snap = self.state.snapshot()
        if node is None:
            p, status = place_task(task, snap, self.profile)
            why = status.message
        else:
            p, why = making.place_on(task, snap, NodeName(node), self.profile)
        if p is None:
            return [], why
        names = self._names(c, len(p.shares))
        made = making.on_cards(p, names, cls, self.state.table)
        held: list[TaskId] = []
        try:
            for g, share in zip(made, p.shares, strict=True):
                self._hold(g.name, c.key, p.node, share)
                held.append(task_of(g.name))
        except Exception:
            for t in held:
                self.state.forget(t)
            raise
        for g in made:
            self._gpus[g.name] = g
        return made, ""

    def _provision_remote(
        self, c: ElasticGPUClaim, cls: ElasticGPUClass, o: Option
    ) -> tuple[list[ElasticGPU], str]:
        taken = {
            g.card
            for g in self._gpus.values()
            if g.source is Source.REMOTE and g.pool == cls.parameters["pool"]
        }
        made, why = making.remote(cls, o, taken, lambda n: self._names(c, n))
        for g in made:
            self._gpus[g.name] = g
        return made, why

    # -- small helpers -------------------------------------------------------------------------

    def _names(self, c: ElasticGPUClaim, n: int) -> list[str]:
        """``egpu.<namespace>.<claim>.<i>``; a name still taken (a retained ElasticGPU of a
        former claim of that key) gets ``.r<k>`` with the first free k."""
        base = f"egpu.{c.namespace}.{c.name}"
        k = 0
        while True:
            suffix = f".r{k}" if k else ""
            names = [f"{base}.{i}{suffix}" for i in range(n)]
            if not any(x in self._gpus for x in names):
                return names
            k += 1


def _unique_serving(items: tuple[ServingModel, ...]) -> tuple[ServingModel, ...]:
    seen: dict[str, ServingModel] = {}
    for s in items:
        seen.setdefault(s.model, s)
    return tuple(seen.values())
