"""Hypothesis strategies: random clusters and job streams."""

from __future__ import annotations

from hypothesis import strategies as st

from gpupool.core import Gpu, GpuRequest, Job, JobId, MigInstance, Node, NodeName, PodSet

MODELS = ("A100", "T4", "H100")


@st.composite
def gpu_cards(draw: st.DrawFn, count: int) -> tuple[Gpu, ...]:
    model = draw(st.sampled_from(MODELS))
    mem = draw(st.sampled_from((16384, 40960, 81920)))
    migged = draw(st.booleans()) and count <= 2
    cards = []
    for i in range(count):
        mig = (MigInstance("1g.10gb", draw(st.integers(1, 7)), 140, 10240),) if migged else ()
        cards.append(
            Gpu(
                i,
                model,
                mem,
                healthy=draw(st.integers(0, 9)) > 0,
                mig=mig,
                nvlink_peers=tuple(j for j in range(count) if j != i)
                if draw(st.booleans())
                else (),
                max_holders=draw(st.sampled_from((0, 0, 1, 2, 3, 10))),
            )
        )
    return tuple(cards)


@st.composite
def clusters(draw: st.DrawFn, max_nodes: int = 6) -> list[Node]:
    n = draw(st.integers(1, max_nodes))
    nodes = []
    for i in range(n):
        count = draw(st.sampled_from((0, 1, 2, 4, 8)))
        nodes.append(
            Node(
                NodeName(f"n{i}"),
                cpu_milli=draw(st.sampled_from((8000, 32000, 96000))),
                memory_mib=draw(st.sampled_from((32768, 262144))),
                gpus=draw(gpu_cards(count)),
                labels={"zone": draw(st.sampled_from("ab"))},
                schedulable=draw(st.integers(0, 9)) > 0,
            )
        )
    return nodes


@st.composite
def gpu_requests(draw: st.DrawFn) -> GpuRequest:
    kind = draw(st.sampled_from(("none", "whole", "slice", "slice", "mig")))
    models = frozenset(draw(st.sets(st.sampled_from(MODELS), max_size=1)))
    if kind == "whole":
        return GpuRequest(count=draw(st.sampled_from((1, 1, 2, 4, 8))), models=models)
    if kind == "slice":
        return GpuRequest(
            gpu_milli=draw(st.sampled_from((0, 1, 100, 300, 500, 999))),
            memory_mib=draw(st.sampled_from((0, 1024, 8000, 20000))),
            models=models,
            cards=draw(st.sampled_from((1, 1, 2, 3))),
            memory_percent=draw(st.sampled_from((0, 0, 10, 25, 50, 100))),
        )
    if kind == "mig":
        return GpuRequest(mig_profile="1g.10gb")
    return GpuRequest()


@st.composite
def jobs(draw: st.DrawFn, i: int) -> Job:
    tasks = draw(st.integers(1, 4))
    gang = draw(st.one_of(st.none(), st.integers(1, tasks)))
    return Job(
        id=JobId(f"j{i}"),
        pod_sets=(
            PodSet(
                "w",
                count=tasks,
                cpu_milli=draw(st.sampled_from((0, 1000, 4000))),
                memory_mib=draw(st.sampled_from((0, 2048, 16384))),
                gpu=draw(gpu_requests()),
                node_selector=draw(st.sampled_from(({}, {}, {"zone": "a"}))),
            ),
        ),
        min_member=gang,
    )


@st.composite
def job_streams(draw: st.DrawFn, max_jobs: int = 12) -> list[Job]:
    n = draw(st.integers(1, max_jobs))
    return [draw(jobs(i)) for i in range(n)]
