"""Pending reasons speak of the flavors the job may use only, in the user's units: an A6000 job
waiting at quota in queue serving (flavors t4 and a6000) is told about a6000, not t4."""

from __future__ import annotations

from pathlib import Path

from tests.e2e.serve_kit import Wall, job_doc, make_plane


def test_a_reason_leaves_out_flavors_the_job_cannot_use(tmp_path: Path) -> None:
    plane = make_plane(tmp_path / "state.db", Wall())
    plane.submit(job_doc("holder", "serving", "serving", gpus=1, models=["RTX-A6000"],
                         duration="10h"))
    plane.tick()
    plane.submit(job_doc("waits", "serving", "serving", gpus=4, models=["RTX-A6000"]))
    plane.tick()
    rec = plane.job("serving/waits")
    assert rec.phase == "Pending"
    assert "queue serving at quota for a6000 GPUs (1/4 GPUs used, 4 asked" in rec.message
    assert "t4" not in rec.message, rec.message


def test_usable_only_keeps_the_clauses_of_usable_flavors() -> None:
    from gpupool.control.reasons import usable_only

    msg = ("queue llm at quota for h100 GPUs (16/12 GPUs used, 8 asked, 0 available with "
           "borrowing); queue llm at quota for a100 GPUs (12.6/8 GPUs used, 8 asked, 2.4 "
           "available with borrowing); a100-mig: 0/1 nodes fit: no MIG 1g.5gb free")
    flavors = ["h100", "a100", "a100-mig", "cpu"]
    assert usable_only(msg, {"a100"}, flavors) == (
        "queue llm at quota for a100 GPUs (12.6/8 GPUs used, 8 asked, 2.4 available with "
        "borrowing)")
    assert usable_only(msg, {"a100-mig"}, flavors) == "a100-mig: 0/1 nodes fit: no MIG " \
        "1g.5gb free"
    assert usable_only(msg, set(), flavors) == msg  # nothing would be left: kept whole
    assert usable_only("waiting behind gang x", {"a100"}, flavors) == "waiting behind gang x"


def test_quota_clauses_are_in_the_users_units() -> None:
    from gpupool.core.admission import _describe_short
    from gpupool.core.quota import Resource

    cpu = _describe_short("q", ("f", Resource.CPU_MILLI), 4000, 8000, 6000, 4000)
    assert cpu == "queue q at quota for f CPU (4/8 CPUs used, 6 asked, 4 available with " \
                  "borrowing)"
    mem = _describe_short("q", ("f", Resource.GPU_MEMORY_MIB), 1024, 2048, 4096, 1024)
    assert mem.startswith("queue q at quota for f GPU memory (1Gi/2Gi used, 4Gi asked")
    assert "_mib" not in mem and "_milli" not in cpu
