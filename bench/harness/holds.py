"""What railyard held for gangs, as its own topology view showed it (issue 23 item 3).

The watch sees bindings, not what railyard reserved: a planned gang's slots before its members
bind and, above all, a starving gang's *drain* (``extender/core/gangs/starvation.py``), which
holds a whole domain's free GPUs for minutes and may be given back with nothing bound on it.
A gang planned wide while a drain held the narrow room looks, from the watch alone, like a
planner fault. So in arms with railyard the harness polls its topology view
(``/topology.json``, docs/view.md) about once a second and keeps, per poll that changed, each
node's GPUs held by each gang (reservations and drains alike). ``fewest_on_view`` then asks the
question of ``pergang.fewest_domains`` on the GPUs free around the gang's plan less what railyard
held for other gangs then.

This is railyard's account of itself, used only to say *why* B spanned more domains than
another arm (``pergang._why``: ``reserved``); spans, fewest and every other measure stay the
watch's.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from typing import Any, Callable

from bench.harness import pergang

#: Seconds between two polls of the view (its snapshot is renewed at most once a second).
POLL_S = 1.0


def held_by_node(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """From a /topology.json document: node -> ``{"gpus", "used", "held": {job: GPUs}}`` for
    the nodes where some gang holds GPUs. A gang is named by its key's last part (its pod
    group's name, the bench's job name)."""
    out: dict[str, dict[str, Any]] = {}

    def walk(dom: dict[str, Any]) -> None:
        for node in dom.get("nodes") or ():
            if node.get("held"):
                held: dict[str, int] = {}
                for key, gpus in node["held"].items():
                    job = key.rsplit("/", 1)[-1]
                    held[job] = held.get(job, 0) + int(gpus)
                out[node["name"]] = {"gpus": int(node["gpus"]), "used": int(node["used"]), "held": held}
        for child in dom.get("children") or ():
            walk(child)

    walk(doc.get("tree") or {})
    return out


class ViewPoller:
    """Polls ``url`` every ``POLL_S`` on a thread; ``polls``: ``{"t", "nodes"}`` (``held_by_node``)
    each time it changed, ``t`` seconds after ``t0[0]``. A failed poll is counted, not fatal."""

    def __init__(self, url: str, t0: list[float], fetch: Callable[[str], dict[str, Any]] | None = None) -> None:
        self.url, self.t0 = url, t0
        self.fetch = fetch or _fetch
        self.polls: list[dict[str, Any]] = []
        self.failures = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-view-poller", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def poll_once(self) -> None:
        try:
            nodes = held_by_node(self.fetch(self.url))
        except (OSError, ValueError):
            self.failures += 1
            return
        if not self.polls or self.polls[-1]["nodes"] != nodes:
            self.polls.append({"t": round(time.monotonic() - self.t0[0], 3), "nodes": nodes})

    def _run(self) -> None:
        while not self._stop.wait(POLL_S):
            self.poll_once()


def _fetch(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=5) as r:
        doc: dict[str, Any] = json.loads(r.read())
        return doc


def planned_at(polls: list[dict[str, Any]], job: str, created: float, first_bound: float,
               bound: float) -> tuple[tuple[float, ...], dict[str, Any]] | None:
    """(moments, what railyard held then) at its plan of ``job``. The plan: the last poll from
    the gang's first creation to its first binding where what it held changed (a starving gang
    holds its drains before that, and a drain is not its plan), else the first poll up to its
    last binding where it held GPUs; the moments are that poll's and the one before it (the
    plan came in between). For a gang planned and bound between two polls: what was held when
    its first member bound (the last poll before: polls are kept only when something changed).
    None when no poll came before."""
    def mine(poll: dict[str, Any]) -> dict[str, int]:
        return {node: n["held"][job] for node, n in poll["nodes"].items() if job in n["held"]}

    plan: int | None = None
    last: dict[str, int] = {}
    for i, poll in enumerate(polls):
        if created <= poll["t"] <= first_bound and mine(poll) and mine(poll) != last:
            plan = i
        last = mine(poll)
    if plan is None:
        plan = next((i for i, poll in enumerate(polls) if first_bound < poll["t"] <= bound and mine(poll)), None)
    if plan is not None:
        before = polls[plan - 1]["t"] if plan and polls[plan - 1]["t"] >= created else polls[plan]["t"]
        return (before, polls[plan]["t"]), polls[plan]
    before_bind = [p for p in polls if p["t"] <= first_bound]
    return ((first_bound,), before_bind[-1]) if before_bind else None


def fewest_on_view(poll: dict[str, Any], free: dict[str, int], paths: dict[str, tuple[str, ...]], job: Any) -> \
        dict[str, int] | None:
    """``pergang.fewest_domains`` on ``free`` (the watch's free GPUs at ``poll``'s time, the gang's
    own pods not counted) less, per node, what railyard held for *other* gangs at ``poll``: held
    GPUs a pod still uses (a drain waits for them) are not taken twice."""
    free = dict(free)
    for node, n in poll["nodes"].items():
        if node not in free:
            continue
        others = sum(g for name, g in n["held"].items() if name != job.name)
        free[node] = max(free[node] - min(others, max(n["gpus"] - n["used"], 0)), 0)
    return pergang.fewest_domains(paths, free, job.pods, job.gpus, job.required)


def loosest(bounds: list[dict[str, int] | None]) -> dict[str, int] | None:
    """Per level, the most domains of the ``bounds`` that held the gang (None: none did). A plan
    made between two moments is explained by either: the free GPUs changed in between."""
    held = [b for b in bounds if b is not None]
    return {lvl: max(b[lvl] for b in held) for lvl in held[0]} if held else None
