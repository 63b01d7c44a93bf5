"""Why a job waits, as data: one ``Reason`` per clause, rendered to the one sentence users read
only at the edge (``sentence``).

The core's filters, admission and feasibility say *who* holds a job back (``plugin``: a filter's
registry name, or one of the core's own steps below), *how many nodes* it ruled out where the
clause is about nodes, and the clause itself in the user's units (``core.said``). Adapters
count reasons by plugin (metrics), keep only the flavors a job may use (``control.reasons``)
or sort them into kinds (``sim.replay_reasons``) from these fields, never by reading the
sentence back.

The sentence is kube-scheduler's FitError shape, one clause per attempt, joined by ``; ``:
``a100: 0/12 nodes fit: 8 no GPU with 50% of a card and 20Gi free, 4 cordoned or not ready;
queue team-a at quota for h100 GPUs (6/6 GPUs)``. Node reasons of one attempt (same ``scope``
and ``of``) form one clause, the most nodes first.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum


class Step(StrEnum):
    """The core's own steps that hold a job back, as ``Reason.plugin`` names them beside the
    filters' registry names (``gpu-fit``, ``node-selector``, ...)."""

    NO_NODES = "no-nodes"
    """No node is live at all: ``0/0 nodes fit``."""
    CARDS = "cards"
    """The card choice found no cards although the filters passed."""
    HOLD = "hold"
    """Nodes, or the queue, held for a waiting large gang (backfill)."""
    QUOTA = "quota"
    FLAVOR = "flavor"
    """The job's node selector contradicts a flavor's node labels."""
    PREEMPTION = "preemption"
    """Victims are being evicted for the job."""
    EVICTION = "eviction"
    """The job was evicted and waits to be admitted again."""
    ADMISSION_CHECK = "admission-check"
    """A queued-provisioning admission check (its ProvisioningRequest's state)."""


@dataclass(frozen=True, slots=True)
class Reason:
    """One clause of why a job waits."""

    plugin: str
    """Who says it: a filter's registry name or a ``Step``; metrics are labelled by it."""
    message: str
    """The clause in the user's units, without its node count (``no GPU with 50% of a card
    and 20Gi free``, ``queue a at quota (6/6 GPUs)``)."""
    nodes: int = 0
    """Nodes this plugin ruled out (the first failing filter of each node)."""
    of: int | None = None
    """Nodes considered (the N of ``0/N nodes fit``); None for a clause not about nodes."""
    scope: tuple[str, ...] = ()
    """What the clause is about, outermost first, said before it: the flavor tried (``a100``,
    ``a100 as small``), the gang and its failing task."""
    flavor: str | None = None
    """The flavor whose attempt this clause explains; None when it is about none."""
    resolvable: bool = True
    """Whether freeing capacity (completions, preemption) could remove it."""
    gpu: str = ""
    """For a filter's clause, the kind of GPU request the rejected task made (``GpuKind``'s
    value: ``whole``, ``slice``, ``mig``; "" for none): what a short ``gpu-fit`` lacked."""

    @property
    def is_nodes(self) -> bool:
        return self.of is not None

    def within(self, *scope: str, flavor: str | None = None) -> Reason:
        """The same clause, said of ``scope`` (put before the existing one)."""
        return replace(
            self, scope=(*scope, *self.scope), flavor=self.flavor if flavor is None else flavor
        )


def step(kind: Step, message: str, *, flavor: str | None = None, resolvable: bool = True) -> Reason:
    """A clause from one of the core's own steps (not about nodes)."""
    return Reason(str(kind), message, flavor=flavor, resolvable=resolvable)


def nodes_fit(total: int, rejected: Iterable[Reason]) -> tuple[Reason, ...]:
    """The clauses of one ``0/total nodes fit`` answer: each filter's count, most nodes first
    (a stable order among equal counts); one empty clause when no filter rejected a node
    (no node was live)."""
    parts = sorted((replace(r, of=total) for r in rejected), key=lambda r: -r.nodes)
    return tuple(parts) or (Reason(str(Step.NO_NODES), "", 0, total),)


def plugins(reasons: Iterable[Reason]) -> list[str]:
    """Who holds the job back, each once, in the order they are said."""
    return list(dict.fromkeys(r.plugin for r in reasons))


def sentence(reasons: Sequence[Reason]) -> str:
    """The one sentence users read: clauses joined by ``; ``; node reasons of one attempt
    (same scope and node total, next to each other) as one ``0/N nodes fit: ...`` clause."""
    clauses: list[str] = []
    i = 0
    while i < len(reasons):
        r = reasons[i]
        prefix = "".join(f"{s}: " for s in r.scope)
        if r.of is None:
            clauses.append(prefix + r.message)
            i += 1
            continue
        j = i
        while j < len(reasons) and reasons[j].of == r.of and reasons[j].scope == r.scope:
            j += 1
        parts = ", ".join(f"{x.nodes} {x.message}" for x in reasons[i:j] if x.message)
        clauses.append(f"{prefix}0/{r.of} nodes fit" + (f": {parts}" if parts else ""))
        i = j
    return "; ".join(clauses)
