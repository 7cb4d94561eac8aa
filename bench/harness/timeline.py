"""``python -m bench gangs --out DIR --arm B``: each gang's timeline in a finished run, the evidence
behind ``deadlocked_gangs`` (issue 11, the ``contention`` question).

Per gang, from ``DIR/jobs.json`` and ``DIR/arm-X/pods.json``: pods x GPUs, the topology request,
when its first member was created, when its first and last member were seen bound, how long it
waited (created -> whole), when it finished, and the NVLink domains it landed in. Then, per
waiting gang, the runs of consecutive 1 s samples in which the GPUs held by other *incomplete*
gangs covered what it lacked (the deadlock condition of ``analysis._deadlocks``): a run of one
sample is a Binding burst caught half done, a long run is a deadlock.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any


def render(out: Path, arm: str, run: int | None = None) -> str:
    jobs = {j["name"]: j for j in json.loads((out / "jobs.json").read_text()) if j["kind"] == "gang"}
    pods = json.loads((out / (f"run-{run}" if run else ".") / f"arm-{arm}" / "pods.json").read_text())
    by: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for p in pods:
        if p["job"] in jobs:
            by[p["job"]].append(p)
    lines = [f"# arm {arm}: gang timelines (s after t0; '-' = never)", "",
             "| gang | pods x GPUs | request | created | first bound | last bound | waited | finished | NVLink domains |",
             "|---|---|---|---|---|---|---|---|---|"]

    def t(x: float | None) -> str:
        return "-" if x is None else f"{x:.1f}"

    for name, members in sorted(by.items(), key=lambda kv: (min(m["created"] or 0 for m in kv[1]), kv[0])):
        j = jobs[name]
        created = min(m["created"] for m in members if m["created"] is not None)
        bound = [m["bound"] for m in members if m["bound"] is not None]
        whole = max(bound) if len(bound) == j["pods"] else None
        done = [m["finished"] for m in members if m["finished"] is not None]
        request = f"required {j['required']}" if j.get("required") else f"preferred {j['preferred']}" if j.get(
            "preferred") else "-"
        domains = sorted({m["node"].rsplit("-", 1)[0] for m in members if m["node"]})
        lines.append(f"| {name} | {j['pods']} x {j['gpus']} | {request} | {created:.1f} | {t(min(bound) if bound else None)} "
                     f"| {t(whole)} | {t(whole - created if whole is not None else None)} "
                     f"| {t(max(done) if len(done) == j['pods'] else None)} | {', '.join(domains) or '-'} |")
    lines += ["", "Samples where other incomplete gangs held what a waiting gang lacked (runs of seconds):", ""]
    end = int(max(max(p["bound"] or 0, p["finished"] or 0, p["created"] or 0) for p in pods)) + 1

    def held(name: str, s: int) -> int:
        return sum(1 for m in by[name] if m["bound"] is not None and m["bound"] <= s
                   and (m["finished"] is None or m["finished"] > s))

    def incomplete(name: str, s: int) -> bool:
        return sum(1 for m in by[name] if m["bound"] is not None and m["bound"] <= s) < jobs[name]["pods"]

    runs: dict[str, list[list[int]]] = defaultdict(list)
    for s in range(end + 1):
        partial = {n: held(n, s) * jobs[n]["gpus"] for n in by if incomplete(n, s)}
        for n in partial:
            created = min(m["created"] for m in by[n] if m["created"] is not None)
            lacking = (jobs[n]["pods"] - held(n, s)) * jobs[n]["gpus"]
            if s >= created and sum(v for o, v in partial.items() if o != n) >= lacking:
                if runs[n] and runs[n][-1][1] == s - 1:
                    runs[n][-1][1] = s
                else:
                    runs[n].append([s, s])
    for n, rs in sorted(runs.items()):
        lines.append(f"- {n}: {', '.join(f'{a}-{b} ({b - a + 1} s)' for a, b in rs)}")
    if not runs:
        lines.append("- none")
    return "\n".join(lines) + "\n"
