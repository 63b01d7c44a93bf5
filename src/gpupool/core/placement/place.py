"""Filter -> score -> card choice for one task, and all-or-nothing placement of a job."""

from __future__ import annotations

import numpy as np

from gpupool.core.affinity import PodMeta
from gpupool.core.model import Job, Placement, Task
from gpupool.core.placement.framework import Code, CycleState, Profile, Rows, Status
from gpupool.core.placement.rejections import Rejections
from gpupool.core.reasons import Step, step
from gpupool.core.snapshot import Snapshot


def feasible(task: Task, snap: Snapshot, profile: Profile) -> tuple[Rows, Status]:
    """Rows that pass every filter; when none does, a Status saying why with counts."""
    t = snap.table
    cs = CycleState(t, snap.cache, pods=snap.pods, load=snap.load)
    rows = t.live()
    seen = Rejections(int(rows.size))
    for f, neutral in profile.filter_checks:
        if rows.size == 0:
            break
        if neutral is None or not neutral(cs, task):
            rows = seen.keep(f, rows, f.filter(cs, task, rows))
    rows = seen.hold(task, snap, rows)
    if rows.size:
        return rows, Status.ok()
    return rows, seen.status(task)


def place_task(task: Task, snap: Snapshot, profile: Profile) -> tuple[Placement | None, Status]:
    """The best node and cards for ``task`` in ``snap``; the snapshot is not changed.

    Ties on the weighted score go to the lowest ``rank`` (the table's tie order).
    """
    rows, status = feasible(task, snap, profile)
    if not rows.size:
        return None, status
    t = snap.table
    cs = CycleState(t, snap.cache, pods=snap.pods, load=snap.load)
    if profile.scores and rows.size > 1:
        total, _ = weighted_scores(cs, task, rows, profile)
        rows = rows[total == total.max()]
    row = int(rows[np.argmin(t.rank[rows])]) if rows.size > 1 else int(rows[0])
    shares = profile.cards.choose_cards(cs, task, row)
    if shares is None:
        return None, Status(
            Code.ERROR,
            (
                step(
                    Step.CARDS,
                    f"card choice {profile.cards.name!r} found no cards on "
                    f"{t.nodes[row].name} although its filters passed",
                ),
            ),
        )
    shares = t.shaped(row, shares)  # slices take the shape each card's division rule gives
    return Placement(
        task=task.id,
        job=task.job,
        node=t.nodes[row].name,
        cpu_milli=task.cpu_milli,
        memory_mib=task.memory_mib,
        shares=shares,
        pod=_counted(task),
    ), Status.ok()


def weighted_scores(
    cs: CycleState, task: Task, rows: Rows, profile: Profile, scale: bool = False
) -> tuple[np.ndarray, float]:
    """The profile's weighted score sum per row (each plugin scores 0..100, times its
    weight; a plugin neutral for the task is not called), and with ``scale`` the sum of the
    weights of the plugins that scored some row above 0: the scale of the sum, where a plugin
    with nothing to say everywhere does not shrink it (0.0 without ``scale``: placement needs
    only the order)."""
    total = np.zeros(rows.size, np.float64)
    weights = 0.0
    for plugin, weight, neutral in profile.score_checks:
        if neutral is not None and neutral(cs, task):
            continue  # 0 on every row: adds nothing to any sum, nor to the scale
        score = plugin.score(cs, task, rows)
        total += weight * score
        if scale and np.any(score):
            weights += weight
    return total, weights


def normalized_scores(task: Task, snap: Snapshot, profile: Profile, rows: Rows) -> np.ndarray:
    """``weighted_scores`` scaled back to 0..100 per row: what a node scores for ``task`` in
    the profile, as an outside scheduler (kube-scheduler's extender prioritize) is told."""
    cs = CycleState(snap.table, snap.cache, pods=snap.pods)
    total, weights = weighted_scores(cs, task, rows, profile, scale=True)
    return total / (weights or 1.0)


def _counted(task: Task) -> PodMeta | None:
    """The task's pod as other pods' rules count it; None for a task outside any namespace
    and without labels (a simulated job, not a Kubernetes pod): no rule can name it, and the
    pod index stays empty where no pod rules are used."""
    pod = task.pod_set.pod
    return pod if pod.namespace or pod.labels or pod.anti_affinity else None


def place_job(job: Job, snap: Snapshot, profile: Profile) -> tuple[list[Placement], Status]:
    """Places a job's tasks whole or not at all.

    Tasks are tried one by one inside a trial, so each sees those before it; the trial is
    always undone, and the caller assumes the whole list. An empty list means the gang did not
    fit and holds nothing. Tasks beyond ``min_member`` are placed when they fit.
    """
    placements: list[Placement] = []
    need = job.gang_size
    with snap.trial():
        for task in job.tasks():
            p, status = place_task(task, snap, profile)
            if p is None:
                if len(placements) >= need:
                    continue
                if job.task_count == 1:
                    return [], status
                return [], Status(
                    status.code,
                    tuple(
                        r.within(f"gang {job.id}: {len(placements)}/{need} tasks fit; {task.id}")
                        for r in status.reasons
                    ),
                )
            snap.assume(p)
            placements.append(p)
    return placements, Status.ok()
