"""Which nodes a Provisioned ProvisioningRequest holds: its booking, in gpupool's view.

cluster-autoscaler never labels nodes per request. With ``best-effort-atomic-scale-up`` it
sets ``Provisioned=True`` as soon as the scale-up is *requested* (reason
``CapacityIsProvisioned``; ``CapacityIsFound`` when the pods fit the nodes already there),
and the new nodes then register with the labels and taints of their node group, nothing
else. ``check-capacity`` only finds room among the nodes there. Classes that do label their
nodes per request (GKE's ``queued-provisioning.gke.io``) say so in
``status.provisioningClassDetails``, and Kueue's ``podSetUpdates.nodeSelector`` turns a
detail into a node selector. So the nodes of a request are found, in this order:

1. nodes that carry ``gpupool.io/provisioning-request=<namespace>.<name>`` (a node pool or
   gpupool's simulated cloud that labels them so);
2. with the ProvisioningRequestConfig's ``node_selector_details`` and the details present:
   every node whose labels match ``{key: details[detail]}``, now and as they join;
3. otherwise the **booking**: nodes the request's pod sets may use (their node selector, the
   flavor's labels, and their tolerations of the node's NoSchedule/NoExecute taints),
   schedulable, holding no pod gpupool placed and not held by another request, newest first
   (those registered after the request was made are the ones the autoscaler made for it), as
   many as the pods need by their CPU, memory and GPUs; nodes that register later are taken
   while the request is short, until its job starts.

The core is told the request is Provisioned once its nodes hold all its pods (its booking
runs from then); until then the autoscaler's ``BookingExpired`` (10 minutes after its own
``Provisioned``, whatever happened) is not taken for an expiry.

Kueue's podSetUpdates pin the pods with a node selector; gpupool does the same in its own
view: a node of a request carries, in the core only (never written to the Node object), the
label and NoSchedule taint ``gpupool.io/provisioning-request`` naming it, so the core places
the request's job there and nothing else (``ProvisioningRequest.pinned``). The booking ends
when the request is deleted or ends (Failed, BookingExpired, CapacityRevoked); the node is
then the pool's again.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace

from gpupool.core.model import GpuKind, Node, PodSet, Taint, TaintEffect
from gpupool.core.provisioning import REQUEST_LABEL

__all__ = ["NodeBook", "enough", "fits", "matching", "pick", "pods_per_node"]

_HARD = (TaintEffect.NO_SCHEDULE, TaintEffect.NO_EXECUTE)


def fits(ps: PodSet, node: Node) -> bool:
    """The pod set may run on the node: its selector (the flavor's labels among them) and
    tolerations of every NoSchedule/NoExecute taint; the node is schedulable."""
    if not node.schedulable:
        return False
    if any(node.labels.get(k) != v for k, v in ps.node_selector.items() if k != REQUEST_LABEL):
        return False
    return all(
        any(t.tolerates(taint) for t in ps.tolerations)
        for taint in node.taints
        if taint.effect in _HARD and taint.key != REQUEST_LABEL
    )


def pods_per_node(ps: PodSet, node: Node) -> int:
    """How many of the pod set's pods an empty node holds, by GPUs, CPU and memory."""
    g = ps.gpu
    cards = [c for c in node.gpus if c.healthy]
    if g.kind is GpuKind.WHOLE:
        by_gpu = len(cards) // g.count
    elif g.kind is GpuKind.SLICE:
        by_gpu = sum(
            min(
                1000 // g.gpu_milli if g.gpu_milli else 10**9,
                c.memory_mib // g.memory_mib if g.memory_mib else 10**9,
            )
            for c in cards
        )
    elif g.kind is GpuKind.MIG:
        by_gpu = sum(m.count for c in cards for m in c.mig if m.profile == g.mig_profile)
    else:
        by_gpu = 10**9
    by_cpu = node.cpu_milli // ps.cpu_milli if ps.cpu_milli else 10**9
    by_mem = node.memory_mib // ps.memory_mib if ps.memory_mib else 10**9
    return max(0, min(by_gpu, by_cpu, by_mem))


def enough(pod_sets: Sequence[PodSet], nodes: Iterable[Node]) -> bool:
    """Whether ``nodes``, empty, hold every pod of ``pod_sets`` (a node serves the first pod
    set it fits that still has pods to place)."""
    left = [ps.count for ps in pod_sets]
    for node in nodes:
        for i, ps in enumerate(pod_sets):
            if left[i] and fits(ps, node):
                left[i] -= min(left[i], pods_per_node(ps, node))
                break
    return not any(left)


class NodeBook:
    """Node -> the request holding it, and each request's label value (``node_label``)."""

    def __init__(self) -> None:
        self.holder: dict[str, str] = {}  # node name -> request key
        self.label: dict[str, str] = {}  # request key -> REQUEST_LABEL's value
        self.short: set[str] = set()  # booked requests that still take nodes as they join
        # Provisioned by the autoscaler, not yet told to the core: its nodes still register
        self.arriving: set[str] = set()
        self.selector: dict[str, dict[str, str]] = {}  # request key -> details selector
        # BookingExpired came while the nodes still registered: the autoscaler's clock, not
        # an end of the booking, on this and every later event of the request
        self.late_expiry: set[str] = set()

    def nodes(self, key: str) -> list[str]:
        return sorted(n for n, k in self.holder.items() if k == key)

    def hold(self, key: str, label: str, names: Iterable[str]) -> list[str]:
        """``names`` held by ``key`` (those free of another request); the ones newly held."""
        self.label[key] = label
        new = []
        for n in names:
            if n not in self.holder:
                self.holder[n] = key
                new.append(n)
        return new

    def release(self, key: str) -> list[str]:
        """The request's booking ends: its nodes, now free."""
        names = self.nodes(key)
        for n in names:
            del self.holder[n]
        self.label.pop(key, None)
        self.short.discard(key)
        self.arriving.discard(key)
        self.selector.pop(key, None)
        self.late_expiry.discard(key)
        return names

    def mark(self, node: Node) -> Node:
        """The node as the core sees it: with the label and taint of the request holding
        it, if one does."""
        key = self.holder.get(node.name)
        value = self.label.get(key) if key is not None else None
        if value is None or node.labels.get(REQUEST_LABEL) == value:
            return node
        return replace(
            node,
            labels={**node.labels, REQUEST_LABEL: value},
            taints=(*node.taints, Taint(REQUEST_LABEL, value)),
        )

    def wants(self, key: str, node: Node, pod_sets: Sequence[PodSet]) -> bool:
        """Whether request ``key``, still taking nodes, takes ``node`` (free, empty)."""
        sel = self.selector.get(key)
        if sel is not None:
            return all(node.labels.get(k) == v for k, v in sel.items())
        return key in self.short and any(fits(ps, node) for ps in pod_sets)


def pick(
    pod_sets: Sequence[PodSet], candidates: Sequence[Node], held: Sequence[Node] = ()
) -> tuple[list[Node], bool]:
    """Nodes from ``candidates`` (in their order) until, with ``held``, they hold every pod;
    and whether they do."""
    chosen: list[Node] = []
    for node in candidates:
        if enough(pod_sets, [*held, *chosen]):
            break
        if any(fits(ps, node) and pods_per_node(ps, node) for ps in pod_sets):
            chosen.append(node)
    return chosen, enough(pod_sets, [*held, *chosen])


def matching(selector: Mapping[str, str], nodes: Iterable[Node]) -> list[Node]:
    return [n for n in nodes if all(n.labels.get(k) == v for k, v in selector.items())]
