"""``python -m bench run``: a scenario's arms in sequence, then results.json, report.md, plots."""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench.harness import analysis, arms as arms_mod, report, runner, scenario as scenario_mod, workload
from extender import topotext
from extender.localcluster import binaries
from extender.localcluster.errors import ClusterError

NOTES = [
    "Each arm runs on its own fresh cluster of the same shape (etcd, kube-apiserver, kube-scheduler "
    "at the version on the `kubernetes` line (v1.37.2 unless `--kubernetes-version`), kwok v0.7.0 on 127.0.0.1), one after another; the same seeded job stream is submitted to each. "
    "With several runs the arms are interleaved (run 1's arms, then run 2's, ...) and every number shown "
    "is the median over the runs.",
    "Pods are created by this Python harness from 16 threads; for burst workloads the creation rate "
    "(`pod_creation_pods_per_s`) can cap the scheduling throughput of every arm alike.",
    "Bound/finished times are when the harness's watch saw them (same delay in every arm). "
    "Partial-gang exposure therefore includes the spread of a gang's Binding writes as observed.",
    "kwok starts a pod's simulated runtime when it is Running, member by member: a partial gang's "
    "members finish and free their GPUs in the simulation, where a real job would hold them at a barrier.",
    "Arm A has no gang semantics and no topology request (plain kube-scheduler); the same pods carry "
    "railyard's labels and annotations, inert without the extender. Arm C gets only the required "
    "level (KEP-5732 has no preferred level); gangs with a preferred or no request get a PodGroup "
    "with gang.minCount and no topology constraint.",
    "Arm D: Kueue v0.17.0 (TopologyAwareScheduling on, its default) admits every pod (single pods are "
    "one-pod workloads) through one ClusterQueue whose GPU quota is the whole cluster, so TAS capacity "
    "decides, not quota; its Topology is block > leaf > NVLink > hostname, so Kueue chooses each pod's "
    "node and kube-scheduler (default configuration, as A) binds it there (nodeSelector). Required and "
    "preferred levels map to Kueue's podset-required-topology / podset-preferred-topology (preferred: "
    "Kueue starts at that level and goes up, spreading at the top if nothing holds the gang); no request "
    "gets no annotation (Kueue then places the gang unconstrained); ranks are "
    "kueue.x-k8s.io/pod-group-pod-index. A Kueue pod group's Workload exists only once all its members do.",
    "The narrowest-domain share and domain counts are computed from node labels and observed "
    "bindings only (bench/harness/analysis.py), not with railyard's planner; free GPUs do not "
    "see reservations or pods held at bind, so a gang placed wider because a narrower domain was "
    "reserved for another gang counts against its scheduler.",
    "The railyard verb latency percentiles come from its Prometheus histogram (buckets 50 us .. 10 s, "
    "linear inside a bucket, as histogram_quantile); bind includes the time a call is held at the gang gate.",
    "CPU ms per pod: each process's utime+stime from /proc/<pid>/stat (all threads) between kube-scheduler's "
    "resume (t0 when not paused) and the first 0.25 s poll after the last binding, over the pods bound "
    "then; `machine` is all cores' busy time from /proc/stat and `other` what none of the cluster's "
    "processes nor this harness spent (other work on the shared machine). The process-only ratio "
    "compares the sum of the sampled processes' CPU per pod, so that other work cancels out.",
    "Context switches per pod: voluntary_ctxt_switches and nonvoluntary_ctxt_switches of every thread "
    "(/proc/<pid>/task/<tid>/status; /proc/<pid>/status alone counts the main thread) over the same window, "
    "thread by thread (threads that exited in the window are not counted).",
    "Scheduling attempts: kube-scheduler's scheduler_schedule_attempts_total, labelled by result and "
    "profile, not by pod: per gang member from the profile the gang members name (railyard, in every "
    "arm but D, where gang members and single pods share the default profile: only the all-pods figure).",
]

REPO = Path(__file__).resolve().parents[2]


def git_state(repo: Path = REPO) -> dict[str, object]:
    """The commit measured and whether the work tree differed from it (``git status``)."""
    def git(*args: str) -> str | None:
        try:
            return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                                  timeout=30, check=True).stdout
        except (OSError, subprocess.SubprocessError):
            return None

    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain")
    changed = [ln[3:] for ln in (status or "").splitlines() if ln.strip()]
    return {"commit": commit.strip() if commit else None,
            "dirty": None if status is None else bool(changed), "changed": changed[:20]}


def _loadavg() -> list[float] | None:
    return [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None


def _machine() -> str:
    mem = ""
    try:
        kb = int(next(ln for ln in open("/proc/meminfo") if ln.startswith("MemTotal")).split()[1])
        mem = f", {kb / 1024 / 1024:.0f} GiB RAM"
    except (OSError, StopIteration, ValueError):
        pass
    cpu = platform.processor() or platform.machine()
    try:
        cpu = next(ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return (f"{os.cpu_count()} cores ({cpu}){mem}, {platform.system()} {platform.release()}, "
            f"Python {platform.python_version()}; load average {load:.1f} at start (shared machine)")


def main(args: argparse.Namespace, argv: list[str]) -> int:
    try:
        scn = scenario_mod.load(args.scenario, args.quick)
    except scenario_mod.ScenarioError as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return 2
    try:  # an unpinned version is refused before anything starts
        kubernetes = binaries.kubernetes_components(args.kubernetes_version)[0].version()
    except ClusterError as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return 2
    arm_names = list(scn.arms)
    if args.arms:
        wanted = [a.strip().upper() for a in args.arms.split(",") if a.strip()]
        unknown = [a for a in wanted if a not in arms_mod.ARMS]
        if unknown:
            print(f"bench: unknown arm(s) {', '.join(unknown)} (known: {', '.join(arms_mod.ARMS)})", file=sys.stderr)
            return 2
        arm_names = wanted
    count = args.runs if args.runs is not None else (1 if args.quick else 3)
    if count < 1:
        print(f"bench: --runs must be at least 1, not {count}", file=sys.stderr)
        return 2
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    meta_date = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    machine = _machine()
    git = git_state()
    load_start = _loadavg()

    spec = topotext.load(scn.topology_text)
    nodes = spec.nodes
    jobs = workload.generate(scn.workload, nodes, scn.seed)
    (out / "topology.txt").write_text(topotext.generate(**_gen(scn.topology_text))
                                      if "\n" not in scn.topology_text else scn.topology_text)
    (out / "jobs.json").write_text(json.dumps([asdict(j) for j in jobs], indent=1))
    gpus = sum(int(n["status"]["allocatable"]["nvidia.com/gpu"]) for n in nodes)
    print(f"bench: scenario {scn.name} ({scn.mode}): {len(nodes)} nodes, {gpus} GPUs, {len(jobs)} jobs, "
          f"{sum(j.pods for j in jobs)} pods; arms {','.join(arm_names)}", file=sys.stderr)

    notes = list(NOTES)
    runs = []
    for k in range(1, count + 1):
        run_dir = out if count == 1 else out / f"run-{k}"
        run_meta: dict[str, Any] = {"run": k, "dir": "." if count == 1 else run_dir.name,
                                    "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
                                    "load_average": {"start": _loadavg()}}
        results, series, skipped = {}, {}, {}
        for name in arm_names:
            arm = arms_mod.ARMS[name]
            tag = name if count == 1 else f"{name} run {k}/{count}"
            try:
                result = runner.run_arm(arm, jobs, scn.topology_text, scn.workload, run_dir / f"arm-{name}" / "cluster",
                                        kubernetes_version=args.kubernetes_version)
            except ClusterError as exc:
                skipped[name] = f"failed: {exc}"
                print(f"bench[{tag}]: {exc}", file=sys.stderr)
                continue
            runner.save(result, run_dir / f"arm-{name}")
            results[name], series[name] = analysis.analyse(result, jobs, nodes, scn.workload)
            notes += [f"arm {tag}: {n}" for n in result.notes]
        run_meta["load_average"]["end"] = _loadavg()
        runs.append({"meta": run_meta, "arms": results, "series": series, "skipped": skipped})

    meta = {
        "scenario": scn.name, "mode": scn.mode, "seed": scn.seed,
        "command": shlex.join(argv), "date": meta_date, "machine": machine, "git": git,
        "load_average": {"start": load_start, "end": _loadavg(), "what": "1, 5, 15-minute load averages"},
        "description": scn.description,
        "kubernetes": kubernetes,
        "kwok": binaries.KWOK.version(), "etcd": binaries.ETCD.version(),
        "topology": {"spec": scn.topology_text if "\n" not in scn.topology_text else "topology.txt",
                     "nodes": len(nodes), "gpus": gpus},
        "workload": {"jobs": len(jobs), "pods": sum(j.pods for j in jobs),
                     "gangs": sum(j.kind == "gang" for j in jobs), **{k: v for k, v in scn.workload.items()
                                                                       if not isinstance(v, (list, dict))}},
        "arm_titles": {a: arms_mod.ARMS[a].title for a in arm_names},
        "wall_s": round(time.monotonic() - started, 1),
        "notes": notes,
    }
    (out / "run.json").write_text(json.dumps({"scenario": str(scn.source), "quick": args.quick, "meta": meta,
                                               "runs": [{"meta": r["meta"], "skipped": r["skipped"]} for r in runs]},
                                              indent=2))
    doc = report.write(out, meta, runs)
    print(report.table(doc), file=sys.stderr)
    print(f"bench: wrote {out}/results.json, report.md and plots in {meta['wall_s']:.0f}s", file=sys.stderr)
    return 0 if any(r["arms"] for r in runs) else 1


def _gen(line: str) -> dict:
    args = dict(w.split("=", 1) for w in line.split())
    return {k: (v if k == "scheme" else int(v)) for k, v in args.items()}


def rereport(out: Path) -> int:
    """Analyse an output directory again from its saved files (pods.json, metrics, jobs.json)."""
    saved = json.loads((out / "run.json").read_text())
    scn = scenario_mod.load(saved["scenario"], saved["quick"])
    nodes = topotext.load(scn.topology_text).nodes
    jobs = [workload.Job(**j) for j in json.loads((out / "jobs.json").read_text())]
    # Directories from before issue 21 hold one run, its arms in DIR itself.
    saved_runs = saved.get("runs") or [{"meta": {"run": 1, "dir": ".", "date": saved["meta"]["date"],
                                                 "load_average": saved["meta"].get("load_average")},
                                        "skipped": saved.get("skipped") or {}}]
    runs = []
    for run in saved_runs:
        results, series = {}, {}
        for arm_dir in sorted((out / run["meta"]["dir"]).glob("arm-*")):
            name = arm_dir.name.removeprefix("arm-")
            if not (arm_dir / "pods.json").exists():
                continue
            result = runner.load(arm_dir, name)
            results[name], series[name] = analysis.analyse(result, jobs, nodes, scn.workload)
        runs.append({**run, "arms": results, "series": series})
    # Titles as the harness words them now (an old one may name a version the run did not use).
    titles = saved["meta"]["arm_titles"]
    saved["meta"]["arm_titles"] = {a: arms_mod.ARMS[a].title if a in arms_mod.ARMS else t for a, t in titles.items()}
    doc = report.write(out, saved["meta"], runs)
    print(report.table(doc), file=sys.stderr)
    return 0
