"""Planner benchmark (issue 2): snapshot + plan on a large cluster, single-pod plans, counter
updates, and memory with 10,000 nodes and 100,000 pods loaded; sliced gangs (issue 14) next to
the same gangs unsliced.

    python -m bench.planner [--nodes 10000] [--pods 100000] [--repeat 15]

Prints one line per measurement with the median (and p90) of repeated runs; no timing is
asserted anywhere: these machines are noisy, compare runs side by side.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time
from dataclasses import replace

from extender import topotext
from extender.adapters import kubeobjects as ko
from extender.core.model import GangSpec, Member, PodUsage
from extender.core.placement.planner import NoPlacement, Placement, plan
from extender.core.cluster.state import ClusterState
from extender.settings import DEFAULT_GPU_RESOURCE


def cluster(nodes: int) -> ClusterState:
    # 4 levels: 4 cores x 5 spines x 25 leaves x nvl domains of 4 nodes (10,000 nodes).
    per_leaf = max(nodes // (4 * 5 * 25), 4)
    lines = ["scheme topograph", "gpus 8"]
    count = 0
    for c in range(4):
        lines.append(f"core c{c}")
        for s in range(5):
            lines.append(f"  spine s{s}")
            for leaf in range(25):
                lines.append(f"    leaf l{leaf}")
                for n in range(per_leaf // 4):
                    hosts = " ".join(f"c{c}s{s}l{leaf}n{n}h{h}" for h in range(4))
                    lines.append(f"      nvl n{n}: {hosts}")
                    count += 4
    spec = topotext.parse("\n".join(lines) + "\n")
    facts = [ko.node_facts(n, DEFAULT_GPU_RESOURCE) for n in spec.nodes]
    state = ClusterState(ko.detect_levels(facts).levels)
    for node in facts:
        state.upsert_node(node)
    state.topology
    return state


def timed(fn, repeat: int) -> tuple[float, float]:
    samples = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t)
    samples.sort()
    return statistics.median(samples), samples[int(0.9 * (len(samples) - 1))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--pods", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()

    t = time.perf_counter()
    state = cluster(args.nodes)
    print(f"cluster: {state.node_count} nodes, {len(state.levels)} levels, built in {time.perf_counter() - t:.2f}s")
    names = state.topology.names
    # Existing load: pods of 1 GPU spread over the first nodes (a quarter of the GPUs).
    for i in range(args.pods):
        state.upsert_pod(PodUsage(f"p{i}", names[(i * 7) % (len(names) // 2)], 1 if i % 5 else 0))

    big = GangSpec("ml/big", tuple(Member(f"ml/w{i}", 8, (i,)) for i in range(512)), 512, 60.0)
    one = GangSpec("ml/one", (Member("ml/solo", 8),), 1, 60.0)
    # 64 slices of 8 pods: of 8 GPUs, each slice inside one leaf (20 nodes: 2 slices a leaf);
    # of 4 GPUs, each slice exactly one NVLink domain (4 nodes x 8 GPUs).
    leaf, nvlink = "network.topology.nvidia.com/leaf", "network.topology.nvidia.com/accelerator"
    big_sliced = replace(big, slice_size=8, slice_level=leaf)
    half = GangSpec("ml/half", tuple(Member(f"ml/h{i}", 4, (i,)) for i in range(512)), 512, 60.0)
    half_sliced = replace(half, slice_size=8, slice_level=nvlink)
    # The 64-pod job in 8 NVLink-domain slices inside one leaf (2-GPU pods: a leaf here
    # has 20 nodes, 160 GPUs).
    small = GangSpec("ml/small", tuple(Member(f"ml/s{i}", 2, (i,)) for i in range(64)), 64, 60.0, required=leaf)
    small_sliced = replace(small, slice_size=8, slice_level=nvlink)

    # No leaf (20 nodes) holds 64 pods of 8 GPUs: the reason's numbers come from every leaf.
    wide = replace(small, members=tuple(Member(f"ml/s{i}", 8, (i,)) for i in range(64)))
    wide_sliced = replace(wide, slice_size=4, slice_level=nvlink)

    def planner(gang: GangSpec, feasible: bool = True):
        def run():
            result = plan(gang, state.view())
            if feasible:
                assert isinstance(result, Placement) and (result.slices is not None) == bool(gang.slice_size), result
            else:
                assert isinstance(result, NoPlacement) and (result.slices is not None) == bool(gang.slice_size)
        return run

    big_plan = planner(big)

    def one_plan():
        assert isinstance(plan(one, state.view()), Placement)

    tick = [0]

    def pod_change():
        tick[0] += 1
        state.upsert_pod(PodUsage(f"x{tick[0] % 1000}", names[tick[0] % len(names)], 1 + tick[0] % 2))

    node = ko.node_facts(topotext.parse("core c0\n  spine s0\n    leaf l0\n      nvl n0: c0s0l0n0h0[4]\n").nodes[0],
                         DEFAULT_GPU_RESOURCE)

    changed = [node, replace(node, gpus=node.gpus * 2)]  # a real change each time, not a repeat

    def node_change():
        tick[0] += 1
        state.upsert_node(changed[tick[0] % 2])

    rows = [
        ("view + plan, 512 pods x 8 GPUs", timed(big_plan, args.repeat), 20e-3),
        ("  the same in 64 slices of 8 in a leaf", timed(planner(big_sliced), args.repeat), 20e-3),
        ("view + plan, 512 pods x 4 GPUs", timed(planner(half), args.repeat), 20e-3),
        ("  the same in 64 slices of 8 in an nvlink", timed(planner(half_sliced), args.repeat), 20e-3),
        ("view + plan, 64 pods x 2 GPUs in a leaf", timed(planner(small), args.repeat), 20e-3),
        ("  the same in 8 slices of 8 in an nvlink", timed(planner(small_sliced), args.repeat), 20e-3),
        ("no leaf holds 64 pods x 8 GPUs: the reason", timed(planner(wide, False), args.repeat), 20e-3),
        ("  the same in 16 slices of 4 in an nvlink", timed(planner(wide_sliced, False), args.repeat), 20e-3),
        ("view + plan, 1 pod x 8 GPUs", timed(one_plan, args.repeat * 20), 0.2e-3),
        ("apply one pod change", timed(pod_change, args.repeat * 200), 50e-6),
        ("apply one node change (capacity)", timed(node_change, args.repeat * 200), 50e-6),
    ]
    for label, (median, p90), target in rows:
        print(f"{label:42s} median {median * 1e3:8.3f} ms  p90 {p90 * 1e3:8.3f} ms  (target {target * 1e3:g} ms)")
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{'max RSS with nodes + pods loaded':42s} {rss:8.0f} MB  (target 300 MB)")


if __name__ == "__main__":
    main()
