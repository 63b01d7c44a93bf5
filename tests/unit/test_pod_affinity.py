"""Required pod affinity, anti-affinity and topology spread in the core: each operator and
rule, pods of one gang counting each other, held placements counted across cycles."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from gpupool.core import ClusterState, Code, InvalidJobError, default_profile, place_job
from gpupool.core.affinity import (
    LabelSelector,
    NodeAffinityTerm,
    NodeRequirement,
    PodAffinityTerm,
    PodMeta,
    SpreadConstraint,
)
from gpupool.core.model import Job, JobId, NodeName, Task
from gpupool.core.placement.place import feasible
from gpupool.core.podindex import PodIndex
from tests.builders import job, node

ZONES = {"a": "z1", "b": "z1", "c": "z2", "d": "z2"}


def cluster(extra: dict[str, dict[str, str]] | None = None) -> ClusterState:
    nodes = [node(n, labels={"zone": z, "kubernetes.io/hostname": n}) for n, z in ZONES.items()]
    nodes += [node(n, labels=lab) for n, lab in (extra or {}).items()]
    return ClusterState(nodes)


def sel(**labels: str) -> LabelSelector:
    return LabelSelector(tuple(sorted(labels.items())))


def term(
    key: str = "zone", ns: frozenset[str] | None = frozenset({"default"}), **labels: str
) -> PodAffinityTerm:
    return PodAffinityTerm(key, sel(**labels), ns)


def gang(
    tasks: int = 1, ns: str = "default", labels: dict[str, str] | None = None, **fields: Any
) -> Job:
    base = job("x", tasks=tasks)
    ps = replace(
        base.pod_sets[0], pod=PodMeta(ns, dict(labels or {}), fields.pop("anti_meta", ())), **fields
    )
    return replace(base, pod_sets=(ps,))


def first(j: Job) -> Task:
    return next(j.tasks())


def fits(state: ClusterState, task: Task) -> set[str]:
    snap = state.snapshot()
    rows, _ = feasible(task, snap, default_profile())
    return {snap.table.nodes[r].name for r in rows.tolist()}


def put(
    state: ClusterState,
    key: str,
    where: str,
    ns: str = "default",
    anti: tuple[PodAffinityTerm, ...] = (),
    **labels: str,
) -> None:
    state.set_pod(key, NodeName(where), PodMeta(ns, labels, anti))


# -- label selectors ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("selector", "matched"),
    [
        (LabelSelector(), {"p", "q", "r"}),  # empty selector: every pod
        (sel(app="web"), {"p", "q"}),
        (sel(app="web", tier="front"), {"p"}),
        (LabelSelector((), (NodeRequirement("tier", "In", ("front", "x")),)), {"p"}),
        (LabelSelector((), (NodeRequirement("tier", "NotIn", ("front",)),)), {"q", "r"}),
        (LabelSelector((), (NodeRequirement("tier", "Exists"),)), {"p", "q"}),
        (LabelSelector((), (NodeRequirement("tier", "DoesNotExist"),)), {"r"}),
        (LabelSelector((("app", "web"),), (NodeRequirement("tier", "NotIn", ("front",)),)), {"q"}),
    ],
)
def test_selector_operators(selector: LabelSelector, matched: set[str]) -> None:
    pods = {
        "p": {"app": "web", "tier": "front"},
        "q": {"app": "web", "tier": "back"},
        "r": {"app": "db"},
    }
    assert {k for k, lab in pods.items() if selector.matches(lab)} == matched


def test_selector_refuses_node_only_operators() -> None:
    with pytest.raises(InvalidJobError, match="Gt"):
        LabelSelector((), (NodeRequirement("n", "Gt", ("1",)),))


def test_no_selector_matches_no_pod() -> None:
    assert not PodAffinityTerm("zone", None, None).matches("default", {"app": "web"})


@pytest.mark.parametrize(
    ("field", "make"),
    [
        ("topologyKey", lambda: PodAffinityTerm("", sel(), None)),
        ("maxSkew", lambda: SpreadConstraint(0, "zone", sel())),
        ("minDomains", lambda: SpreadConstraint(1, "zone", sel(), min_domains=0)),
    ],
)
def test_bad_rules_name_the_field(field: str, make: Any) -> None:
    with pytest.raises(InvalidJobError) as exc:
        make()
    assert field in exc.value.field


# -- pod affinity ------------------------------------------------------------------------


def test_affinity_keeps_the_domain_of_a_matching_pod() -> None:
    state = cluster({"e": {}})
    put(state, "default/web", "c", app="web")
    t = first(gang(pod_affinity=(term(app="web"),)))
    assert fits(state, t) == {"c", "d"}  # zone z2; e has no zone label
    t = first(gang(pod_affinity=(term("kubernetes.io/hostname", app="web"),)))
    assert fits(state, t) == {"c"}


def test_affinity_reads_namespaces() -> None:
    state = cluster()
    put(state, "other/web", "a", ns="other", app="web")
    assert fits(state, first(gang(pod_affinity=(term(app="web"),)))) == set()
    anyns = term(ns=None, app="web")
    assert fits(state, first(gang(pod_affinity=(anyns,)))) == {"a", "b"}


def test_affinity_every_term_must_hold() -> None:
    state = cluster()
    put(state, "default/web", "a", app="web")
    put(state, "default/db", "c", app="db")
    t = first(gang(pod_affinity=(term(app="web"), term("kubernetes.io/hostname", tier="x"))))
    assert fits(state, t) == set()
    # a pod counts only when it matches every term (kube-scheduler's rule)
    put(state, "default/db2", "d", tier="x")
    assert fits(state, t) == set()
    put(state, "default/both", "b", app="web", tier="x")
    assert fits(state, t) == {"b"}


def test_affinity_first_pod_of_a_self_affine_group_goes_anywhere_labelled() -> None:
    state = cluster({"e": {}})
    self_affine = gang(labels={"app": "web"}, pod_affinity=(term(app="web"),))
    assert fits(state, first(self_affine)) == set(ZONES)
    other = gang(labels={"app": "api"}, pod_affinity=(term(app="web"),))
    snap = state.snapshot()
    _, status = feasible(first(other), snap, default_profile())
    assert status.code is Code.UNRESOLVABLE and "pod affinity" in status.message


def test_a_self_affine_gang_lands_in_one_domain() -> None:
    state = cluster()
    j = gang(tasks=4, labels={"app": "web"}, pod_affinity=(term(app="web"),))
    placements, status = place_job(j, state.snapshot(), default_profile())
    assert status.is_ok and len({ZONES[p.node] for p in placements}) == 1


# -- pod anti-affinity ---------------------------------------------------------------------


def test_anti_affinity_avoids_the_domain_of_a_matching_pod() -> None:
    state = cluster({"e": {}})
    put(state, "default/web", "a", app="web")
    t = first(gang(pod_anti_affinity=(term(app="web"),)))
    assert fits(state, t) == {"c", "d", "e"}  # e is in no zone: it passes
    t = first(gang(pod_anti_affinity=(term("kubernetes.io/hostname", app="web"),)))
    assert fits(state, t) == {"b", "c", "d", "e"}


def test_anti_affinity_of_placed_pods_keeps_the_new_pod_away() -> None:
    state = cluster()
    put(state, "default/db", "c", anti=(term(app="web"),), app="db")
    assert fits(state, first(gang(labels={"app": "web"}))) == {"a", "b"}
    assert fits(state, first(gang(labels={"app": "api"}))) == set(ZONES)
    state.set_pod("default/db", None)
    assert fits(state, first(gang(labels={"app": "web"}))) == set(ZONES)


def test_anti_affine_gang_members_keep_apart() -> None:
    host = term("kubernetes.io/hostname", app="web")
    meta_anti = (host,)
    j = gang(tasks=4, labels={"app": "web"}, pod_anti_affinity=(host,), anti_meta=meta_anti)
    placements, status = place_job(j, cluster().snapshot(), default_profile())
    assert status.is_ok and len({p.node for p in placements}) == 4
    j5 = replace(j, pod_sets=(replace(j.pod_sets[0], count=5),))
    placements, status = place_job(j5, cluster().snapshot(), default_profile())
    assert placements == [] and "4/5 tasks fit" in status.message
    assert status.code is Code.UNSCHEDULABLE


def test_held_placements_count_in_later_cycles_until_forgotten() -> None:
    state = cluster()
    host = term("kubernetes.io/hostname", app="web")
    j = gang(tasks=4, labels={"app": "web"}, pod_anti_affinity=(host,))
    placements, _ = place_job(j, state.snapshot(), default_profile())
    for p in placements:
        state.assume(p)
    later = replace(j, id=JobId("y"), pod_sets=(replace(j.pod_sets[0], count=1),))
    assert fits(state, first(later)) == set()
    state.forget(placements[0].task)
    assert fits(state, first(later)) == {placements[0].node}


# -- topology spread ---------------------------------------------------------------------


def spread(
    max_skew: int = 1, key: str = "zone", min_domains: int | None = None, **labels: str
) -> SpreadConstraint:
    return SpreadConstraint(max_skew, key, sel(**labels), min_domains)


def test_spread_keeps_the_skew_within_max_skew() -> None:
    state = cluster()
    put(state, "default/w1", "a", app="web")
    t = first(gang(labels={"app": "web"}, spread=(spread(app="web"),)))
    assert fits(state, t) == {"c", "d"}  # z1 1, z2 0: z1 would be 2 - 0 > 1
    t2 = first(gang(labels={"app": "web"}, spread=(spread(2, app="web"),)))
    assert fits(state, t2) == set(ZONES)


def test_spread_counts_only_the_pods_namespace_and_self_match() -> None:
    state = cluster()
    put(state, "other/w1", "a", ns="other", app="web")
    t = first(gang(labels={"app": "web"}, spread=(spread(app="web"),)))
    assert fits(state, t) == set(ZONES)
    put(state, "default/w1", "a", app="web")
    # a pod the selector does not match adds nothing to its domain: skew 1 - 0 holds
    t = first(gang(labels={"app": "api"}, spread=(spread(app="web"),)))
    assert fits(state, t) == set(ZONES)


def test_spread_nodes_without_the_key_never_fit() -> None:
    state = cluster({"e": {}})
    t = first(gang(labels={"app": "web"}, spread=(spread(app="web"),)))
    assert fits(state, t) == set(ZONES)


def test_spread_min_domains() -> None:
    state = cluster()
    put(state, "default/w1", "a", app="web")
    put(state, "default/w2", "c", app="web")
    t = first(gang(labels={"app": "web"}, spread=(spread(app="web"),)))
    assert fits(state, t) == set(ZONES)  # 1 and 1: either zone goes to 2 - 1
    t = first(gang(labels={"app": "web"}, spread=(spread(app="web", min_domains=3),)))
    assert fits(state, t) == set()  # 2 zones < 3: the least counts as 0, 1 + 1 - 0 > 1


def test_spread_counts_only_nodes_the_pod_may_use() -> None:
    state = cluster({"e": {"zone": "z3"}})
    put(state, "default/w1", "a", app="web")
    put(state, "default/w2", "c", app="web")
    # z3 (node e) is empty, so z1 and z2 are full; unless e is out of the node affinity
    t = first(gang(labels={"app": "web"}, spread=(spread(app="web"),)))
    assert fits(state, t) == {"e"}
    na = (NodeAffinityTerm((NodeRequirement("zone", "In", ("z1", "z2")),)),)
    t = first(gang(labels={"app": "web"}, spread=(spread(app="web"),), node_affinity=na))
    assert fits(state, t) == set(ZONES)


def test_a_spread_gang_alternates_zones() -> None:
    j = gang(tasks=4, labels={"app": "web"}, spread=(spread(app="web"),))
    placements, status = place_job(j, cluster().snapshot(), default_profile())
    zones = [ZONES[p.node] for p in placements]
    assert status.is_ok and zones.count("z1") == 2 and zones.count("z2") == 2


# -- the index -------------------------------------------------------------------------------


def test_index_counts_kept_up_to_date_equal_a_recount() -> None:
    state = cluster()
    t = state.table
    rng = np.random.default_rng(3)
    idx = PodIndex()
    names = list(ZONES)

    def web(m: PodMeta) -> bool:
        return m.labels.get("app") == "web"

    idx.counts(t, "web", web)
    for i in range(200):
        key = f"p{rng.integers(30)}"
        if rng.random() < 0.3:
            idx.drop(key)
        else:
            app = "web" if rng.random() < 0.5 else "db"
            terms = (term(app="web"),) if rng.random() < 0.3 else ()
            idx.put(key, NodeName(names[int(rng.integers(4))]), PodMeta("ns", {"app": app}, terms))
        if i == 100:  # a question asked half-way is kept from then on too
            idx.counts(t, "anti", lambda m: bool(m.anti_affinity), anti_only=True)
        for q, m, a in (("web", web, False), ("anti", lambda m: bool(m.anti_affinity), True)):
            if q == "anti" and i < 100:
                continue
            kept = idx.counts(t, q, m, anti_only=a).copy()
            fresh = idx.copy().counts(t, q, m, anti_only=a)
            assert np.array_equal(kept, fresh), (i, q)
        assert idx.anti_affinity_keys() == {
            t.topology_key for _, _, m in idx for t in m.anti_affinity
        }


# -- preferred pod (anti-)affinity, a score ------------------------------------------------


def test_preferred_affinity_draws_and_anti_affinity_repels() -> None:
    state = cluster()
    put(state, "default/cache", "c", app="cache")
    put(state, "default/noisy", "a", app="noisy")
    host = "kubernetes.io/hostname"
    drawn = gang(preferred_affinity=((50, term(host, app="cache")),))
    placements, _ = place_job(drawn, state.snapshot(), default_profile())
    assert placements[0].node == "c"
    # anti-affinity to the noisy pod's zone outweighs nothing else: z2 wins over z1
    kept = gang(preferred_anti_affinity=((10, term(app="noisy")),))
    placements, _ = place_job(kept, state.snapshot(), default_profile())
    assert ZONES[placements[0].node] == "z2"
    # a preference never filters: the preferred pod is nowhere, the task still places
    nowhere = gang(preferred_affinity=((100, term(app="none")),))
    placements, status = place_job(nowhere, state.snapshot(), default_profile())
    assert status.is_ok and placements


def test_preference_scores_scale_between_the_lowest_and_highest_node() -> None:
    from gpupool.core.placement.framework import CycleState
    from gpupool.core.placement.plugins.pod_affinity_score import PodAffinityPreference

    state = cluster()
    put(state, "default/w1", "a", app="web")
    put(state, "default/w2", "b", app="web")
    put(state, "default/w3", "c", app="web")
    snap = state.snapshot()
    cs = CycleState(snap.table, snap.cache, pods=snap.pods)
    t = first(gang(preferred_affinity=((10, term(app="web")),)))
    rows = snap.table.live()
    scores = dict(
        zip(
            [snap.table.nodes[r].name for r in rows.tolist()],
            PodAffinityPreference().score(cs, t, rows).tolist(),
            strict=True,
        )
    )
    assert scores == {"a": 100.0, "b": 100.0, "c": 0.0, "d": 0.0}  # z1 holds 2, z2 1
    assert not PodAffinityPreference().score(cs, first(gang()), rows).any()


def test_tasks_outside_any_namespace_and_unlabelled_are_not_indexed() -> None:
    state = cluster()
    placements, _ = place_job(job("sim", tasks=3), state.snapshot(), default_profile())
    for p in placements:
        state.assume(p)
    assert len(state.pods) == 0
    labelled, _ = place_job(gang(labels={"app": "web"}), state.snapshot(), default_profile())
    state.assume(labelled[0])
    assert len(state.pods) == 1


def test_anti_affinity_is_resolved_by_preempting_the_lower_priority_pod_in_the_way() -> None:
    from gpupool.core.scheduler import Scheduler
    from tests.builders import queue_config, whole

    def labelled(name: str, priority: int, **fields: Any) -> Job:
        base = job(name, gpu=whole(1), queue="a", priority=priority)
        ps = replace(base.pod_sets[0], pod=PodMeta("default", {"app": name}), **fields)
        return replace(base, pod_sets=(ps,))

    s = Scheduler(
        [node("n0", gpu=8, labels={"kubernetes.io/hostname": "n0"})], queue_config({"a": 8})
    )
    s.submit(labelled("low", 0), 0)
    s.cycle(0)
    s.submit(
        labelled("high", 10, pod_anti_affinity=(term("kubernetes.io/hostname", app="low"),)), 5
    )
    r = s.cycle(5)
    assert [e.job for e in r.evicts] == ["low"]
    r = s.cycle(6)
    assert [b.job for b in r.binds] == ["high"]


# -- ScheduleAnyway spread, a score -----------------------------------------------------------


def test_soft_spread_scores_as_kube_scheduler_normalises() -> None:
    from gpupool.core.placement.framework import CycleState
    from gpupool.core.placement.plugins.topology_spread_score import (
        PodTopologySpreadPreference,
    )

    state = cluster({"e": {}})
    put(state, "default/w1", "a", app="web")
    put(state, "default/w2", "b", app="web")
    put(state, "other/w3", "c", ns="other", app="web")  # another namespace: not counted
    snap = state.snapshot()
    cs = CycleState(snap.table, snap.cache, pods=snap.pods)
    t = first(gang(labels={"app": "web"}, soft_spread=(spread(app="web"),)))
    rows = snap.table.live()
    got = dict(
        zip(
            [snap.table.nodes[r].name for r in rows.tolist()],
            PodTopologySpreadPreference().score(cs, t, rows).tolist(),
            strict=True,
        )
    )
    # z1 holds 2: 2 * ln(2 zones + 2) rounds to 3; z2 0; e lacks the zone label: 0
    assert got == {"a": 0.0, "b": 0.0, "c": 100.0, "d": 100.0, "e": 0.0}
    skewed = first(gang(labels={"app": "web"}, soft_spread=(spread(3, app="web"),)))
    got = PodTopologySpreadPreference().score(cs, skewed, rows).tolist()
    assert got == [100 * (5 + 2 - 5) // 5] * 2 + [100.0] * 2 + [0.0]  # maxSkew - 1 added


def test_soft_spread_steers_but_never_filters() -> None:
    state = cluster()
    put(state, "default/w1", "a", app="web")
    j = gang(labels={"app": "web"}, soft_spread=(spread(app="web"),))
    placements, _ = place_job(j, state.snapshot(), default_profile())
    assert ZONES[placements[0].node] == "z2"  # binpack alone would take a
    only_z1 = ClusterState([node("a", labels={"zone": "z1"})])
    put(only_z1, "default/w1", "a", app="web")
    placements, status = place_job(j, only_z1.snapshot(), default_profile())
    assert status.is_ok and placements[0].node == "a"
