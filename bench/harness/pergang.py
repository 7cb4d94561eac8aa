"""Placement quality gang by gang (issue 23 item 2): what each gang spanned, the fewest it could
have spanned, and where arm B spanned more than another arm on the same gang.

Independent of railyard, as ``analysis`` is: domains are node label paths (``analysis.node_paths``),
free GPUs the capacity minus the pods of other jobs bound and not finished, as the watch saw them.

- ``spans``: per level (block, leaf, nvl, host), the distinct domains the gang's members are on.
- ``fewest``: per level, the fewest domains of that level the gang could have spanned on the free
  GPUs at the moment its last member bound (the moment ``narrowest_domain_fraction`` uses),
  inside one domain of its required level if it has one: a level's domains taken largest first
  (pods of the gang's size each holds) until they hold every pod. Each level is a bound of its
  own: the fewest leaves and the fewest NVLink domains need not come from one placement.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

LEVELS = ("cluster", "block", "leaf", "nvl", "host")
"""Depth index -> level name; a domain at depth d is a node's path truncated to d."""
SPAN_LEVELS = LEVELS[1:]
DEPTH = {name: depth for depth, name in enumerate(LEVELS)}


def fewest_domains(paths: dict[str, tuple[str, ...]], free: dict[str, int], pods: int, gpus: int,
                   within: str | None = None) -> dict[str, int] | None:
    """Per level of ``SPAN_LEVELS``, the fewest domains ``pods`` x ``gpus`` could span on ``free``
    (node -> free GPUs), inside one domain at level ``within`` (None: anywhere). None when no
    such domain holds the gang."""
    depth_within = DEPTH[within] if within else 0
    containers: dict[tuple[str, ...], list[str]] = defaultdict(list)
    for node in free:
        containers[paths[node][:depth_within]].append(node)
    best: dict[str, int] | None = None
    for nodes in containers.values():
        if sum(free[n] // gpus for n in nodes) < pods:
            continue
        counts = {}
        for depth in range(1, len(LEVELS)):
            slots: dict[tuple[str, ...], int] = defaultdict(int)
            for n in nodes:
                slots[paths[n][:depth]] += free[n] // gpus
            need, used = pods, 0
            for held in sorted(slots.values(), reverse=True):
                if need <= 0:
                    break
                need -= held
                used += 1
            counts[LEVELS[depth]] = used
        best = counts if best is None else {lvl: min(best[lvl], n) for lvl, n in counts.items()}
    return best


def spans(member_paths: list[tuple[str, ...]]) -> dict[str, int]:
    """Per level of ``SPAN_LEVELS``, the distinct domains the paths are in."""
    return {LEVELS[d]: len({p[:d] for p in member_paths}) for d in range(1, len(LEVELS))}


def request(job: Any) -> str:
    """``required nvl``, ``preferred leaf`` or ``none``: what the gang asked for."""
    if job.required:
        return f"required {job.required}"
    if job.preferred:
        return f"preferred {job.preferred}"
    return "none"


def record(job: Any, member_paths: list[tuple[str, ...]], paths: dict[str, tuple[str, ...]],
           free: dict[str, int], at: float) -> dict[str, Any]:
    """One whole-bound gang's entry of ``gang_records``."""
    return {"pods": job.pods, "gpus": job.gpus, "request": request(job), "bound_at_s": round(at, 3),
            "spans": spans(member_paths),
            "fewest": fewest_domains(paths, free, job.pods, job.gpus, job.required)}


def beyond_fewest_mean(records: dict[str, dict[str, Any]]) -> dict[str, float] | None:
    """Per level, the mean over whole-bound gangs with a ``fewest`` of domains spanned beyond it."""
    rows = [r for r in records.values() if r.get("spans") and r.get("fewest")]
    if not rows:
        return None
    return {lvl: round(sum(r["spans"][lvl] - r["fewest"][lvl] for r in rows) / len(rows), 3) for lvl in SPAN_LEVELS}


def compare(arms: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    """Gang by gang, B against every other arm of one run, on the gangs both bound whole:

    ``summary[arm]``: ``gangs`` compared, ``b_wider`` / ``arm_wider`` (per level, gangs where
    one spanned more domains than the other); ``losses``: one row per gang and arm where B
    spanned more at some level, with both arms' spans and fewest, and ``why`` per level:
    ``planner`` when B spanned more than the fewest its own cluster allowed (the harness
    cannot see GPUs reserved for gangs waiting at bind: those count here too), else
    ``cluster`` (B was at its fewest: the other arm's cluster had more room then)."""
    own = (arms.get("B") or {}).get("gang_records")
    if not own:
        return None
    summary, losses = {}, []
    for name, arm in arms.items():
        theirs = arm.get("gang_records") if name != "B" else None
        if not theirs:
            continue
        both = [g for g, r in own.items() if r.get("spans") and (theirs.get(g) or {}).get("spans")]
        wider = {lvl: sum(own[g]["spans"][lvl] > theirs[g]["spans"][lvl] for g in both) for lvl in SPAN_LEVELS}
        narrower = {lvl: sum(own[g]["spans"][lvl] < theirs[g]["spans"][lvl] for g in both) for lvl in SPAN_LEVELS}
        summary[name] = {"gangs": len(both), "b_wider": wider, "arm_wider": narrower}
        for g in both:
            mine, other = own[g], theirs[g]
            levels = [lvl for lvl in SPAN_LEVELS if mine["spans"][lvl] > other["spans"][lvl]]
            if not levels:
                continue
            why = {lvl: ("planner" if mine["fewest"] is not None and mine["spans"][lvl] > mine["fewest"][lvl]
                         else "cluster") for lvl in levels}
            losses.append({"gang": g, "arm": name, "pods": mine["pods"], "gpus": mine["gpus"],
                           "request": mine["request"], "levels": levels, "why": why,
                           "B": {"spans": mine["spans"], "fewest": mine["fewest"], "bound_at_s": mine["bound_at_s"]},
                           name: {"spans": other["spans"], "fewest": other["fewest"], "bound_at_s": other["bound_at_s"]}})
    return {"summary": summary, "losses": losses}


def markdown(doc: dict[str, Any]) -> list[str]:
    """report.md's section: per run, B against each arm gang by gang, and every gang B lost."""
    runs = [(run["run"], run.get("gang_comparison")) for run in doc.get("runs") or []]
    runs = [(k, c) for k, c in runs if c and c["summary"]]
    if not runs:
        return []
    out = ["## Gang by gang (issue 23): where B spanned more domains than another arm", "",
           "Same gangs in every arm of a run. *Spans*: distinct domains a gang's members are on; *fewest*: the "
           "fewest it could have spanned on the free GPUs as the harness saw them when its last member bound "
           "(inside its required level). Why, per level: **planner** = B spanned more than the fewest its own "
           "cluster allowed (or GPUs were reserved for a gang waiting at bind, which the harness does not see); "
           "**cluster** = B was at its fewest, the other arm's cluster had more room at that moment (arrival "
           "timing, what else ran).", "",
           "| run | arm | gangs compared | B wider: block / leaf / nvl / host | arm wider: block / leaf / nvl / host |",
           "|---|---|---|---|---|"]

    def per(counts: dict[str, int]) -> str:
        return " / ".join(str(counts[lvl]) for lvl in SPAN_LEVELS)

    for k, comp in runs:
        for arm, s in comp["summary"].items():
            out.append(f"| {k} | {arm} | {s['gangs']} | {per(s['b_wider'])} | {per(s['arm_wider'])} |")
    rows = [(k, loss) for k, comp in runs for loss in comp["losses"]]
    out.append("")
    if not rows:
        return out + ["B spanned no more domains than any arm, at any level, on any gang.", ""]
    out += ["| run | gang | pods x GPUs | request | vs arm | level | B spans (fewest) | arm spans (fewest) | why |",
            "|---|---|---|---|---|---|---|---|---|"]
    for k, loss in rows:
        b, other = loss["B"], loss[loss["arm"]]
        for lvl in loss["levels"]:
            fb = "-" if b["fewest"] is None else b["fewest"][lvl]
            fo = "-" if other["fewest"] is None else other["fewest"][lvl]
            out.append(f"| {k} | {loss['gang']} | {loss['pods']} x {loss['gpus']} | {loss['request']} | {loss['arm']} "
                       f"| {lvl} | {b['spans'][lvl]} ({fb}) | {other['spans'][lvl]} ({fo}) | {loss['why'][lvl]} |")
    return out + [""]
