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
- ``fewest_narrowest``: the same moment, inside one domain of the narrowest level that holds the
  gang (the placement ``narrowest_domain_fraction`` asks for). Below that level it can be more
  than ``fewest``: 4 nodes free in one block over 4 leaves, 2 in one leaf of another block give
  ``fewest`` 3 leaves (over 2 blocks) and ``fewest_narrowest`` 4 (in 1 block).
- ``fewest_created``: the same when its first member was created. A gang is planned somewhere
  between the two moments (railyard plans it when its first member reaches the filter, Kueue
  when it admits it), and GPUs free at one of them may not have been at the other.
- ``fewest_on_view`` (arms with railyard, ``holds``): the same at railyard's plan (the poll of
  its topology view where what the gang held last changed before it bound, and the poll before:
  ``holds.planned_at``) on the free GPUs less what railyard held for other gangs then: their
  reservations and starvation drains, which the watch cannot see.
- ``fewest_held`` (``analysis.held_fewest``): the same at the first moment between the first
  member's creation and the first binding when the gang fits on the free GPUs less everything
  other pods took after that moment, until ``HELD_S`` after it bound: as if all of that had been
  held for them (railyard reserves a planned gang's GPUs; the watch sees only the bindings).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

LEVELS = ("cluster", "block", "leaf", "nvl", "host")
"""Depth index -> level name; a domain at depth d is a node's path truncated to d."""
SPAN_LEVELS = LEVELS[1:]
HELD_S = 2.0
"""Pods bound this soon after a gang were most likely placed (their GPUs held) before it."""
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


def fewest_in_narrowest(paths: dict[str, tuple[str, ...]], free: dict[str, int], pods: int, gpus: int,
                        within: str | None = None) -> dict[str, int] | None:
    """``fewest_domains`` inside one domain of the deepest level (at or below ``within``) with a
    domain that holds the gang: the fewest below it for a gang kept in its narrowest domain."""
    for depth in range(len(LEVELS) - 1, DEPTH[within] if within else 0, -1):
        fewest = fewest_domains(paths, free, pods, gpus, LEVELS[depth])
        if fewest is not None:
            return fewest
    return fewest_domains(paths, free, pods, gpus, within)


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
           free: dict[str, int], at_creation: dict[str, int] | None, at: float) -> dict[str, Any]:
    """One whole-bound gang's entry of ``gang_records`` (but ``fewest_held``): ``free`` as it stood
    when its last member bound, ``at_creation`` when its first member was created."""
    def fewest(gpus: dict[str, int] | None) -> dict[str, int] | None:
        return None if gpus is None else fewest_domains(paths, gpus, job.pods, job.gpus, job.required)

    return {"pods": job.pods, "gpus": job.gpus, "request": request(job), "bound_at_s": round(at, 3),
            "spans": spans(member_paths), "fewest": fewest(free), "fewest_created": fewest(at_creation),
            "fewest_narrowest": fewest_in_narrowest(paths, free, job.pods, job.gpus, job.required)}


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
    ``cluster`` when B was at its fewest when its last member bound or when its first was
    created (the other arm's cluster had more room); ``narrowest`` when B was within
    ``fewest_narrowest`` at this level and every level above (B kept the gang in its narrowest
    domain, and fewer domains here would have taken a wider one above); ``held`` when B was within
    ``fewest_held`` (GPUs other pods took later may have been reserved for them when it was
    planned); ``reserved`` when B was within ``fewest_on_view`` (at its plan, railyard's own
    view held the tighter room for other gangs: reservations, starvation drains); else
    ``planner``."""
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
            why = {lvl: _why(mine, lvl) for lvl in levels}
            losses.append({"gang": g, "arm": name, "pods": mine["pods"], "gpus": mine["gpus"],
                           "request": mine["request"], "levels": levels, "why": why,
                           "B": _brief(mine), name: _brief(other)})
    return {"summary": summary, "losses": losses}


def _why(rec: dict[str, Any], lvl: str) -> str:
    """Why a gang spans ``rec["spans"][lvl]`` domains at ``lvl`` (see ``compare``). A moment with
    no room for the gang explains nothing, except at its binding (the watch's view was behind)."""
    def within(key: str, at: str = lvl) -> bool:
        return rec.get(key) is not None and rec["spans"][at] <= rec[key][at]

    if rec.get("fewest") is None or within("fewest") or within("fewest_created"):
        return "cluster"
    if all(within("fewest_narrowest", up) for up in SPAN_LEVELS[:SPAN_LEVELS.index(lvl) + 1]):
        return "narrowest"
    if within("fewest_held"):
        return "held"
    return "reserved" if within("fewest_on_view") else "planner"


def _brief(rec: dict[str, Any]) -> dict[str, Any]:
    return {k: rec.get(k) for k in ("spans", "fewest", "fewest_created", "fewest_narrowest", "fewest_held",
                                    "fewest_on_view", "bound_at_s")}


def markdown(doc: dict[str, Any]) -> list[str]:
    """report.md's section: per run, B against each arm gang by gang, and every gang B lost."""
    runs = [(run["run"], run.get("gang_comparison")) for run in doc.get("runs") or []]
    runs = [(k, c) for k, c in runs if c and c["summary"]]
    if not runs:
        return []
    out = ["## Gang by gang (issue 23): where B spanned more domains than another arm", "",
           "Same gangs in every arm of a run. *Spans*: distinct domains a gang's members are on; *fewest*: the "
           "fewest it could have spanned on the free GPUs as the harness saw them when its last member bound "
           "(inside its required level). Why, per level: **cluster** = B was at its fewest then or when its first "
           "member was created (B plans a gang in between), the other arm's cluster had more room (arrival "
           "timing, what else ran); **narrowest** = B kept the gang in the narrowest domain that held it then, "
           "at the fewest there: fewer at this level would have spanned more domains above it; **held** = B was "
           "at its fewest at the first moment between its first member's creation and its binding when it fit, "
           "on the GPUs free then less all that other pods took from then until "
           f"{HELD_S:g} s after it bound (reservations the watch cannot see); **reserved** = B was at its fewest "
           "on the GPUs free when railyard planned it (its view just before or just after the plan) less those "
           "railyard held for other gangs then (their reservations and starvation drains, from railyard's "
           "topology view, polled each second); **planner** = B spanned more than even that.", "",
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
