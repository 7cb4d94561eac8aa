"""results.json, report.md and the PNG plots of one run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.harness import pergang, preemption, runs as runs_mod

ARM_COLORS = {"A": "tab:gray", "A100": "black", "AREF": "tab:olive", "B": "tab:blue", "B100": "tab:cyan", "C": "tab:orange",
              "D": "tab:green"}
#: Processes whose CPU per pod the decomposition compares (keys of ``cpu_ms_per_pod``).
CLUSTER_PROCESSES = ("kube-scheduler", "kube-apiserver", "etcd", "kwok", "railyard")
#: The steps of issue 13's decomposition: (from arm, to arm, what the step adds).
STEPS = (
    ("A", "A100", "scoring every feasible node (percentageOfNodesToScore default -> 100)"),
    ("A100", "B100", "the extender, every node scored: HTTP round trips + railyard's own work"),
    ("A", "B", "the extender, single pods on kube-scheduler's sample (profile railyard-sampled)"),
    ("A100", "B", "the extender and the sampled profile for single pods"),
    ("A", "AREF", "the reference profiles alone: best fit on GPUs, single pods on railyard-sampled, no extender"),
    ("AREF", "B", "railyard beside the same profiles (its watch, the admission policy, gang members' verbs)"),
)
LEVEL_ORDER = ("host", "nvl", "leaf", "block", "cluster")


#: Throughput ratios: (key, arm, baseline arm). Each has a process-only twin (``process_only_*``).
RATIO_PAIRS = (
    ("throughput_railyard_vs_default", "B", "A"),
    ("throughput_score_all_vs_default", "A100", "A"),
    ("throughput_railyard_vs_score_all", "B", "A100"),
    ("throughput_railyard_every_node_vs_score_all", "B100", "A100"),
    ("throughput_railyard_vs_reference_profiles", "B", "AREF"),
)


def ratios(arms: dict[str, dict[str, Any]]) -> dict[str, float | None]:
    """The throughput ratios, raw (average pods/s, arm over baseline) and process-only (issue 21):
    the baseline's process CPU per pod over the arm's (``process_cpu_ms_per_pod``: etcd, API
    server, scheduler, kwok, railyard or Kueue and this harness; the other work on the machine
    is not in it, so it cancels out where the raw ratio takes it in); and the gang time-to-bind
    p99, B over C."""
    def get(arm: str, *keys: str) -> float | None:
        value: Any = arms.get(arm)
        for k in keys:
            if not isinstance(value, dict):
                return None
            value = value.get(k)
        return value if isinstance(value, (int, float)) else None

    out: dict[str, float | None] = {}
    for key, arm, base in RATIO_PAIRS:
        t, tb = get(arm, "throughput_pods_per_s", "avg"), get(base, "throughput_pods_per_s", "avg")
        c, cb = get(arm, "process_cpu_ms_per_pod"), get(base, "process_cpu_ms_per_pod")
        out[key] = round(t / tb, 3) if t and tb else None
        out[key.replace("throughput_", "process_only_", 1)] = round(cb / c, 3) if c and cb else None
    pb, pc = get("B", "gang_time_to_bind_s", "p99"), get("C", "gang_time_to_bind_s", "p99")
    out["time_to_bind_p99_railyard_vs_native"] = round(pb / pc, 3) if pb is not None and pc else None
    return out


def decomposition(arms: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Issue 13: what each step from A to B costs per scheduled pod, for the steps whose two
    arms both ran. Wall ms per pod is 1000 / average throughput (the scheduling loop places
    pods one at a time, so this is its per-pod time); CPU ms per pod is per process, from
    ``cpu_ms_per_pod``; ``added`` = the second arm's value minus the first's (a process the first
    arm does not run counts 0 there). ``railyard_handlers_ms_per_pod`` (A100 -> B and A -> B):
    time inside railyard's filter and prioritize handlers per pod, from its histogram sums: the
    part of the extender's wall time on the scheduling loop's path that is railyard's code;
    ``round_trip_and_wait_ms_per_pod`` = the added wall time minus that (HTTP, JSON on both
    sides, waiting for a core)."""
    rows = []
    for first, second, what in STEPS:
        x, y = arms.get(first) or {}, arms.get(second) or {}
        tx = (x.get("throughput_pods_per_s") or {}).get("avg")
        ty = (y.get("throughput_pods_per_s") or {}).get("avg")
        if not tx or not ty:
            continue
        wall = {"from": round(1000 / tx, 3), "to": round(1000 / ty, 3), "added": round(1000 / ty - 1000 / tx, 3)}
        cx, cy = x.get("cpu_ms_per_pod"), y.get("cpu_ms_per_pod")
        cpu_added = None
        if cx is not None and cy is not None:
            cpu_added = {k: round(cy.get(k, 0.0) - cx.get(k, 0.0), 3) for k in CLUSTER_PROCESSES
                         if k in cx or k in cy}
            cpu_added["all processes"] = round(sum(cpu_added.values()), 3)
        row = {"step": f"{first} -> {second}", "what": what, "throughput_ratio": round(ty / tx, 3),
               "wall_ms_per_pod": wall, "cpu_ms_per_pod_added": cpu_added}
        handlers = y.get("extender_verb_ms_per_pod") if not x.get("extender_verb_ms_per_pod") else None
        if handlers and handlers.get("filter") is not None:
            inside = (handlers.get("filter") or 0.0) + (handlers.get("prioritize") or 0.0)
            row["railyard_handlers_ms_per_pod"] = round(inside, 3)
            row["round_trip_and_wait_ms_per_pod"] = round(wall["added"] - inside, 3)
        rows.append(row)
    return rows


def targets(arms: dict[str, dict[str, Any]], ratio: dict[str, float | None]) -> list[dict[str, Any]]:
    """The issue's targets, each with the measured value and whether it was met (None = not measured)."""
    b, c = arms.get("B") or {}, arms.get("C") or {}
    out = []

    def add(name: str, measured: Any, target: str, met: bool | None, shortfall: str = "") -> None:
        out.append({"target": name, "goal": target, "measured": measured, "met": met, "shortfall": shortfall})

    r = ratio["throughput_railyard_vs_default"]
    add("throughput ratio B/A", r, ">= 0.8", None if r is None else r >= 0.8,
        "" if r is None or r >= 0.8 else f"{(0.8 - r) / 0.8:.0%} below")
    f99 = ((b.get("extender_verb_ms") or {}).get("filter") or {}).get("p99")
    add("railyard filter p99 (ms)", f99, "<= 1.5", None if f99 is None else f99 <= 1.5,
        "" if f99 is None or f99 <= 1.5 else f"{f99 / 1.5:.1f}x the target")
    pe = b.get("partial_gang_pod_seconds")
    add("partial-gang exposure B (pod-s)", pe, "0", None if pe is None else pe == 0,
        "" if not pe else f"{pe} pod-s (the spread of the gang's Binding POSTs as the watch saw them)")
    dl = b.get("deadlocked_gangs")
    add("deadlocked gangs B", dl, "0", None if dl is None else dl == 0)
    nb, nc = b.get("narrowest_domain_fraction"), c.get("narrowest_domain_fraction")
    met = None if nb is None or nc is None else nb >= nc
    add("narrowest-domain share B vs C", [nb, nc], "B >= C", met,
        "" if nb is None or nc is None or nb >= nc else f"{nc - nb:.3f} below C")
    t = ratio["time_to_bind_p99_railyard_vs_native"]
    add("gang time-to-bind p99 B/C", t, "<= 1.2", None if t is None else t <= 1.2,
        "" if t is None or t <= 1.2 else f"{t / 1.2:.2f}x the allowance")
    p = ratio["process_only_railyard_vs_default"]
    add("process-only throughput B/A (issue 21)", p, ">= 0.95", None if p is None else p >= 0.95,
        "" if p is None or p >= 0.95 else f"{(0.95 - p) / 0.95:.0%} below")
    add("railyard filter p99 (ms; issue 21, cores not saturated)", f99, "<= 2", None if f99 is None else f99 <= 2,
        "" if f99 is None or f99 <= 2 else f"{f99 / 2:.1f}x the target")
    ab, ac = ((x.get("scheduler_attempts_per_gang_member") or {}).get("unschedulable") for x in (b, c))
    add("unschedulable attempts per gang member B vs C (issue 21)", [ab, ac], "B <= C",
        None if ab is None or ac is None else ab <= ac,
        "" if ab is None or ac is None or ab <= ac else f"{ab - ac:g} more per member")
    return out


def write(out_dir: Path, meta: dict[str, Any], runs: list[dict[str, Any]]) -> dict[str, Any]:
    """results.json, report.md and the plots of ``runs``, in the order they ran: each
    ``{"meta": {"run", "dir", "date", "load_average"}, "arms": {arm: analysis}, "series":
    {arm: plot series}, "skipped": {arm: why}}``; ``dir`` is the run's directory under
    ``out_dir`` ("." for a single run), where its plots go. The document's ``arms`` and
    ``ratios`` are the medians over the runs (``runs.median``), ``runs[]`` each run's own."""
    docs, plots = [], []
    for run in runs:
        arms_k = {**run["arms"], **{a: {"skipped": why} for a, why in run["skipped"].items()}}
        docs.append({**run["meta"], "arms": arms_k, "ratios": ratios(arms_k), "decomposition": decomposition(arms_k),
                     "gang_comparison": pergang.compare(arms_k)})
        run_dir = out_dir / run["meta"]["dir"]
        made = _plots(run_dir, run["series"])
        made += [m for m in [preemption.plot(run_dir, arms_k, _pyplot(), ARM_COLORS)] if m]
        plots += [str(Path(run["meta"]["dir"]) / m) for m in made]
    arms = runs_mod.arms([d["arms"] for d in docs])
    ratio = runs_mod.median([d["ratios"] for d in docs])
    doc = {**meta, "runs": docs, "arms": arms, "ratios": ratio, "decomposition": decomposition(arms),
           "targets": targets(arms, ratio) + preemption.targets(arms)}
    (out_dir / "results.json").write_text(json.dumps(doc, indent=2) + "\n")
    (out_dir / "report.md").write_text(_markdown(doc, plots))
    return doc


def _switches(process: str) -> Any:
    def cell(arm: dict[str, Any]) -> str:
        c = (arm.get("ctx_switches_per_pod") or {}).get(process)
        return "-" if not c else f"{c['voluntary']:g} / {c['involuntary']:g}"
    return cell


def _attempts(key: str) -> Any:
    def cell(arm: dict[str, Any]) -> str:
        a = arm.get(key)
        return "-" if not a or a.get("scheduled") is None else f"{a['scheduled']:g} / {a['unschedulable']:g}"
    return cell


def _writes(arm: dict[str, Any]) -> str:
    """The API server's writes per pod: the total, then its three largest kinds."""
    w = arm.get("apiserver_writes_per_pod")
    if not w:
        return "-"
    top = [f"{k} {v:g}" for k, v in w.items() if k != "total"][:3]
    return f"{w['total']:g} ({', '.join(top)})"


KEY_ROWS = (
    ("throughput pods/s avg", ("throughput_pods_per_s", "avg")),
    ("throughput pods/s p50 (1 s samples)", ("throughput_pods_per_s", "p50")),
    ("throughput pods/s p99 (1 s samples)", ("throughput_pods_per_s", "p99")),
    ("pod create->bind p50 s", ("pod_time_to_bind_s", "p50")),
    ("pod create->bind p99 s", ("pod_time_to_bind_s", "p99")),
    ("gang time-to-bind p50 s", ("gang_time_to_bind_s", "p50")),
    ("gang time-to-bind p99 s", ("gang_time_to_bind_s", "p99")),
    ("gangs bound whole / total", None),
    ("narrowest-domain share", ("narrowest_domain_fraction",)),
    ("NVLink domains per gang (mean)", ("domains_spanned_mean", "nvl")),
    ("leaves per gang (mean)", ("domains_spanned_mean", "leaf")),
    ("NVLink domains / leaves per gang beyond the fewest possible (mean)", None),
    ("partial-gang exposure pod-s", ("partial_gang_pod_seconds",)),
    ("gang bind spread p99 s (first -> last member bound)", ("gang_bind_spread_s", "p99")),
    ("deadlocked gangs", ("deadlocked_gangs",)),
    ("GPU utilization mean", ("utilization_mean",)),
    ("fragmentation mean", ("fragmentation_mean",)),
    ("fragmentation of free GPU-seconds (stranded / free, summed)", ("fragmentation_gpu_seconds",)),
    ("stranded GPUs mean", ("stranded_gpus_mean",)),
    ("scheduler algorithm p50 ms (filter+score, extender calls included)", ("scheduler_algorithm_ms", "p50")),
    ("scheduler algorithm p99 ms", ("scheduler_algorithm_ms", "p99")),
    ("scheduler attempt p50 ms (algorithm + binding)", ("scheduler_attempt_ms", "p50")),
    ("scheduler attempt p99 ms", ("scheduler_attempt_ms", "p99")),
    ("railyard filter p50 / p99 ms", None),
    ("railyard prioritize p50 / p99 ms", None),
    ("railyard bind p50 / p99 ms", None),
    ("Kueue: gang first member created -> admitted p50 / p99 s", None),
    ("Kueue: gang last member created -> admitted p50 / p99 s", None),
    ("Kueue: gang admitted -> last member bound p50 / p99 s", None),
    ("Kueue: admission attempt mean / p99 ms (its scheduler, TAS included)", None),
    ("Kueue: admission attempts success / inadmissible", None),
    ("percentageOfNodesToScore (feasible nodes to find)", None),
    ("kube-scheduler CPU ms/pod", ("cpu_ms_per_pod", "kube-scheduler")),
    ("kube-apiserver CPU ms/pod", ("cpu_ms_per_pod", "kube-apiserver")),
    ("etcd CPU ms/pod", ("cpu_ms_per_pod", "etcd")),
    ("kwok CPU ms/pod", ("cpu_ms_per_pod", "kwok")),
    ("railyard CPU ms/pod", ("cpu_ms_per_pod", "railyard")),
    ("kueue CPU ms/pod", ("cpu_ms_per_pod", "kueue")),
    ("harness CPU ms/pod (watch)", ("cpu_ms_per_pod", "harness")),
    ("other work on the machine CPU ms/pod", ("cpu_ms_per_pod", "other")),
    ("all processes above CPU ms/pod (process-only)", ("process_cpu_ms_per_pod",)),
    ("cores busy in the scheduling window (of 2)", ("cpu", "scheduling", "cores_busy")),
    ("other work in cores: scheduling window", ("cpu", "scheduling", "other_cores")),
    ("other work in cores: whole arm", ("cpu", "arm", "other_cores")),
    ("1-minute load average min", ("load_average_1m", "min")),
    ("1-minute load average max", ("load_average_1m", "max")),
    *((f"context switches/pod {p} (voluntary / involuntary)", _switches(p))
      for p in ("kube-scheduler", "kube-apiserver", "etcd", "kwok", "railyard", "kueue", "harness")),
    ("scheduler attempts per pod, all pods (scheduled / unschedulable)", _attempts("scheduler_attempts_per_pod")),
    ("scheduler attempts per gang member (scheduled / unschedulable)", _attempts("scheduler_attempts_per_gang_member")),
    ("API server writes per pod, every client (largest kinds)", _writes),
    ("pods bound / total", None),
    ("cluster up s", ("cluster_up_s",)),
)


def _cell(arm: dict[str, Any], label: str, keys: Any) -> str:
    if "skipped" in arm:
        return "-"
    if callable(keys):
        return keys(arm)
    if keys is None:
        if label.startswith("gangs"):
            g = arm.get("gangs") or {}
            return f"{g.get('bound_whole')}/{g.get('total')}" if g.get("total") else "-"
        if label.startswith("pods"):
            p = arm.get("pods") or {}
            return f"{p.get('bound')}/{p.get('total')}"
        if label.startswith("percentageOfNodesToScore"):
            if "percentage_of_nodes_to_score" not in arm:
                return "-"
            pct = arm["percentage_of_nodes_to_score"]
            shown = "default" if pct is None else str(pct)
            return shown + (f" ({arm['nodes_to_find']})" if arm.get("nodes_to_find") is not None else "")
        if label.startswith("NVLink domains / leaves"):
            b = arm.get("domains_beyond_fewest_mean")
            return f"{b['nvl']:g} / {b['leaf']:g}" if b else "-"
        if label.startswith("Kueue"):
            return _kueue_cell(arm.get("kueue"), label)
        verb = label.split()[1]
        v = (arm.get("extender_verb_ms") or {}).get(verb)
        return f"{v['p50']} / {v['p99']}" if v and v.get("p50") is not None else "-"
    value: Any = arm
    for k in keys:
        value = value.get(k) if isinstance(value, dict) else None
    return "-" if value is None else f"{value:g}" if isinstance(value, (int, float)) else str(value)


def _kueue_cell(k: dict[str, Any] | None, label: str) -> str:
    if not k:
        return "-"
    if "attempts" in label and "mean" not in label:
        a = k.get("admission_attempts") or {}
        return f"{a.get('success', 0)} / {a.get('inadmissible', 0)}"
    if "attempt" in label:
        v = k.get("admission_attempt_ms") or {}
        return f"{v.get('mean')} / {v.get('p99')}" if v.get("count") else "-"
    key = ("gang_created_to_admitted_s" if "first member" in label else
           "gang_last_member_to_admitted_s" if "last member created" in label else "gang_admitted_to_bound_s")
    v = k.get(key) or {}
    return f"{v.get('p50')} / {v.get('p99')}" if v.get("p50") is not None else "-"


def table(doc: dict[str, Any]) -> str:
    names = sorted(doc["arms"])
    lines = ["| | " + " | ".join(f"{a}" for a in names) + " |", "|---|" + "---|" * len(names)]
    for label, keys in KEY_ROWS:
        lines.append(f"| {label} | " + " | ".join(_cell(doc["arms"][a], label, keys) for a in names) + " |")
    return "\n".join(lines)


def _markdown(doc: dict[str, Any], plots: list[str]) -> str:
    out = [f"# Benchmark `{doc['scenario']}` ({doc['mode']} mode)", "",
           f"- command: `{doc['command']}`", f"- date: {doc['date']}", f"- machine: {doc['machine']}",
           f"- topology: {doc['topology']['nodes']} nodes, {doc['topology']['gpus']} GPUs "
           f"(`{doc['topology']['spec']}`)",
           f"- workload: {doc['workload']['jobs']} jobs, {doc['workload']['pods']} pods "
           f"({doc['workload']['gangs']} gangs), seed {doc['seed']}", f"- wall time: {doc['wall_s']:.0f} s"]
    if doc.get("kubernetes"):
        out.append(f"- kubernetes: {doc['kubernetes']}")
    git = doc.get("git") or {}
    if git.get("commit"):
        out.append(f"- commit: `{git['commit']}`" + (" (work tree dirty: " + ", ".join(git.get("changed") or []) + ")"
                                                     if git.get("dirty") else " (clean work tree)"))
    load = doc.get("load_average") or {}
    if load.get("start"):
        out.append(f"- load average (1/5/15 min): {load['start']} at start, {load.get('end')} at the end")
    out.append("")
    if doc.get("description"):
        out += ["Scenario (as in its full mode" + (", scaled down in quick mode" if doc["mode"] == "quick" else "")
                + "): " + doc["description"], ""]
    out += ["## Arms", ""]
    for a, title in doc["arm_titles"].items():
        arm = doc["arms"].get(a, {})
        out.append(f"- **{a}**: {title}" + (f" — {arm['skipped']}" if "skipped" in arm else
                                            f" (stopped: {arm.get('stop_reason')})"))
    r = doc["ratios"]
    several = len(doc.get("runs") or []) > 1
    out += ["", "## Results" + (f" (median of {len(doc['runs'])} runs)" if several else ""), "",
            *(["Each number is its median over the runs (`runs[]` in results.json has every run's); "
               "each ratio is the median of the runs' ratios.", ""] if several else []),
            table(doc), "",
            "Ratios, raw throughput (process-only: the baseline's process CPU per pod over the arm's): "
            + ", ".join(f"{label} = {r.get(key)} ({r.get(key.replace('throughput_', 'process_only_', 1))})"
                        for label, (key, _, _) in zip(("B/A", "A100/A", "B/A100", "B100/A100", "B/AREF"), RATIO_PAIRS))
            + f"; gang time-to-bind p99 B/C = {r['time_to_bind_p99_railyard_vs_native']}.", "",
            *runs_markdown(doc), *decomposition_markdown(doc), *pergang.markdown(doc), *preemption.markdown(doc),
            "## Targets (issues 5, 12 and 21; measured, never tuned for)", "",
            "| target | goal | measured | met | shortfall |", "|---|---|---|---|---|"]
    for t in doc["targets"]:
        met = {True: "yes", False: "**no**", None: "not measured here"}[t["met"]]
        out.append(f"| {t['target']} | {t['goal']} | {t['measured']} | {met} | {t['shortfall']} |")
    out += ["", "## Notes", ""] + [f"- {n}" for n in doc.get("notes", [])]
    out += ["", "## Plots", ""] + [f"![{p}]({p})" for p in plots]
    return "\n".join(out) + "\n"


def runs_markdown(doc: dict[str, Any]) -> list[str]:
    """Issue 21: every run's throughput, process CPU and the machine's load per arm, in the
    order the arms ran, and each run's ratios beside their median."""
    runs = doc.get("runs") or []
    if not runs:
        return []
    out = ["## Runs (interleaved: each run's arms in turn, each on a fresh cluster)", "",
           "Other work = the machine's busy CPU (/proc/stat) minus the cluster's processes and this harness, "
           "in cores, in the scheduling window and over the whole arm: load that the raw ratio takes in and "
           "the process-only ratio leaves out.", "",
           "| run | arm | started | throughput pods/s | process CPU ms/pod | other work cores "
           "(scheduling / arm) | 1-min load min-max |", "|---|---|---|---|---|---|---|"]

    def v(x: Any) -> str:
        return "-" if x is None else f"{x:g}" if isinstance(x, (int, float)) else str(x)

    for run in runs:
        for name, arm in run["arms"].items():
            if "skipped" in arm:
                out.append(f"| {run['run']} | {name} | | {arm['skipped']} | | | |")
                continue
            cpu, load = arm.get("cpu") or {}, arm.get("load_average_1m") or {}
            out.append(f"| {run['run']} | {name} | {arm.get('started') or run['date']} | {v((arm.get('throughput_pods_per_s') or {}).get('avg'))} "
                       f"| {v(arm.get('process_cpu_ms_per_pod'))} | {v((cpu.get('scheduling') or {}).get('other_cores'))} / "
                       f"{v((cpu.get('arm') or {}).get('other_cores'))} | {v(load.get('min'))}-{v(load.get('max'))} |")
    keys = [k for k, _, _ in RATIO_PAIRS if any(run["ratios"].get(k) is not None for run in runs)]
    if keys:
        out += ["", "| run | " + " | ".join(f"{k.removeprefix('throughput_')} raw / process-only" for k in keys) + " |",
                "|---|" + "---|" * len(keys)]
        for label, ratio in [*((str(run["run"]), run["ratios"]) for run in runs), ("**median**", doc["ratios"])]:
            out.append(f"| {label} | " + " | ".join(
                f"{v(ratio.get(k))} / {v(ratio.get(k.replace('throughput_', 'process_only_', 1)))}" for k in keys) + " |")
    return out + [""]


def decomposition_markdown(doc: dict[str, Any]) -> list[str]:
    """The issue 13 section of report.md: each step from A to B per scheduled pod."""
    rows = doc.get("decomposition") or []
    if not rows:
        return []
    a, a100 = doc["arms"].get("A") or {}, doc["arms"].get("A100") or {}
    same = ("nodes_to_find" in a and a.get("nodes_to_find") is not None
            and a.get("nodes_to_find") == a100.get("nodes_to_find"))
    out = ["## Where B's time goes (issue 13)", "",
           "Per scheduled pod, in the scheduling window (kube-scheduler resumed -> last binding). "
           "Wall ms/pod = 1000 / average throughput; CPU ms/pod = each process's CPU seconds "
           "(/proc utime+stime) over the pods bound in the window; a step's value is the second arm's "
           "minus the first's." + (" With several runs the steps are computed from the median arms, so a "
                                   "step's throughput ratio is a ratio of medians; the Runs section above "
                                   "has each run's ratio and their median." if len(doc.get("runs") or []) > 1
                                   else ""), "",
           "| step | what the step adds | throughput ratio | wall ms/pod | kube-scheduler CPU | "
           "kube-apiserver CPU | etcd CPU | kwok CPU | railyard CPU | all processes CPU |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        cpu = row.get("cpu_ms_per_pod_added") or {}

        def c(k: str) -> str:
            return "-" if cpu.get(k) is None else f"{cpu[k]:+g}"

        w = row["wall_ms_per_pod"]
        out.append(f"| {row['step']} | {row['what']} | {row['throughput_ratio']:g} | "
                   f"{w['from']:g} -> {w['to']:g} ({w['added']:+g}) | {c('kube-scheduler')} | "
                   f"{c('kube-apiserver')} | {c('etcd')} | {c('kwok')} | {c('railyard')} | {c('all processes')} |")
    out.append("")
    floors = [name for name in ("A", "A100", "B", "B100") if name in doc["arms"]
              and ((doc["arms"][name].get("throughput_pods_per_s") or {}).get("span_s") or 1.0) < 1.0]
    if floors:
        out += [f"{', '.join(floors)} bound every pod within one second: the average throughput counts "
                "that as one second, so it is a floor and the wall ms/pod a ceiling for "
                f"{'that arm' if len(floors) == 1 else 'those arms'}.", ""]
    if same:
        out += [f"A and A100 look for the same {a['nodes_to_find']} feasible nodes here (kube-scheduler "
                "considers every node below 100 nodes whatever percentageOfNodesToScore says): they run "
                "the same algorithm, so the A -> A100 row is run-to-run noise.", ""]
    b = doc["arms"].get("B") or {}
    cpu_b = b.get("cpu_ms_per_pod") or {}
    handlers = b.get("extender_verb_ms_per_pod") or {}
    if cpu_b.get("railyard") is not None:
        out.append(f"railyard CPU per scheduled pod (B): **{cpu_b['railyard']:g} ms**; time inside its handlers "
                   f"per pod: filter {handlers.get('filter')}, prioritize {handlers.get('prioritize')}, "
                   f"bind {handlers.get('bind')} ms (bind runs in kube-scheduler's binding goroutines, "
                   "off the scheduling loop, and includes the Binding POST).")
    for row in rows:
        if "railyard_handlers_ms_per_pod" in row:
            out.append(f"{row['step']}: of the {row['wall_ms_per_pod']['added']:+g} wall ms/pod, "
                       f"{row['railyard_handlers_ms_per_pod']:g} ms is inside railyard's filter + prioritize "
                       f"handlers, {row['round_trip_and_wait_ms_per_pod']:+g} ms the rest (HTTP round trips, JSON "
                       "on both sides, waiting for a core on this shared 2-core machine).")
    creating = ((b.get("cpu") or {}).get("creating") or {}).get("ms_per_pod") or {}
    if creating.get("railyard") is not None:
        out.append(f"While the pods were created (kube-scheduler paused), railyard's watch cache spent "
                   f"{creating['railyard']:g} CPU ms per pod created (not in the table above).")
    return out + [""]


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _plots(out_dir: Path, series: dict[str, dict[str, Any]]) -> list[str]:
    plt = _pyplot()

    made = []

    def save(fig, name: str) -> None:
        fig.tight_layout()
        fig.savefig(out_dir / name, dpi=90)
        plt.close(fig)
        made.append(name)

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    for arm, s in series.items():
        data = sorted(s["pod_ttb"])
        if data:
            ax1.plot(data, [(i + 1) / len(data) for i in range(len(data))], label=arm, color=ARM_COLORS[arm])
        for verb, style in (("filter", "-"), ("prioritize", "--")):
            cdf = (s.get("verb_cdf") or {}).get(verb)
            if cdf:
                ax2.step([le * 1000 for le, _ in cdf], [c for _, c in cdf], style, where="post",
                         label=f"{arm} {verb}", color=ARM_COLORS[arm])
    ax1.set(title="pod create -> bind (CDF)", xlabel="seconds", ylabel="fraction of pods")
    ax1.set_xscale("symlog", linthresh=0.1)
    ax1.legend()
    ax2.set(title="railyard verb latency (CDF, histogram buckets)", xlabel="ms", xscale="log")
    if ax2.lines:
        ax2.legend()
    save(fig, "latency_cdf.png")

    fig, ax = plt.subplots(figsize=(8, 4))
    for arm, s in series.items():
        binds = s["binds"]
        if binds:
            buckets = [0] * (int(binds[-1]) + 1)
            for b in binds:
                buckets[int(b)] += 1
            ax.plot(range(len(buckets)), buckets, label=arm, color=ARM_COLORS[arm])
    ax.set(title="bindings per second", xlabel="seconds since start", ylabel="pods/s")
    ax.legend()
    save(fig, "throughput.png")

    if any(s["gang_ttb"] for s in series.values()):
        fig, ax = plt.subplots(figsize=(8, 4))
        arms = [a for a, s in series.items() if s["gang_ttb"]]
        ax.boxplot([series[a]["gang_ttb"] for a in arms], whis=(1, 99))
        ax.set_xticks(range(1, len(arms) + 1), arms)
        ax.set(title="gang time-to-bind (first member created -> last bound)", ylabel="seconds")
        save(fig, "gang_time_to_bind.png")

        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4))
        width = 0.8 / max(len(series), 1)
        for i, (arm, s) in enumerate(series.items()):
            counts = [sum(1 for actual, _ in s["landed"] if actual == lvl) for lvl in LEVEL_ORDER]
            ax1.bar([x + i * width for x in range(len(LEVEL_ORDER))], counts, width, label=arm, color=ARM_COLORS[arm])
        ax1.set_xticks([x + width * (len(series) - 1) / 2 for x in range(len(LEVEL_ORDER))], LEVEL_ORDER)
        ax1.set(title="narrowest domain each gang landed in", ylabel="gangs")
        ax1.legend()
        leaves = sorted({leaf for s in series.values() for leaf in s["gangs_per_leaf"]})
        for i, (arm, s) in enumerate(series.items()):
            ax2.bar([x + i * width for x in range(len(leaves))], [s["gangs_per_leaf"].get(leaf, 0) for leaf in leaves],
                    width, label=arm, color=ARM_COLORS[arm])
        ax2.set_xticks(range(len(leaves)), leaves, rotation=90, fontsize=7)
        ax2.set(title="gangs touching each leaf (block/leaf)", ylabel="gangs")
        save(fig, "gang_landing.png")

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    for arm, s in series.items():
        ax1.plot(s["t"], s["utilization"], label=arm, color=ARM_COLORS[arm])
        ax2.plot(s["t"], [f if f is not None else float("nan") for f in s["fragmentation"]],
                 label=arm, color=ARM_COLORS[arm])
    ax1.set(title="GPU utilization", xlabel="seconds since start", ylim=(0, 1.02))
    ax2.set(title="fragmentation (share of free GPUs unusable)", xlabel="seconds since start", ylim=(0, 1.02))
    ax1.legend()
    save(fig, "utilization.png")
    return made
