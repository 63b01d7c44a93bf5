"""Could a job ever run under one of its queue's flavors? The question a submission is
answered with 422 for when the answer is no for every flavor (design 3.2: a request that can
never run is rejected at submission, never left pending).

``Validator.check`` asks whether *some* node of the cluster could hold each pod set; a queue
admits a job only under one of its flavors, whose nodes are chosen by the flavor's labels
(``admission.flavor_job``), so a MIG request in a queue whose flavors have no MIG cards, or a
model no flavor of the queue has, passes that check and then waits forever. This asks the same
question of each flavor's nodes, empty. A flavor with no node in the cluster now (a pool the
cloud makes from zero) cannot be judged from the nodes and counts as possible.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpupool.core.admission import QuotaTree, flavor_job, request_demand
from gpupool.core.errors import InvalidJobError
from gpupool.core.model import Job
from gpupool.core.quota import ResourceFlavor
from gpupool.core.table import NodeTable
from gpupool.core.validation import _never_fits


def _has_nodes(flavor: ResourceFlavor, table: NodeTable) -> bool:
    return any(
        all(table.nodes[i].labels.get(k) == v for k, v in flavor.node_labels.items())
        for i in table.live().tolist()
    )


def flavor_problem(job: Job, flavor: ResourceFlavor | None, table: NodeTable) -> str | None:
    """Why no empty node of ``flavor`` could hold one replica of some pod set of ``job``
    (a sentence naming the pod set and its field), or None when one could or cannot be
    judged (no flavor, a flavor without labels, or without nodes now)."""
    if flavor is None or not flavor.node_labels or not _has_nodes(flavor, table):
        return None
    restricted = flavor_job(job, flavor)
    if restricted is None:
        return "the job's node selector contradicts the flavor's node labels " + ", ".join(
            f"{k}={v}" for k, v in sorted(flavor.node_labels.items())
        )
    for i, ps in enumerate(restricted.pod_sets):
        problem = _never_fits(ps, table)
        if problem is not None:
            field, value, rule = problem.split("\x00")
            if field == "node_selector":
                rule = "no node of the flavor has the job's node selector labels"
            elif field == "gpu":
                rule = f"no node of the flavor offers {value}"
            else:
                rule = f"{field}={value}: {rule}"
            return f"pod set {i} ({job.pod_sets[i].name}): {rule}"
    return None


def never_runs(
    job: Job, flavors: Sequence[ResourceFlavor | None], table: NodeTable
) -> list[tuple[str, str]] | None:
    """None when some flavor could hold the job (or ``flavors`` is empty); else, per flavor,
    ``(flavor name, why not)``."""
    reasons = []
    for flavor in flavors:
        why = flavor_problem(job, flavor, table)
        if why is None:
            return None
        reasons.append((flavor.name if flavor else "", why))
    return reasons or None


def never_admitted(
    job: Job, cq: str, idle: QuotaTree, table: NodeTable, *, nodes: bool = True
) -> InvalidJobError | None:
    """Why no flavor of ClusterQueue ``cq`` could ever admit ``job`` (None when one could):
    its quota, with every other queue idle and all it may borrow (``idle``: a QuotaTree with
    nothing charged), is too small, or (with ``nodes``) the flavor's nodes, empty, could not
    hold it (``flavor_problem``). Every mode refuses such a job at submission."""
    reasons = []
    for fq in idle.queues[cq].flavors or ():
        short = idle.shortfall(cq, request_demand(job, fq.flavor))
        why = flavor_problem(job, idle.flavors.get(fq.flavor), table) if nodes else None
        if not short and why is None:
            return None
        reasons.append(f"flavor {fq.flavor}: " + "; ".join([*short, *([why] if why else [])]))
    if not reasons:
        return None
    return InvalidJobError(
        "pod_sets",
        "(the whole job)",
        f"can never be admitted by ClusterQueue {cq}, even with every other "
        f"queue idle: {' | '.join(reasons)}",
        job=job.id,
    )
