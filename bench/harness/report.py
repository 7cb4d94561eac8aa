"""results.json, report.md and the PNG plots of one run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

ARM_COLORS = {"A": "tab:gray", "B": "tab:blue", "C": "tab:orange", "D": "tab:green"}
LEVEL_ORDER = ("host", "nvl", "leaf", "block", "cluster")


def ratios(arms: dict[str, dict[str, Any]]) -> dict[str, float | None]:
    def get(arm: str, *keys: str) -> float | None:
        value: Any = arms.get(arm)
        for k in keys:
            if not isinstance(value, dict):
                return None
            value = value.get(k)
        return value if isinstance(value, (int, float)) else None

    tb, ta = get("B", "throughput_pods_per_s", "avg"), get("A", "throughput_pods_per_s", "avg")
    pb, pc = get("B", "gang_time_to_bind_s", "p99"), get("C", "gang_time_to_bind_s", "p99")
    return {
        "throughput_railyard_vs_default": round(tb / ta, 3) if tb and ta else None,
        "time_to_bind_p99_railyard_vs_native": round(pb / pc, 3) if pb is not None and pc else None,
    }


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
        "" if not met is False else f"{nc - nb:.3f} below C")
    t = ratio["time_to_bind_p99_railyard_vs_native"]
    add("gang time-to-bind p99 B/C", t, "<= 1.2", None if t is None else t <= 1.2,
        "" if t is None or t <= 1.2 else f"{t / 1.2:.2f}x the allowance")
    return out


def write(out_dir: Path, meta: dict[str, Any], arms: dict[str, dict[str, Any]],
          series: dict[str, dict[str, Any]], skipped: dict[str, str]) -> dict[str, Any]:
    ratio = ratios(arms)
    doc = {**meta, "arms": {**arms, **{a: {"skipped": why} for a, why in skipped.items()}},
           "ratios": ratio, "targets": targets(arms, ratio)}
    (out_dir / "results.json").write_text(json.dumps(doc, indent=2) + "\n")
    plots = _plots(out_dir, series)
    (out_dir / "report.md").write_text(_markdown(doc, plots))
    return doc


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
    ("partial-gang exposure pod-s", ("partial_gang_pod_seconds",)),
    ("gang bind spread p99 s (first -> last member bound)", ("gang_bind_spread_s", "p99")),
    ("deadlocked gangs", ("deadlocked_gangs",)),
    ("GPU utilization mean", ("utilization_mean",)),
    ("fragmentation mean", ("fragmentation_mean",)),
    ("scheduler algorithm p50 ms (filter+score, extender calls included)", ("scheduler_algorithm_ms", "p50")),
    ("scheduler algorithm p99 ms", ("scheduler_algorithm_ms", "p99")),
    ("scheduler attempt p50 ms (algorithm + binding)", ("scheduler_attempt_ms", "p50")),
    ("scheduler attempt p99 ms", ("scheduler_attempt_ms", "p99")),
    ("railyard filter p50 / p99 ms", None),
    ("railyard prioritize p50 / p99 ms", None),
    ("railyard bind p50 / p99 ms", None),
    ("pods bound / total", None),
    ("cluster up s", ("cluster_up_s",)),
)


def _cell(arm: dict[str, Any], label: str, keys: tuple[str, ...] | None) -> str:
    if "skipped" in arm:
        return "-"
    if keys is None:
        if label.startswith("gangs"):
            g = arm.get("gangs") or {}
            return f"{g.get('bound_whole')}/{g.get('total')}" if g.get("total") else "-"
        if label.startswith("pods"):
            p = arm.get("pods") or {}
            return f"{p.get('bound')}/{p.get('total')}"
        verb = label.split()[1]
        v = (arm.get("extender_verb_ms") or {}).get(verb)
        return f"{v['p50']} / {v['p99']}" if v and v.get("p50") is not None else "-"
    value: Any = arm
    for k in keys:
        value = value.get(k) if isinstance(value, dict) else None
    return "-" if value is None else f"{value:g}" if isinstance(value, (int, float)) else str(value)


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
           f"({doc['workload']['gangs']} gangs), seed {doc['seed']}", f"- wall time: {doc['wall_s']:.0f} s", ""]
    if doc.get("description"):
        out += ["Scenario (as in its full mode" + (", scaled down in quick mode" if doc["mode"] == "quick" else "")
                + "): " + doc["description"], ""]
    out += ["## Arms", ""]
    for a, title in doc["arm_titles"].items():
        arm = doc["arms"].get(a, {})
        out.append(f"- **{a}**: {title}" + (f" — {arm['skipped']}" if "skipped" in arm else
                                            f" (stopped: {arm.get('stop_reason')})"))
    out += ["", "## Results", "", table(doc), "",
            f"Ratios: throughput B/A = {doc['ratios']['throughput_railyard_vs_default']}, "
            f"gang time-to-bind p99 B/C = {doc['ratios']['time_to_bind_p99_railyard_vs_native']}.", "",
            "## Targets (issue 5; measured, never tuned for)", "",
            "| target | goal | measured | met | shortfall |", "|---|---|---|---|---|"]
    for t in doc["targets"]:
        met = {True: "yes", False: "**no**", None: "not measured here"}[t["met"]]
        out.append(f"| {t['target']} | {t['goal']} | {t['measured']} | {met} | {t['shortfall']} |")
    out += ["", "## Notes", ""] + [f"- {n}" for n in doc.get("notes", [])]
    out += ["", "## Plots", ""] + [f"![{p}]({p})" for p in plots]
    return "\n".join(out) + "\n"


def _plots(out_dir: Path, series: dict[str, dict[str, Any]]) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

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
