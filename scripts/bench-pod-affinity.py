"""Cost of pod affinity, anti-affinity and topology spread in placement, in the core alone.

Makes ``--nodes`` nodes of 8 cards in ``--zones`` zones, counts ``--pods`` pods of other
schedulers on them (``--apps`` distinct app labels, one in ten with hostname anti-affinity
to its own app), then places ``--tasks`` one-card tasks one by one into one snapshot, as a
cycle does: once with no pod rules, once with each task keeping away from pods of its app
per node (required anti-affinity) and spread over zones (maxSkew 1). Prints one JSON object
with the microseconds per task of each and whether every rule holds after placement.
Run from the repository root:

    PYTHONPATH=src python scripts/bench-pod-affinity.py --nodes 1000 --pods 10000 --tasks 2000
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from dataclasses import replace

from gpupool.core import ClusterState, default_profile, place_job
from gpupool.core.affinity import LabelSelector, PodAffinityTerm, PodMeta, SpreadConstraint
from gpupool.core.model import GpuRequest, Job, JobId, Node, NodeName, PodSet
from tests.builders import gpus

HOST = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"


def build(args: argparse.Namespace) -> ClusterState:
    nodes = [
        Node(
            NodeName(f"n{i:05d}"),
            256_000,
            2_048_000,
            gpus(8),
            labels={HOST: f"n{i:05d}", ZONE: f"z{i % args.zones}"},
        )
        for i in range(args.nodes)
    ]
    state = ClusterState(nodes)
    for k in range(args.pods):
        app = f"app{k % args.apps}"
        anti = (
            (PodAffinityTerm(HOST, LabelSelector((("app", app),)), frozenset({"ns"})),)
            if k % 10 == 0
            else ()
        )
        state.set_pod(
            f"ns/p{k}",
            NodeName(f"n{(k * 7919) % args.nodes:05d}"),
            PodMeta("ns", {"app": app}, anti),
        )
    return state


def jobs(args: argparse.Namespace, rules: bool) -> list[Job]:
    out = []
    for i in range(args.tasks):
        app = f"mine{i % 50}"
        sel = LabelSelector((("app", app),))
        ps = PodSet("ps0", 1, 1000, 1024, GpuRequest(count=1), pod=PodMeta("ns", {"app": app}))
        if rules:
            ps = replace(
                ps,
                pod_anti_affinity=(PodAffinityTerm(HOST, sel, frozenset({"ns"})),),
                spread=(SpreadConstraint(1, ZONE, sel),),
            )
        out.append(Job(JobId(f"j{i}"), (ps,)))
    return out


def run(args: argparse.Namespace, rules: bool) -> dict[str, object]:
    state = build(args)
    snap = state.snapshot()
    profile = default_profile()
    placed = []
    t0 = time.perf_counter()
    for job in jobs(args, rules):
        placements, _ = place_job(job, snap, profile)
        for p in placements:
            snap.assume(p)
            placed.append((job.pod_sets[0].pod.labels["app"], p.node))
    took = time.perf_counter() - t0
    per_node = Counter(placed)
    zones: dict[str, Counter[str]] = {}
    for app, node in placed:
        zones.setdefault(app, Counter())[state.node(node).labels[ZONE]] += 1
    skew = max(
        (max(c.values()) - (min(c.values()) if len(c) == args.zones else 0)) for c in zones.values()
    )
    return {
        "rules": rules,
        "tasks": args.tasks,
        "placed": len(placed),
        "us_per_task": round(1e6 * took / args.tasks, 1),
        "max_same_app_per_node": max(per_node.values()),
        "max_zone_skew": skew,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--zones", type=int, default=10)
    ap.add_argument("--pods", type=int, default=10000)
    ap.add_argument("--apps", type=int, default=200)
    ap.add_argument("--tasks", type=int, default=2000)
    args = ap.parse_args()
    print(json.dumps([run(args, False), run(args, True)]))


if __name__ == "__main__":
    main()
