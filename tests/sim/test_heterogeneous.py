"""The heterogeneous scenario: a mixed NVIDIA / Ascend / DCU cluster, the same jobs pinned to
one vendor and with fallback between vendors, and the scenario format's alternatives."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpupool.cli import main
from gpupool.core.errors import ConfigError
from gpupool.sim import heterogeneous
from gpupool.sim.scenario import generate_jobs, load_scenario

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "scenarios" / "heterogeneous.yaml"


@pytest.fixture(scope="module")
def modes() -> dict[str, heterogeneous.ModeResult]:
    # 3 h: two hours to fill up, then one hour of the saturated window.
    return heterogeneous.run(EXAMPLE, seed=1, duration_s=3 * 3600.0)


def test_the_packaged_scenario_is_the_example() -> None:
    assert heterogeneous.DEFAULT_SCENARIO.read_text() == EXAMPLE.read_text()


def test_fallback_fills_the_cluster_and_waits_less_than_pinned(modes) -> None:  # type: ignore[no-untyped-def]
    pinned, fallback = modes["pinned"], modes["fallback"]
    assert fallback.utilisation >= 0.90
    assert pinned.utilisation < 0.80  # nothing asks for the DCUs when jobs are pinned
    assert fallback.wait_p50_s < pinned.wait_p50_s
    assert fallback.started > pinned.started


def test_fallback_shares_are_fair_in_normalised_units(modes) -> None:  # type: ignore[no-untyped-def]
    assert modes["fallback"].jain >= 0.99
    assert set(modes["fallback"].queue_shares) == {"t1", "t2", "t3", "t4"}


def test_no_placement_breaks_a_division_rule_and_alternatives_are_used(modes) -> None:  # type: ignore[no-untyped-def]
    for m in modes.values():
        assert m.forbidden_placements == 0 and m.shares_checked > 0
    assert set(modes["pinned"].runs_by_form) == {"own"}
    assert {"ascend", "dcu", "h100"} <= set(modes["fallback"].runs_by_form)


def test_pinned_and_fallback_get_the_same_arrivals() -> None:
    s = load_scenario(EXAMPLE)
    a, _ = generate_jobs(s, 3)
    b, _ = generate_jobs(heterogeneous.pinned(s), 3)
    assert [(j.id, j.submit_time_s) for j in a] == [(j.id, j.submit_time_s) for j in b]
    assert all(j.alternatives for j in a) and not any(j.alternatives for j in b)
    assert all(alt.image for alt in a[0].alternatives)


def test_bench_heterogeneous_prints_the_fixed_json_shape(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert (
        main(["bench", "heterogeneous", "--scenario", str(EXAMPLE), "--duration", "150m", "--json"])
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"pinned", "fallback"}
    for mode in out.values():
        for key in ("utilisation", "wait_p50_s", "jain", "forbidden_placements"):
            assert key in mode


def test_a_bad_alternative_in_a_scenario_names_the_field(tmp_path: Path) -> None:
    text = EXAMPLE.read_text().replace(
        "- {name: dcu, gpus: 2, models: [K100], image: train:dtk24}",
        "- {name: dcu, gpus: 2, gpuMilli: 10, models: [K100]}",
        1,
    )
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(
        ConfigError,
        match=r"alternatives\[1\]\.gpus=2 cannot go with gpuMilli "
        r"or gpuMemory: give either gpus",
    ):
        load_scenario(path)


def test_the_mixed_cluster_and_queue_examples_load() -> None:
    from gpupool.config.loader import load_cluster, load_queue_config

    nodes = load_cluster(ROOT / "examples" / "cluster-heterogeneous.yaml")
    vendors = {g.vendor for n in nodes for g in n.gpus}
    assert vendors == {"nvidia", "ascend", "hygon"}
    assert sum(n.gpu_count for n in nodes if n.gpus[0].vendor == "nvidia") == 32
    config = load_queue_config(ROOT / "examples" / "queues-heterogeneous.yaml")
    assert config.settings.normalized_shares
    assert [fq.flavor for fq in config.cluster_queues[3].flavors] == ["ascend", "h100", "dcu"]
