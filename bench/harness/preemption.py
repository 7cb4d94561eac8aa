"""The preemption numbers of one arm (issue 12), from observed bindings, deletions and node
labels only: nothing here asks railyard.

A *preemptor* is a gang job whose PriorityClass (workload key ``priority_classes``) is above
some other job's. A *victim* is a pod of another job seen being deleted (``deletionTimestamp``)
before it finished (nothing else deletes pods during an arm); each is counted against the
preemptor created most recently before that. Per preemptor:

- ``victims``: its victims;
- ``needed``: the fewest pods of lower priority whose removal, at the moment its first member was
  created, would have let it fit one domain at its required level (the whole cluster if it
  requires none): per node, pods removed largest first; per domain, the cheapest nodes (an exact
  small dynamic program over the domain's nodes; GPUs only, pods of running gangs counted one by
  one: this oracle is for the scenario's lone low-priority pods);
- ``victims_outside_domain``: victims on nodes outside the domain the gang finally used at its
  required level (the whole cluster if it requires none; a gang that broke its required level
  is counted against the one domain holding most of its members): wasted evictions;
- ``victims_off_gang_nodes``: victims on nodes none of its members landed on;
- ``within_required``: its members share one domain at its required level;
- ``time_to_bind_s``: first member created -> last member bound;
- ``partial_gang_pod_seconds``: its members' time bound while it was incomplete.
"""

from __future__ import annotations

from typing import Any

from bench.harness.runner import ArmResult, PodRecord, bound_pods
from bench.harness.workload import Job

INF = 10**9


def priorities(jobs: list[Job], workload: dict[str, Any]) -> dict[str, int]:
    """Job name -> the value of its PriorityClass (0 without one)."""
    values = {str(k): int(v) for k, v in (workload.get("priority_classes") or {}).items()}
    return {j.name: values.get(j.priority_class or "", 0) for j in jobs}


def analyse(result: ArmResult, jobs: list[Job], workload: dict[str, Any], paths: dict[str, tuple[str, ...]],
            caps: dict[str, int], levels: tuple[str, ...]) -> dict[str, Any] | None:
    """The arm's ``preemption`` entry, or None when the scenario has no preemptor."""
    value = priorities(jobs, workload)
    lowest = min(value.values(), default=0)
    preemptors = [j for j in jobs if j.kind == "gang" and value[j.name] > lowest]
    if not preemptors:
        return None
    recs = result.pods
    by_job: dict[str, list[PodRecord]] = {}
    for r in recs.values():
        by_job.setdefault(r.job, []).append(r)
    starts = sorted((min((m.created for m in by_job[j.name] if m.created is not None), default=INF), j.name)
                    for j in preemptors)
    victims: dict[str, list[str]] = {j.name: [] for j in preemptors}
    """Preemptor -> the nodes of its victims."""
    preemptor_names = {j.name for j in preemptors}
    for r in recs.values():
        if r.deleted is None or r.job in preemptor_names or r.node is None:
            continue
        owner = max((s for s in starts if s[0] <= r.deleted), default=None)
        if owner is not None:
            victims[owner[1]].append(r.node)
    gangs: list[dict[str, Any]] = []
    for job in preemptors:
        members = by_job[job.name]
        created = [m.created for m in members if m.created is not None]
        bound = bound_pods(members)
        t0 = min(created) if created else None
        whole = len(bound) == job.pods
        done = max(at for _, at, _ in bound) if whole else result.end
        used = {node for _, _, node in bound}
        depth = _shared_depth([paths[n] for n in used]) if used else 0
        mine = victims[job.name]
        required = levels.index(job.required) if job.required in levels else 0
        homes = [paths[node][:required] for _, _, node in bound]
        home = max(sorted(set(homes)), key=homes.count) if homes else ()
        exposure = sum(max(0.0, min(done, m.finished if m.finished is not None else done) - at) for m, at, _ in bound)
        gangs.append({
            "gang": job.name, "pods": job.pods, "gpus_per_pod": job.gpus, "priority": value[job.name],
            "bound_whole": whole,
            "time_to_bind_s": round(done - t0, 3) if whole and t0 is not None else None,
            "victims": len(mine),
            "needed": _needed(recs, value, job, t0, paths, caps, required) if t0 is not None else None,
            "victims_outside_domain": sum(1 for n in mine if paths[n][:required] != home) if used else None,
            "victims_off_gang_nodes": sum(1 for n in mine if n not in used) if used else None,
            "domain_level": levels[depth] if used else None,
            "within_required": (depth >= required) if whole else None,
            "victim_domains": len({paths[n][:required] for n in mine}) if required else None,
            "partial_gang_pod_seconds": round(exposure, 3),
        })

    def total(key: str) -> int | None:
        values = [g[key] for g in gangs if g[key] is not None]
        return sum(values) if values else None

    ttb = [g["time_to_bind_s"] for g in gangs if g["time_to_bind_s"] is not None]
    return {
        "gangs": gangs,
        "bound_whole": sum(g["bound_whole"] for g in gangs),
        "victims": total("victims"),
        "needed": total("needed"),
        "victims_outside_domain": total("victims_outside_domain"),
        "victims_off_gang_nodes": total("victims_off_gang_nodes"),
        "within_required": sum(1 for g in gangs if g["within_required"]),
        "time_to_bind_s": {"max": max(ttb) if ttb else None,
                           "mean": round(sum(ttb) / len(ttb), 3) if ttb else None},
        "partial_gang_pod_seconds": round(sum(g["partial_gang_pod_seconds"] for g in gangs), 3),
    }


def _needed(recs: dict[str, PodRecord], value: dict[str, int], job: Job, t: float,
            paths: dict[str, tuple[str, ...]], caps: dict[str, int], depth: int) -> int | None:
    """The fewest lower-priority pods to remove at time ``t`` so that one domain at ``depth``
    holds the gang (None: no domain can, whatever is removed)."""
    on: dict[str, list[tuple[int, int]]] = {n: [] for n in caps}
    for r in recs.values():
        gone = min((x for x in (r.finished, r.deleted) if x is not None), default=None)
        if r.job != job.name and r.node in on and r.bound is not None and r.bound <= t and (gone is None or gone > t):
            on[r.node].append((r.gpus, value.get(r.job, 0)))
    domains: dict[tuple[str, ...], list[str]] = {}
    for node in caps:
        domains.setdefault(paths[node][:depth], []).append(node)
    best = None
    for nodes in domains.values():
        got = _cheapest(nodes, on, caps, job, value[job.name])
        if got is not None and (best is None or got < best):
            best = got
    return best


def _cheapest(nodes: list[str], on: dict[str, list[tuple[int, int]]], caps: dict[str, int], job: Job,
              priority: int) -> int | None:
    # cost[n][k]: pods to remove from node n so it holds k members (largest first: the fewest).
    dp = [0] + [INF] * job.pods
    for n in nodes:
        pods = sorted(on[n], reverse=True)
        free = caps[n] - sum(g for g, _ in pods)
        removable = [g for g, p in pods if p < priority]
        costs = []
        for k in range(job.pods + 1):
            need, removed, f = k * job.gpus, 0, free
            for g in removable:
                if f >= need:
                    break
                f, removed = f + g, removed + 1
            costs.append(removed if f >= need and need <= caps[n] else INF)
        dp = [min(dp[s - k] + costs[k] for k in range(s + 1)) for s in range(job.pods + 1)]
    return dp[job.pods] if dp[job.pods] < INF else None


def _shared_depth(paths: list[tuple[str, ...]]) -> int:
    depth = 0
    while depth < len(paths[0]) and len({p[: depth + 1] for p in paths}) == 1:
        depth += 1
    return depth


# -- report.md, targets and the plot -------------------------------------------------------------

TARGETS_TITLE = "issue 12"


def targets(arms: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Issue 12's expectations of arm B: victims only inside one domain, no more than needed,
    every high-priority gang bound whole inside its required level."""
    p = (arms.get("B") or {}).get("preemption")
    if not p:
        return []
    out = []

    def add(name: str, measured: Any, goal: str, met: bool | None, shortfall: str = "") -> None:
        out.append({"target": name, "goal": goal, "measured": measured, "met": met, "shortfall": shortfall})

    v, n = p["victims"], p["needed"]
    add("victims evicted B vs needed (issue 12)", [v, n], "<= needed",
        None if v is None or n is None else v <= n, "" if v is None or n is None or v <= n else f"{v - n} more")
    w = p["victims_outside_domain"]
    add("victims outside the gang's final domain B (issue 12)", w, "0", None if w is None else w == 0)
    total = len(p["gangs"])
    add("high-priority gangs bound whole B (issue 12)", f"{p['bound_whole']}/{total}", f"{total}/{total}",
        p["bound_whole"] == total)
    add("... within their required level B (issue 12)", f"{p['within_required']}/{total}", f"{total}/{total}",
        p["within_required"] == total)
    return out


def markdown(doc: dict[str, Any]) -> list[str]:
    rows = {a: arm["preemption"] for a, arm in doc["arms"].items() if isinstance(arm, dict) and arm.get("preemption")}
    if not rows:
        return []
    names = sorted(rows)
    out = ["## Preemption (issue 12)", "",
           "Per arm, summed over the high-priority gangs (each victim is counted against the gang created last "
           "before it was deleted; `needed` is the harness's own count of the fewest lower-priority pods whose "
           "removal would have made room in one domain at the gang's required level, "
           "`bench/harness/preemption.py`). Arm A is kube-scheduler's per-pod preemption (each member evicts "
           "where it alone fits), B railyard's (one domain, whole gangs, the Eviction API), C kube-scheduler "
           "1.37.2's pod-group preemption, which comes with the `GenericWorkload` gate (1.37.2 has no "
           "`WorkloadAwarePreemption` gate). C's topology constraint groups nodes by the label's *value* "
           "(KEP-5732): NVLink domains named alike under two leaves are one placement to it, so it may "
           "land a gang \"in one NVLink domain\" that is two.", "",
           "| | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for label, key in (("high-priority gangs bound whole", "bound_whole"), ("... within their required level", "within_required"),
                       ("victims evicted", "victims"), ("victims needed (oracle)", "needed"),
                       ("victims outside the domain the gang finally used (wasted)", "victims_outside_domain"),
                       ("victims on nodes the gang did not use", "victims_off_gang_nodes"),
                       ("partial-gang pod-seconds", "partial_gang_pod_seconds")):
        out.append(f"| {label} | " + " | ".join(_shown(rows[a].get(key)) for a in names) + " |")
    for label, key in (("time-to-bind mean s", "mean"), ("time-to-bind max s", "max")):
        out.append(f"| {label} | " + " | ".join(_shown((rows[a].get("time_to_bind_s") or {}).get(key)) for a in names) + " |")
    out += ["", "Per gang:", "", "| arm | gang | bound whole | time-to-bind s | victims | needed | outside its domain | "
            "off its nodes | NVLink domains the victims were in | landed in one |", "|---|---|---|---|---|---|---|---|---|---|"]
    for a in names:
        for g in rows[a]["gangs"]:
            out.append(f"| {a} | {g['gang']} | {g['bound_whole']} | {_shown(g['time_to_bind_s'])} | {g['victims']} | "
                       f"{_shown(g['needed'], 'none')} | {_shown(g['victims_outside_domain'])} | {_shown(g['victims_off_gang_nodes'])} | "
                       f"{_shown(g['victim_domains'])} | {_shown(g['domain_level'])} |")
    return out + [""]


def plot(out_dir, arms: dict[str, dict[str, Any]], plt, colors: dict[str, str]) -> str | None:
    """``preemption.png``: victims inside / outside the gang's final domain, and time-to-bind, per arm."""
    rows = {a: arm["preemption"] for a, arm in sorted(arms.items()) if isinstance(arm, dict) and arm.get("preemption")}
    if not rows:
        return None
    names = list(rows)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    inside = [(rows[a]["victims"] or 0) - (rows[a]["victims_outside_domain"] or 0) for a in names]
    outside = [rows[a]["victims_outside_domain"] or 0 for a in names]
    ax1.bar(names, inside, color=[colors.get(a, "tab:gray") for a in names], label="inside the gang's domain")
    ax1.bar(names, outside, bottom=inside, color="tab:red", label="outside it (wasted)")
    needed = [rows[a]["needed"] for a in names]
    shown = [(a, n) for a, n in zip(names, needed) if n is not None]
    if shown:
        ax1.scatter([a for a, _ in shown], [n for _, n in shown], marker="_", s=2000, color="black", zorder=3,
                    label="needed (gangs some domain could hold)")
    top = max([i + o for i, o in zip(inside, outside)] + [n for _, n in shown] + [1])
    ax1.set(title="victims evicted", ylabel="pods", ylim=(0, top * 1.45))
    ax1.legend(loc="upper left", fontsize=8)
    for a in names:
        ttb = [g["time_to_bind_s"] for g in rows[a]["gangs"] if g["time_to_bind_s"] is not None]
        ax2.scatter([a] * len(ttb), ttb, color=colors.get(a, "tab:gray"))
    ax2.set(title="high-priority gang time-to-bind", ylabel="seconds")
    fig.tight_layout()
    fig.savefig(out_dir / "preemption.png", dpi=90)
    plt.close(fig)
    return "preemption.png"


def _shown(value: Any, missing: str = "-") -> str:
    return missing if value is None else f"{value:g}" if isinstance(value, (int, float)) and not isinstance(value, bool) else str(value)
