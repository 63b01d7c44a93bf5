"""Elastic GPU objects and the binder: validation, binding, reclaim policies, TFLOPS, MIG."""

from __future__ import annotations

import pytest

from gpupool.config.elastic import (
    claim_from_json,
    claim_to_json,
    class_from_json,
    class_to_json,
    gpu_from_json,
    gpu_to_json,
)
from gpupool.core import ClusterState, ConfigError, ConflictError, InvalidJobError, NodeName
from gpupool.core.cycle import run_cycle
from gpupool.core.elastic import (
    Binder,
    Capacity,
    ClaimPhase,
    ClaimRequests,
    ElasticGPU,
    ElasticGPUClaim,
    ElasticGPUClass,
    GpuPhase,
    Source,
    canonical_model,
    convert,
    peak_tflops,
)
from gpupool.core.model import Gpu, MigInstance, Node
from gpupool.core.placement.registry import default_profile
from tests.builders import job, node, whole


def mig_cards(name: str, cards: int = 1) -> Node:
    """Cards partitioned into 2 x 1g.10gb and 1 x 3g.40gb each."""
    inst = (MigInstance("1g.10gb", 2, 140, 10240), MigInstance("3g.40gb", 1, 420, 40960))
    return Node(
        NodeName(name),
        64_000,
        512_000,
        tuple(Gpu(i, "A100-80GB", 81920, mig=inst) for i in range(cards)),
    )


def classes() -> list[ElasticGPUClass]:
    return [
        ElasticGPUClass("phys", "physical"),
        ElasticGPUClass("slices", "hami-core", reclaim_policy="Retain"),
        ElasticGPUClass("mig", "mig"),
        ElasticGPUClass("late", "hami-core", binding_mode="WaitForFirstConsumer"),
        ElasticGPUClass(
            "remote",
            "remote",
            {
                "pool": "far",
                "model": "A100",
                "memoryMib": "40960",
                "count": "4",
                "endpoint": "10.0.0.1:9000",
            },
        ),
    ]


def binder(*nodes: Node) -> Binder:
    state = ClusterState(list(nodes) or [node("n0", gpu=4), node("n1", gpu=8, model="H100")])
    return Binder(state, classes=classes())


def claim(name: str, cls: str = "", **req: object) -> ElasticGPUClaim:
    return ElasticGPUClaim(name, ClaimRequests(**req), class_name=cls)  # type: ignore[arg-type]


def used(b: Binder) -> int:
    return b.state.totals()["gpu_milli_used"]


# -- TFLOPS ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spelling", "name"),
    [
        ("A100", "A100"),
        ("A100-80GB", "A100"),
        ("NVIDIA-A100-SXM4-80GB", "A100"),
        ("Tesla-T4", "T4"),
        ("NVIDIA L4", "L4"),
        ("L40S", "L40S"),
        ("L40", "L40"),
        ("A10", "A10"),
        ("A10G", None),
        ("H100", "H100"),
        ("NVIDIA H100 PCIe", "H100-PCIe"),
        ("NVIDIA-H100-80GB-HBM3", "H100"),
        ("NVIDIA RTX A6000", "RTX-A6000"),
        ("Tesla-V100-SXM2-32GB", "V100"),
        ("V100S-PCIE-32GB", "V100S"),
        ("MI300X", None),
    ],
)
def test_model_names_are_matched_loosely(spelling: str, name: str | None) -> None:
    assert canonical_model(spelling) == name


def test_tflops_become_a_slice_or_whole_cards() -> None:
    assert peak_tflops("A100") == 312.0
    s = convert(100, "A100")
    assert s is not None and (s.cards, s.gpu_milli) == (0, 321)  # 100/312 rounded up
    s = convert(312, "A100")
    assert s is not None and (s.cards, s.gpu_milli) == (1, 0)
    s = convert(700, "A100")
    assert s is not None and (s.cards, s.gpu_milli) == (3, 0)
    assert convert(10, "Unknown-9000") is None


# -- objects validate themselves ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"cards": 2, "gpu_milli": 100}, "requests.gpu_milli"),
        ({"cards": 1, "tflops": 5.0}, "requests.tflops"),
        ({"gpu_milli": 1000}, "requests.gpu_milli"),
        ({"cards": -1}, "requests.cards"),
        ({"cards": 65}, "requests.cards"),
        ({"tflops": float("nan")}, "requests.tflops"),
        ({}, "requests"),
        ({"gpu_milli": 100, "memory_mib": -5}, "requests.memory_mib"),
    ],
)
def test_a_bad_claim_names_the_field(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidJobError) as info:
        claim("c", **kwargs)
    assert info.value.field == field


@pytest.mark.parametrize(
    ("kwargs", "text"),
    [
        (
            {"provisioner": "nvidia"},
            "provisioner='nvidia': must be one of physical, hami-core, mig, remote",
        ),
        ({"provisioner": "physical", "reclaim_policy": "Recycle"}, "reclaimPolicy='Recycle'"),
        ({"provisioner": "physical", "binding_mode": "Later"}, "bindingMode='Later'"),
        (
            {"provisioner": "physical", "parameters": {"profiles": "1g.5gb"}},
            "parameters.profiles='1g.5gb': is not a parameter of provisioner physical",
        ),
        ({"provisioner": "remote", "parameters": {"pool": "p"}}, "parameters.model=None"),
        (
            {
                "provisioner": "remote",
                "parameters": {"pool": "p", "model": "A100", "memoryMib": "x", "count": "2"},
            },
            "parameters.memoryMib='x'",
        ),
    ],
)
def test_a_bad_class_is_a_config_error(kwargs: dict[str, object], text: str) -> None:
    with pytest.raises(ConfigError) as info:
        ElasticGPUClass("k", **kwargs)  # type: ignore[arg-type]
    assert text in str(info.value)


def test_json_forms_round_trip() -> None:
    c = claim("train", "phys", cards=2, models=frozenset({"A100"}))
    again = claim_from_json(claim_to_json(c))
    assert again == c
    k = classes()[4]
    assert class_from_json(class_to_json(k)) == k
    g = ElasticGPU(
        "g0", Source.SLICE, "A100", Capacity(250, 10240), node="n0", card=1, class_name="slices"
    )
    assert gpu_from_json(gpu_to_json(g)) == g
    with pytest.raises(InvalidJobError) as info:
        claim_from_json({"name": "x", "requests": {"cards": "two"}})
    assert info.value.field == "requests.cards"
    with pytest.raises(InvalidJobError):
        claim_from_json({"name": "x", "requests": {"cards": 1}, "colour": "red"})


# -- binding -----------------------------------------------------------------------------------


def test_cards_bind_on_one_node_and_hold_their_cards() -> None:
    b = binder()
    c = b.submit(claim("c", "phys", cards=3))
    assert c.phase is ClaimPhase.BOUND and len(c.elastic_gpus) == 3
    gpus = b.bound_to(c.key)
    assert {g.node for g in gpus} == {c.node}
    assert all(g.claim_ref is not None and g.claim_ref.key == c.key for g in gpus)
    assert all(g.phase is GpuPhase.BOUND and g.source is Source.PHYSICAL for g in gpus)
    assert used(b) == 3000


def test_submit_is_idempotent_and_a_changed_claim_conflicts() -> None:
    b = binder()
    first = b.submit(claim("c", "phys", cards=2))
    again = b.submit(claim("c", "phys", cards=2))
    assert again == first and len(b.gpus()) == 2 and used(b) == 2000
    with pytest.raises(ConflictError):
        b.submit(claim("c", "phys", cards=3))


def test_a_slice_holds_its_share_of_one_card() -> None:
    b = binder()
    c = b.submit(claim("s", "slices", gpu_milli=300, memory_mib=10_000))
    (g,) = b.bound_to(c.key)
    assert g.source is Source.SLICE and (g.capacity.gpu_milli, g.capacity.memory_mib) == (
        300,
        10_000,
    )
    assert used(b) == 300


def test_mig_takes_the_smallest_profile_that_fits_and_then_the_next() -> None:
    b = binder(mig_cards("m0"))
    small = b.submit(claim("a", "mig", gpu_milli=100, memory_mib=8000))
    assert b.bound_to(small.key)[0].mig_profile == "1g.10gb"
    big = b.submit(claim("b", "mig", gpu_milli=300))
    assert b.bound_to(big.key)[0].mig_profile == "3g.40gb"
    b.submit(claim("c", "mig", gpu_milli=100))  # the second 1g.10gb
    d = b.submit(claim("d", "mig", gpu_milli=100))  # none free now: pending
    assert d.phase is ClaimPhase.PENDING
    b.delete_claim(big.key)
    assert b.reconcile()[0].key == d.key
    assert b.bound_to(d.key)[0].mig_profile == "3g.40gb"
    with pytest.raises(InvalidJobError) as info:
        b.submit(claim("e", "mig", gpu_milli=500))
    assert "no MIG profile here holds it" in info.value.rule


def test_tflops_claims_say_which_models_serve_them() -> None:
    b = binder()
    c = b.submit(claim("t", "slices", tflops=100.0))
    assert {m.model: m.gpu_milli for m in c.serving_models} == {"A100": 321, "H100": 102}
    (g,) = b.bound_to(c.key)
    assert g.model == "A100" and g.capacity.gpu_milli == 321  # the weaker card first
    assert g.capacity.tflops is not None and g.capacity.tflops >= 100.0
    whole_cards = b.submit(claim("w", "phys", tflops=700.0))
    assert {m.model: m.cards for m in whole_cards.serving_models} == {"A100": 3, "H100": 1}
    assert b.bound_to(whole_cards.key)[0].model == "H100"  # one card beats three


def test_tflops_for_an_unknown_model_is_rejected_and_nothing_is_created() -> None:
    b = binder()
    with pytest.raises(InvalidJobError) as info:
        b.submit(claim("t", "slices", tflops=10.0, models=frozenset({"MI300X"})))
    assert info.value.field == "requests.models" and info.value.value == "MI300X"
    assert "no published peak" in info.value.rule
    unknown_here = binder(node("x", gpu=2, model="MysteryGPU"))
    with pytest.raises(InvalidJobError) as info:
        unknown_here.submit(claim("t", "slices", tflops=10.0))
    assert info.value.field == "requests.tflops"
    assert b.claims() == [] and b.gpus() == [] and used(b) == 0


@pytest.mark.parametrize(
    ("c", "field", "words"),
    [
        (claim("x", "nope", cards=1), "class_name", "no such ElasticGPUClass"),
        (claim("x", "slices", cards=1), "requests.cards", "makes slices of one card"),
        (claim("x", "phys", gpu_milli=200), "requests.gpu_milli", "makes whole cards"),
        (claim("x", "phys", cards=9), "requests.cards", "more GPUs than any node has"),
        (
            claim("x", "slices", gpu_milli=100, memory_mib=99_999),
            "requests.memory_mib",
            "more than any single GPU has",
        ),
        (claim("x", "remote", cards=5), "requests.cards", "remote pool far has 4 GPUs"),
        (
            claim("x", "", gpu_milli=100, memory_mib=99_999),
            "class_name",
            "no ElasticGPUClass can serve this claim",
        ),
    ],
)
def test_a_claim_no_class_can_serve_is_rejected(c: ElasticGPUClaim, field: str, words: str) -> None:
    b = binder()
    with pytest.raises(InvalidJobError) as info:
        b.submit(c)
    assert info.value.field == field and words in info.value.rule
    assert b.claims() == [] and b.gpus() == []


def test_without_a_class_the_first_that_can_serve_is_taken() -> None:
    b = binder()
    assert b.submit(claim("c", cards=1)).class_name == "phys"
    assert b.submit(claim("s", gpu_milli=100)).class_name == "late"


def test_wait_for_first_consumer_binds_on_the_consumers_node() -> None:
    b = binder()
    c = b.submit(claim("w", "late", gpu_milli=200, memory_mib=1000))
    assert c.phase is ClaimPhase.PENDING and "first consumer" in c.message
    assert b.reconcile() == []
    bound = b.consume(c.key, "n1")
    assert bound.phase is ClaimPhase.BOUND and bound.node == "n1"
    assert b.consume(c.key, "n0") == bound  # bound once


def test_remote_pool_serves_cards_up_to_its_size() -> None:
    b = binder()
    a = b.submit(claim("a", "remote", cards=3))
    assert {g.pool for g in b.bound_to(a.key)} == {"far"} and used(b) == 0
    c = b.submit(claim("c", "remote", cards=2))
    assert c.phase is ClaimPhase.PENDING and "1 of its 4 GPUs free" in c.message
    b.delete_claim(a.key)
    assert [x.key for x in b.reconcile()] == [c.key]


def test_release_follows_the_reclaim_policy() -> None:
    b = binder()
    d = b.submit(claim("d", "phys", cards=2))
    r = b.submit(claim("r", "slices", gpu_milli=500))
    out = b.delete_claim(d.key)
    assert out.deleted == d.elastic_gpus and out.retained == ()
    assert all(n not in {g.name for g in b.gpus()} for n in d.elastic_gpus)
    out = b.delete_claim(r.key)
    assert out.retained == r.elastic_gpus
    (kept,) = b.gpus()
    assert kept.phase is GpuPhase.RELEASED and used(b) == 500  # still holds its share
    again = b.submit(claim("r", "slices", gpu_milli=500))  # a Released one is not rebound
    assert again.elastic_gpus != r.elastic_gpus and used(b) == 1000
    with pytest.raises(ConflictError):
        b.delete_gpu(again.elastic_gpus[0])
    b.delete_gpu(kept.name)
    assert used(b) == 500


def test_an_available_elastic_gpu_is_bound_before_one_is_made() -> None:
    b = binder()
    static = b.add_gpu(
        ElasticGPU(
            "static-0",
            Source.SLICE,
            "",
            Capacity(600, 20_000),
            node="n0",
            card=2,
            class_name="slices",
        )
    )
    assert static.model == "A100" and used(b) == 600  # it holds its share at once
    c = b.submit(claim("c", "slices", gpu_milli=400, memory_mib=10_000))
    assert c.elastic_gpus == ("static-0",) and used(b) == 600
    with pytest.raises(ConflictError):  # the share is taken: no over-commit
        b.add_gpu(
            ElasticGPU("static-1", Source.PHYSICAL, "", Capacity(1000, 40960), node="n0", card=2)
        )
    b.delete_claim(c.key)  # a static one follows its own policy (Delete by default)
    assert b.gpus() == [] and used(b) == 0


def test_made_available_again_after_retain() -> None:
    b = binder()
    r = b.submit(claim("r", "slices", gpu_milli=500))
    b.delete_claim(r.key)
    g = b.make_available(r.elastic_gpus[0])
    assert g.phase is GpuPhase.AVAILABLE and g.claim_ref is None
    assert b.submit(claim("z", "slices", gpu_milli=300)).elastic_gpus == r.elastic_gpus


def test_claims_and_jobs_never_share_a_card() -> None:
    state = ClusterState([node("n0", gpu=2)])
    b = Binder(state, classes=classes())
    result = run_cycle(state, [job("j", gpu=whole(1))], default_profile())
    assert result.binds
    c = b.submit(claim("c", "phys", cards=2))
    assert c.phase is ClaimPhase.PENDING  # one card is the job's
    one = b.submit(claim("one", "phys", cards=1))
    assert one.phase is ClaimPhase.BOUND
    assert run_cycle(state, [job("k", gpu=whole(1))], default_profile()).parks


def test_a_node_leaving_fails_its_gpus_and_loses_their_claims() -> None:
    b = binder()
    c = b.submit(claim("c", "phys", cards=2))
    node_name = c.node
    lost = b.node_removed(node_name)
    assert [x.key for x in lost] == [c.key] and lost[0].phase is ClaimPhase.LOST
    assert all(g.phase is GpuPhase.FAILED for g in b.bound_to(c.key))
    b.state.remove_node(NodeName(node_name))
    out = b.delete_claim(c.key)
    assert set(out.deleted) == set(c.elastic_gpus) and b.gpus() == []


def test_restore_takes_the_cards_back_as_they_were() -> None:
    b = binder()
    c = b.submit(claim("c", "phys", cards=2))
    r = b.submit(claim("r", "slices", gpu_milli=250))
    b.delete_claim(r.key)  # Retain: Released, still holding its share
    gpus = [gpu_from_json(gpu_to_json(g)) for g in b.gpus()]
    claims = [b.claim(c.key)]
    fresh = binder()
    fresh.restore(gpus, claims)
    assert fresh.state.totals()["gpu_milli_used"] == used(b) == 2250
    assert fresh.claim(c.key) == claims[0] and fresh.gpus() == b.gpus()
    assert fresh.submit(claim("c", "phys", cards=2)) == claims[0]  # bound once
    with pytest.raises(ConflictError):
        fresh.restore(gpus, [])  # names known already: nothing changes
    assert fresh.state.totals()["gpu_milli_used"] == 2250
