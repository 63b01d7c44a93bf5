"""Which MIG profile a pod is given, as HAMi 2.10's scheduler chooses it (``pkg/device/nvidia``:
``checkType`` for ``nvidia.com/vgpu-mode``, ``selectMigCandidate`` per card): per card, the
smallest profile that holds the container's memory *and* has a free placement; the memory
as a percentage is taken of each card; several card models each offer their own profiles."""

from __future__ import annotations

from typing import Any

import pytest

from gpupool.core.errors import InvalidJobError
from gpupool.core.model import Gpu
from gpupool.k8s.hami.mig import MigCard, allows, mig_request, select_profile
from gpupool.k8s.hami.register import HamiMigProfile
from gpupool.k8s.translate import pod_request

A40 = "NVIDIA A100-SXM4-40GB"
A80 = "NVIDIA A100-SXM4-80GB"


def prof(
    name: str, mib: int, core: int, slices: int, spans: list[tuple[int, int]]
) -> HamiMigProfile:
    return HamiMigProfile(name, mib, core, slices, tuple(spans))


# A100-40GB and A100-80GB in MIG mode, with NVML's placements (8 memory slices).
P40 = (
    prof("1g.5gb", 4864, 14, 1, [(i, 1) for i in range(7)]),
    prof("2g.10gb", 9856, 28, 2, [(0, 2), (2, 2), (4, 2)]),
    prof("3g.20gb", 19968, 42, 3, [(0, 4), (4, 4)]),
)
P80 = (
    prof("1g.10gb", 9856, 14, 1, [(i, 1) for i in range(7)]),
    prof("2g.20gb", 19968, 28, 2, [(0, 2), (2, 2), (4, 2)]),
    prof("3g.40gb", 40192, 42, 3, [(0, 4), (4, 4)]),
)
FULL_1G = tuple((i, 1) for i in range(7))  # seven 1g instances: only slice 7 is free


def card(
    uuid: str,
    model: str,
    mib: int,
    profiles: tuple[HamiMigProfile, ...],
    occupied: tuple[tuple[int, int], ...] = (),
) -> MigCard:
    return MigCard(Gpu(index=0, model=model, memory_mib=mib, uuid=uuid), profiles, occupied)


def pod(limits: dict[str, Any], mode: str | None = None) -> dict[str, Any]:
    ann = {} if mode is None else {"nvidia.com/vgpu-mode": mode}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "t", "annotations": ann},
        "spec": {
            "schedulerName": "gpupool",
            "containers": [{"name": "c", "image": "x", "resources": {"limits": limits}}],
        },
    }


def chosen(
    p: dict[str, Any], cards: list[MigCard], core_models: frozenset[str] = frozenset()
) -> tuple[str | None, frozenset[str]]:
    req = mig_request(pod_request(p), p["metadata"]["annotations"], cards, core_models)
    return req.gpu.mig_profile, req.gpu.models


def test_a_card_falls_back_to_a_larger_profile_when_the_smallest_has_no_placement() -> None:
    """HAMi's ``selectMigCandidate``: a profile is taken only with a free placement."""
    odd = (
        prof("1g.5gb", 4864, 14, 1, [(0, 1), (1, 1)]),
        prof("2g.10gb", 9856, 28, 2, [(2, 2), (4, 2)]),
    )
    assert select_profile(odd, [], 4000) is odd[0]
    assert select_profile(odd, [(0, 1), (1, 1)], 4000) is odd[1]  # 1g full: 2g
    assert select_profile(odd, [(0, 1), (1, 1), (2, 2), (4, 2)], 4000) is None
    assert select_profile(P40, [], 8000) is P40[1]  # 1g does not hold 8000 MiB
    assert select_profile(P40, FULL_1G, 4000) is None  # every 2g and 3g overlaps a 1g


def choices(p: dict[str, Any], cards: list[MigCard]) -> tuple[tuple[str, ...], frozenset[str]]:
    req = mig_request(pod_request(p), p["metadata"]["annotations"], cards)
    return req.gpu.mig_choices, req.gpu.models


def test_every_profile_holding_the_pod_is_offered_smallest_first() -> None:
    """4000 MiB is a 1g.5gb on an A100-40GB and a 1g.10gb on an A100-80GB: the pod is
    offered every profile that holds it, by memory then slice count, and each card gives
    the first it has free (``selectMigCandidate`` on the node being scored). The list does
    not depend on what is free: a full 40GB card does not change it."""
    free40 = card("GPU-40", A40, 40960, P40)
    full40 = card("GPU-40", A40, 40960, P40, FULL_1G)
    free80 = card("GPU-80", A80, 81920, P80)
    p = pod({"nvidia.com/gpu": 1, "nvidia.com/gpumem": 4000}, "mig")
    both = (
        ("1g.5gb", "1g.10gb", "2g.10gb", "2g.20gb", "3g.20gb", "3g.40gb"),
        frozenset({A40, A80}),
    )
    assert choices(p, [free40, free80]) == both
    assert choices(p, [full40, free80]) == both
    assert choices(p, [free40]) == (("1g.5gb", "2g.10gb", "3g.20gb"), frozenset({A40}))
    big = pod({"nvidia.com/gpu": 1, "nvidia.com/gpumem": 15000}, "mig")
    assert choices(big, [free40, free80]) == (
        ("2g.20gb", "3g.20gb", "3g.40gb"),
        frozenset({A40, A80}),
    )


def test_a_memory_percentage_is_taken_of_each_card() -> None:
    """10 % is 4096 MiB of the 40GB card and 8192 MiB of the 80GB card: every profile of
    both holds it. 25 % is 10240 MiB of the 40GB card and 20480 of the 80GB one: each card
    is offered only its profiles that hold its own share (3g.20gb and 3g.40gb)."""
    p = pod({"nvidia.com/gpu": 1, "nvidia.com/gpumem-percentage": 10}, "mig")
    cards = [card("GPU-40", A40, 40960, P40), card("GPU-80", A80, 81920, P80)]
    assert choices(p, cards)[0][:2] == ("1g.5gb", "1g.10gb")
    quarter = pod({"nvidia.com/gpu": 1, "nvidia.com/gpumem-percentage": 25}, "mig")
    assert choices(quarter, cards) == (("3g.20gb", "3g.40gb"), frozenset({A40, A80}))
    # 60 %: 24576 MiB on the 40GB card (no profile holds it), 49152 MiB on the 80GB one
    big = pod({"nvidia.com/gpu": 1, "nvidia.com/gpumem-percentage": 60}, "mig")
    with pytest.raises(InvalidJobError, match="largest holds 40192 MiB"):
        chosen(big, cards)


@pytest.mark.parametrize(
    ("mode", "mig", "core"),
    [
        (None, True, True),
        ("mig", True, False),
        ("hami-core", False, True),
        ("mps", False, False),
        ("hami-core,mig", True, True),
    ],
)
def test_vgpu_mode_selects_card_modes_as_hamis_check_type(
    mode: str | None, mig: bool, core: bool
) -> None:
    assert (allows(mode, "mig"), allows(mode, "hami-core")) == (mig, core)


def test_a_pod_without_vgpu_mode_takes_mig_cards_where_no_other_card_holds_it() -> None:
    """Absent, HAMi lets a pod take any card: gpupool keeps its request for the cards not
    in MIG mode while the cluster has one of a model it allows, else gives it MIG; with
    ``hami-core`` it never goes to MIG."""
    cards = [card("GPU-40", A40, 40960, P40)]
    plain = pod({"nvidia.com/gpu": 1, "nvidia.com/gpumem": 4000})
    assert chosen(plain, cards) == ("1g.5gb", frozenset({A40}))
    assert chosen(plain, cards, frozenset({A80})) == (None, frozenset())
    core = pod({"nvidia.com/gpu": 1, "nvidia.com/gpumem": 4000}, "hami-core")
    assert chosen(core, cards) == (None, frozenset())
    # the cards outside MIG mode are of a model the pod does not allow: MIG
    typed = pod({"nvidia.com/gpu": 1, "nvidia.com/gpumem": 4000})
    typed["metadata"]["annotations"]["nvidia.com/use-gputype"] = "A100-SXM4-40GB"
    req = pod_request(typed, models=frozenset({A40, A80}))
    out = mig_request(req, typed["metadata"]["annotations"], cards, frozenset({A80}))
    assert out.gpu.mig_profile == "1g.5gb"


def test_a_container_asking_several_gpus_gets_as_many_instances() -> None:
    """HAMi's ``Fit`` gives a container ``nvidia.com/gpu: n`` n MIG devices; gpupool asks
    the core for n instances of the profile chosen; several containers are refused."""
    cards = [card("GPU-40", A40, 40960, P40)]
    two = pod({"nvidia.com/gpu": 2, "nvidia.com/gpumem": 4000})
    req = mig_request(pod_request(two), {}, cards)
    assert (req.gpu.mig_profile, req.gpu.mig_instances) == ("1g.5gb", 2)
    both = pod({"nvidia.com/gpu": 1, "nvidia.com/gpumem": 4000}, "mig")
    both["spec"]["containers"].append(dict(both["spec"]["containers"][0], name="d"))
    with pytest.raises(InvalidJobError, match="one container"):
        mig_request(pod_request(both), both["metadata"]["annotations"], cards)
