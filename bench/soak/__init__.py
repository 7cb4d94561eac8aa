"""``python -m bench run --scenario soak --out DIR [--duration 1h] [--quick]`` (issue 25 item 1):
does railyard stay flat under long load? See bench/README.md, "soak".

Modules::

    drive    the cluster, the load (gangs, lone pods, cordons, restarts), a sample every few seconds
    sample   one sample of the extender: /proc and its /metrics
    stats    slopes per hour within restarts, their noise bound, verb percentiles per window (pure)
    report   verdicts against the scenario's bounds, results.json, samples.jsonl, soak.png

The gang checks (every gang bound whole, none deadlocked) are the harness's own
(``bench/harness/analysis.py``) on the pods the watch saw.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import shlex
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import yaml

from bench.harness import analysis, run as run_mod, runner, scenario as scenario_mod, workload as workload_mod
from extender import topotext

#: The gang numbers of ``analysis.analyse`` a soak reports.
GANG_KEYS = ("gangs", "pods", "deadlocked_gangs", "gang_time_to_bind_s", "gang_bind_spread_s",
             "partial_gang_pod_seconds", "narrowest_domain_fraction", "utilization_mean")


#: The workload keys the analysis reads, kept in results.json so ``rereport`` fits the same way.
ANALYSIS_KEYS = ("warmup_s", "latency_window_s", "bounds")


def rereport(out: Path) -> int:
    """Fit a finished soak's samples again (``python -m bench report --out DIR``): after a
    change to the analysis, or with other bounds in results.json's ``analysis``."""
    from bench.soak import report

    doc = json.loads((out / "results.json").read_text())
    with gzip.open(out / "samples.jsonl.gz", "rt") as f:
        samples = [json.loads(line) for line in f]
    pods = out / "arm-B" / "pods.json"
    if pods.exists() or pods.with_suffix(".json.gz").exists():
        text = pods.read_text() if pods.exists() else gzip.decompress(pods.with_suffix(".json.gz").read_bytes())
        samples = report.with_outside(samples, json.loads(text))
    workload = {**scenario_mod.load(doc["scenario"], doc["mode"] == "quick").workload, **doc.get("analysis", {})}
    doc["analysis"] = {k: workload[k] for k in ANALYSIS_KEYS if k in workload}
    doc = report.write(out, doc, report.analyse(samples, workload), samples, doc["restarts"],
                       float(doc["load"]["duration_s"]))
    print(report.table(doc), file=sys.stderr)
    return 0


def is_soak(name_or_path: str) -> bool:
    """True for a scenario file with ``kind: soak``."""
    path = Path(name_or_path)
    if not path.is_file():
        path = scenario_mod.SCENARIO_DIR / f"{name_or_path}.yaml"
    try:
        return (yaml.safe_load(path.read_text()) or {}).get("kind") == "soak"
    except (OSError, yaml.YAMLError, AttributeError):
        return False


def parse_duration(text: str) -> float:
    """``3600``, ``3600s``, ``60m``, ``1h``, ``1.5h`` -> seconds."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*", text)
    if not m or float(m.group(1)) <= 0:
        raise ValueError(f"--duration {text!r}: expected a positive number of seconds, or e.g. 300s, 60m, 1h")
    return float(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[m.group(2)]


def main(args: argparse.Namespace, argv: list[str]) -> int:
    from bench.soak import drive, report

    try:
        scn = scenario_mod.load(args.scenario, args.quick)
        duration = parse_duration(args.duration) if args.duration else float(scn.workload["duration_s"])
    except (scenario_mod.ScenarioError, ValueError, KeyError) as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return 2
    if args.arms and args.arms.strip().upper() != "B":
        print("bench: the soak runs arm B (railyard) only", file=sys.stderr)
        return 2
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    workload = drive.scaled(scn.workload, duration)
    nodes = topotext.load(scn.topology_text).nodes
    jobs = workload_mod.generate(workload, nodes, scn.seed)
    gpus = sum(int(n["status"]["allocatable"]["nvidia.com/gpu"]) for n in nodes)
    meta: dict[str, Any] = {
        "scenario": scn.name, "mode": scn.mode, "seed": scn.seed, "command": shlex.join(argv),
        "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "machine": run_mod._machine(),
        "git": run_mod.git_state(), "load_average": {"start": run_mod._loadavg()},
        "kubernetes": "v1.37.2", "kwok": "v0.7.0", "etcd": "v3.6.16", "arm": drive.ARM.title}
    load: dict[str, Any] = {
        "duration_s": duration, "nodes": len(nodes), "gpus": gpus,
        "gangs": sum(j.kind == "gang" for j in jobs), "single_pods": sum(j.kind == "single" for j in jobs),
        "pods": sum(j.pods for j in jobs),
        **{k: workload[k] for k in ("sample_s", "warmup_s", "latency_window_s", "delete_finished_after_s",
                                    "cordon", "restarts_at") if k in workload}}
    print(f"bench: soak ({scn.mode}) for {duration:.0f}s: {len(nodes)} nodes, {gpus} GPUs, {load['gangs']} gangs "
          f"and {load['single_pods']} lone pods ({load['pods']} pods)", file=sys.stderr)
    started = time.monotonic()
    seen = drive.run(jobs, scn.topology_text, workload, scn.seed, out / "cluster", sys.stderr)
    assert seen.result is not None
    runner.save(seen.result, out / "arm-B")
    gang_out, _ = analysis.analyse(seen.result, jobs, nodes, workload)
    samples = report.with_outside(seen.samples, [asdict(r) for r in seen.result.pods.values()])
    analysed = report.analyse(samples, workload)
    meta.update(
        load={**load, "cordons": seen.cordons, "pods_deleted": seen.deleted, "delete_errors": seen.delete_errors},
        restarts=seen.restarts, samples=len(seen.samples), missed_samples=seen.missed_samples,
        cluster_up_s=round(seen.cluster_up_s, 1), observed_s=round(seen.result.end, 1),
        stop_reason=seen.result.stop_reason, wall_s=round(time.monotonic() - started, 1),
        **{k: gang_out[k] for k in GANG_KEYS},
        notes=seen.result.notes + [
            "Slopes are least squares within each extender process (one intercept per process between "
            "restarts, one common slope), after each process's first warmup_s, over the samples taken "
            "while the load ran; noise_per_h is two standard errors widened for lag-1 autocorrelation. "
            "flat: slope + noise under the bound; grows: slope - noise over it; unclear: neither.",
            "Verb p99 per latency_window_s from the difference of railyard's cumulative histogram "
            "(buckets 50 us .. 10 s, linear inside a bucket); bind includes the time a member is held "
            "at the gang gate, so its p99 follows how long gangs wait for room."])
    meta["load_average"]["end"] = run_mod._loadavg()
    meta["analysis"] = {k: workload[k] for k in ANALYSIS_KEYS if k in workload}
    doc = report.write(out, meta, analysed, samples, seen.restarts, duration)
    print(report.table(doc), file=sys.stderr)
    g = doc["gangs"]
    print(f"bench: gangs bound whole {g['bound_whole']}/{g['total']}, partly bound {g['partly_bound']}, "
          f"deadlocked {doc['deadlocked_gangs']}; wrote {out}/results.json, samples.jsonl, soak.png", file=sys.stderr)
    return 0
