"""Required node affinity: every operator, terms ORed, requirements ANDed, bad input named."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpupool.core import ClusterState, Code, InvalidJobError, default_profile, place_task
from gpupool.core.affinity import NodeAffinityTerm, NodeRequirement
from gpupool.core.model import Task
from tests.builders import job, node, whole


def R(key: str, op: str, *values: str, field: bool = False) -> NodeRequirement:
    return NodeRequirement(key, op, tuple(values), field=field)


NODES = [
    node("a", labels={"zone": "z1", "gen": "3"}),
    node("b", labels={"zone": "z2", "gen": "5"}),
    node("c", labels={}),
]


@pytest.mark.parametrize(
    ("terms", "fits"),
    [
        ((NodeAffinityTerm((R("zone", "In", "z2", "z9"),)),), {"b"}),
        ((NodeAffinityTerm((R("zone", "NotIn", "z1"),)),), {"b", "c"}),
        ((NodeAffinityTerm((R("zone", "Exists"),)),), {"a", "b"}),
        ((NodeAffinityTerm((R("zone", "DoesNotExist"),)),), {"c"}),
        ((NodeAffinityTerm((R("gen", "Gt", "3"),)),), {"b"}),
        ((NodeAffinityTerm((R("gen", "Lt", "4"),)),), {"a"}),
        ((NodeAffinityTerm((R("metadata.name", "In", "c", field=True),)),), {"c"}),
        ((NodeAffinityTerm((R("metadata.name", "NotIn", "a", field=True),)),), {"b", "c"}),
        # requirements of a term are ANDed, terms ORed
        ((NodeAffinityTerm((R("zone", "Exists"), R("gen", "Gt", "4"))),), {"b"}),
        (
            (
                NodeAffinityTerm((R("zone", "In", "z1"),)),
                NodeAffinityTerm((R("zone", "DoesNotExist"),)),
            ),
            {"a", "c"},
        ),
        ((NodeAffinityTerm(()),), set()),  # an empty term matches no node
    ],
)
def test_operators(terms: tuple[NodeAffinityTerm, ...], fits: set[str]) -> None:
    state = ClusterState(NODES)
    prof = default_profile()
    base = job("x")
    ps = replace(base.pod_sets[0], node_affinity=terms)
    task = next(replace(base, pod_sets=(ps,)).tasks())
    placed = set()
    for name in ("a", "b", "c"):
        only = ClusterState([n for n in NODES if n.name == name])
        p, status = place_task(task, only.snapshot(), prof)
        if p is not None:
            placed.add(name)
        else:
            assert status.code is Code.UNRESOLVABLE and "node affinity" in status.message
    assert placed == fits
    p, _ = place_task(task, state.snapshot(), prof)
    assert (p is None) == (not fits) and (p is None or p.node in fits)


@pytest.mark.parametrize(
    ("req", "field"),
    [
        (("zone", "Near", ("z1",)), "operator"),
        (("zone", "In", ()), "values"),
        (("zone", "Exists", ("z1",)), "values"),
        (("gen", "Gt", ("three",)), "values"),
        (("gen", "Lt", ("1", "2")), "values"),
    ],
)
def test_bad_requirements_name_the_field(req: tuple[str, str, tuple[str, ...]], field: str) -> None:
    with pytest.raises(InvalidJobError) as exc:
        NodeRequirement(*req)
    assert exc.value.field.endswith(field) and req[0] in exc.value.field


def test_match_fields_only_on_the_node_name() -> None:
    with pytest.raises(InvalidJobError, match=r"metadata\.name"):
        NodeRequirement("metadata.labels", "In", ("x",), field=True)


def _with_preferred(
    weighted: tuple[tuple[int, NodeAffinityTerm], ...], required: tuple[NodeAffinityTerm, ...] = ()
) -> Task:
    base = job("x")
    ps = replace(base.pod_sets[0], preferred_node_affinity=weighted, node_affinity=required)
    return next(replace(base, pod_sets=(ps,)).tasks())


def test_preferred_node_affinity_picks_the_heaviest_matching_node() -> None:
    """kube-scheduler's NodeAffinity score: the sum of the matching terms' weights. Node a
    matches a term of 40, b one of 30 and one of 20 (50 in all), c none."""
    weighted = (
        (40, NodeAffinityTerm((R("zone", "In", "z1"),))),
        (30, NodeAffinityTerm((R("gen", "Gt", "4"),))),
        (20, NodeAffinityTerm((R("zone", "In", "z2"),))),
    )
    task = _with_preferred(weighted)
    p, _ = place_task(task, ClusterState(NODES).snapshot(), default_profile())
    assert p is not None and p.node == "b"
    # without b, a (40) beats c (nothing matched)
    p, _ = place_task(task, ClusterState([NODES[0], NODES[2]]).snapshot(), default_profile())
    assert p is not None and p.node == "a"


def test_preferred_node_affinity_never_filters() -> None:
    """A node matching no preferred term is still used when it is the only one that fits."""
    task = _with_preferred(((100, NodeAffinityTerm((R("zone", "In", "z9"),))),))
    p, _ = place_task(task, ClusterState([NODES[2]]).snapshot(), default_profile())
    assert p is not None and p.node == "c"


def test_preferred_node_affinity_outweighs_packing() -> None:
    """Weighted twice the packing (kube-scheduler's default): a preferred empty node wins
    over a fuller one that is not preferred."""
    full = node("full", labels={"zone": "z1"})
    empty = node("empty", labels={"zone": "z2"})
    state = ClusterState([full, empty])
    filler = job("filler", gpu=whole(7))
    p, _ = place_task(next(filler.tasks()), state.snapshot(), default_profile())
    assert p is not None
    state.assume(p)
    task = _with_preferred(((1, NodeAffinityTerm((R("zone", "In", "z2"),))),))
    got, _ = place_task(task, state.snapshot(), default_profile())
    assert got is not None and got.node == "empty"
    plain, _ = place_task(next(job("plain").tasks()), state.snapshot(), default_profile())
    assert plain is not None and plain.node == p.node  # packing, without the preference
