"""Pending reasons speak of the flavors the job may use only, in the user's units: an A6000 job
waiting at quota in queue serving (flavors t4 and a6000) is told about a6000, not t4."""

from __future__ import annotations

from pathlib import Path

from tests.e2e.serve_kit import Wall, job_doc, make_plane


def test_a_reason_leaves_out_flavors_the_job_cannot_use(tmp_path: Path) -> None:
    plane = make_plane(tmp_path / "state.db", Wall())
    plane.submit(
        job_doc("holder", "serving", "serving", gpus=1, models=["RTX-A6000"], duration="10h")
    )
    plane.tick()
    plane.submit(job_doc("waits", "serving", "serving", gpus=4, models=["RTX-A6000"]))
    plane.tick()
    rec = plane.job("serving/waits")
    assert rec.phase == "Pending"
    assert "queue serving at quota for a6000 GPUs (1/4 GPUs used, 4 asked" in rec.message
    assert "t4" not in rec.message, rec.message


def test_usable_only_keeps_the_clauses_of_usable_flavors() -> None:
    from gpupool.control.reasons import usable_only
    from gpupool.core.reasons import Reason, sentence

    h100 = Reason(
        "quota",
        "queue llm at quota for h100 GPUs (16/12 GPUs used, 8 asked, 0 available with borrowing)",
        flavor="h100",
    )
    a100 = Reason(
        "quota",
        "queue llm at quota for a100 GPUs (12.6/8 GPUs used, 8 asked, 2.4 "
        "available with borrowing)",
        flavor="a100",
    )
    mig = Reason("gpu-fit", "no free MIG 1g.5gb instance", 1, 1, ("a100-mig",), "a100-mig")
    everything = (h100, a100, mig)
    assert sentence(usable_only(everything, {"a100"})) == (
        "queue llm at quota for a100 GPUs (12.6/8 GPUs used, 8 asked, 2.4 available with borrowing)"
    )
    assert (
        sentence(usable_only(everything, {"a100-mig"}))
        == "a100-mig: 0/1 nodes fit: 1 no free MIG 1g.5gb instance"
    )
    assert usable_only(everything, set()) == everything  # nothing would be left: kept whole
    behind = (Reason("hold", "waiting behind gang x"),)
    assert usable_only(behind, {"a100"}) == behind


def test_a_flavors_clause_drops_only_the_nodes_of_other_flavors() -> None:
    from gpupool.control.reasons import flavor_nodes_only
    from gpupool.core.quota import ResourceFlavor
    from gpupool.core.reasons import Reason, nodes_fit, sentence

    flavors = [
        ResourceFlavor("a100", {"gpupool.io/flavor": "a100"}),
        ResourceFlavor("h100", {"gpupool.io/flavor": "h100"}),
    ]
    other = Reason(
        "node-selector", "labels do not match gpupool.io/flavor=a100", 9, resolvable=False
    )
    short = Reason("gpu-fit", "fewer than 8 whole GPUs free", 3, gpu="whole")
    attempt = tuple(r.within("a100", flavor="a100") for r in nodes_fit(12, [other, short]))
    assert sentence(attempt).startswith("a100: 0/12 nodes fit: 9 labels do not match")
    assert (
        sentence(flavor_nodes_only(attempt, flavors))
        == "a100: 0/3 nodes fit: 3 fewer than 8 whole GPUs free"
    )
    only = tuple(nodes_fit(9, [other]))  # nothing else to say: kept as it was
    assert flavor_nodes_only(only, flavors) == only
    zone = (Reason("node-selector", "labels do not match zone=x", 2, 5),)  # not a flavor's
    assert flavor_nodes_only(zone, flavors) == zone


def test_quota_clauses_are_in_the_users_units() -> None:
    from gpupool.core.quota import Resource
    from gpupool.core.quota_tree import _describe_short

    cpu = _describe_short("q", ("f", Resource.CPU_MILLI), 4000, 8000, 6000, 4000)
    assert cpu == "queue q at quota for f CPU (4/8 CPUs used, 6 asked, 4 available with borrowing)"
    mem = _describe_short("q", ("f", Resource.GPU_MEMORY_MIB), 1024, 2048, 4096, 1024)
    assert mem.startswith("queue q at quota for f GPU memory (1Gi/2Gi used, 4Gi asked")
    assert "_mib" not in mem and "_milli" not in cpu


def test_the_gpu_clause_leads_when_a_job_is_short_of_gpus_and_cpus() -> None:
    from gpupool.core.quota import (
        ClusterQueue,
        FlavorQuotas,
        QueueConfig,
        Quota,
        Resource,
        ResourceFlavor,
    )
    from gpupool.core.quota_tree import QuotaTree

    quotas = {
        Resource.CPU_MILLI: Quota(8000),
        Resource.GPU_MILLI: Quota(4000),
        Resource.MEMORY_MIB: Quota(65536),
    }
    tree = QuotaTree(
        QueueConfig(
            (ResourceFlavor("f"),), (ClusterQueue("q", (FlavorQuotas("f", quotas),)),), ()
        ).validate()
    )
    short = tree.shortfall(
        "q",
        {
            ("f", Resource.CPU_MILLI): 16000,
            ("f", Resource.MEMORY_MIB): 131072,
            ("f", Resource.GPU_MILLI): 8000,
        },
    )
    assert short == [
        "queue q at quota for f GPUs (0/4 GPUs used, 8 asked, 4 available with borrowing)",
        "queue q at quota for f CPU (0/8 CPUs used, 16 asked, 8 available with borrowing)",
        "queue q at quota for f memory (0/64Gi used, 128Gi asked, 64Gi available with borrowing)",
    ]


def test_a_flavors_clause_counts_its_own_nodes_and_opens_with_the_cause(tmp_path: Path) -> None:
    """research/llm: h100 first, then a100 (3 nodes of 12). Two 8-GPU jobs take the h100
    quota; vision's 2-GPU jobs (CPU-heavy: two to a node) hold part of every A100 node, within
    vision's GPU quota, so llm may still borrow what it needs there; the next 8-GPU job is told
    about the 3 A100 nodes, not about the 9 others that merely lack the a100 label (which,
    being most, led the clause)."""
    plane = make_plane(tmp_path / "state.db", Wall())
    for i in range(4):
        plane.submit(job_doc(f"g{i}", gpus=8, duration="10h"))
    for i in range(6):
        plane.submit(job_doc(f"v{i}", "research", "vision", gpus=2, cpu=60, duration="10h"))
    plane.tick()
    plane.tick()
    msgs = [r.message for r in plane.jobs.values() if r.phase == "Pending"]
    fit = [m for m in msgs if "nodes fit" in m]
    assert fit, msgs
    for m in fit:
        assert "0/3 nodes fit: 3 fewer than 8 whole GPUs free" in m, m
        assert "labels do not match" not in m, m


def test_node_side_reasons_are_in_the_users_units(tmp_path: Path) -> None:
    from gpupool.core.placement.plugins.gpu_fit import GpuFit
    from gpupool.core.placement.plugins.gpu_model import GpuModel
    from tests.builders import job, share, whole

    plane = make_plane(tmp_path / "state.db", Wall())
    # the MIG node's CPUs taken by MIG notebooks of 16 CPUs each
    for i in range(5):
        plane.submit(
            job_doc(f"nb{i}", "notebooks", "notebooks", mig="1g.5gb", cpu=16, duration="10h")
        )
    plane.tick()
    waits = [r.message for r in plane.jobs.values() if r.phase == "Pending"]
    assert waits and all("less than 16 CPUs and 16Gi memory free" in m for m in waits), waits
    said = [
        GpuFit().reason(next(job("s", gpu=share(600, 20480)).tasks())),
        GpuFit().reason(next(job("t", gpu=share(125, 5000)).tasks())),
        GpuModel().reason(next(job("w", gpu=whole(2, ["H100"], 81920)).tasks())),
    ]
    assert said == [
        "no GPU with 60% of a card and 20Gi free",
        "no GPU with 12.5% of a card and 5000Mi free",
        "no H100 GPU with 80Gi",
    ]
    for word in ("milli", "MiB", "_mib", "_milli"):
        assert word not in " ".join(waits + said)


def test_a_request_larger_than_any_node_is_refused_in_the_users_units(tmp_path: Path) -> None:
    from tests.e2e.serve_kit import ADMIN, auth, client

    c = client(make_plane(tmp_path / "state.db", Wall()))
    said = {}
    for name, kw in (
        ("cpu", {"cpu": 500}),
        ("memory", {"memory": "5Ti"}),
        ("card", {"gpus": None, "milli": 500, "gpu_memory": "90Gi"}),
    ):
        r = c.post("/api/v1/jobs", json=job_doc(f"x-{name}", **kw), headers=auth(ADMIN))
        assert r.status_code == 422, r.text
        said[name] = r.json()["details"]["rule"]
    assert said == {
        "cpu": "larger than any node (largest has 192 CPUs)",
        "memory": "larger than any node (largest has 2048Gi)",
        "card": "more than any single GPU has (largest: 80Gi)",
    }
