"""The soak's verdicts, results.json and soak.png from the samples (``drive.Observed``).

Only samples taken while the load ran (``phase: load``) are fitted: the drain at the end is a
cluster emptying, not the process aging.

What the service holds follows the load: more gangs wait when the seeded arrivals bunch up. So
the book is also compared with what the harness's own watch saw at the same moment (pods.json):
``waiting_gangs`` (first member created, not yet every member bound), ``recent_gangs`` (every
member bound within the book's collection delay: railyard forgets a gang that holds nothing
``GC_SECONDS`` after it bound, at a collection that runs every ``GC_SECONDS``) and
``running_pods`` (bound, not finished). The book's gangs beyond the waiting and recent ones
(at most 0 when nothing is kept too long) and its running pods beyond the running ones should
stay level whatever the load; a book that keeps what ended grows there.
"""

from __future__ import annotations

import gzip
import json
import math
import statistics
from pathlib import Path
from typing import Any, Callable

from bench.harness import report as harness_report
from bench.soak import stats
from extender.core.gangs.book import GC_SECONDS

#: What is followed: key -> (unit, how to read it from a sample). Bounds come from the scenario.
SERIES: dict[str, tuple[str, Callable[[dict[str, Any]], float | None]]] = {
    "rss_mb": ("MB", lambda s: s.get("rss_mb")),
    "heap_kblocks": ("thousand blocks", lambda s: s.get("heap_kblocks")),
    "threads": ("threads", lambda s: s.get("threads")),
    "fds": ("descriptors", lambda s: s.get("fds")),
    "connections": ("connections", lambda s: s.get("connections")),
    "book_gangs": ("gangs", lambda s: _held(s, "gangs")),
    "book_pods": ("pods", lambda s: sum(v for k, v in (s.get("held") or {}).items() if k.startswith("pods_"))
                  if s.get("held") else None),
    "book_gangs_beyond_harness": ("gangs", lambda s: _minus(_held(s, "gangs"), _plus(s.get("waiting_gangs"),
                                                                                      s.get("recent_gangs")))),
    "book_running_beyond_running": ("pods", lambda s: _minus(_held(s, "pods_running"), s.get("running_pods"))),
}


#: What the process holds that a metric follows (stats module docstring): key -> names of the
#: covariates (``COVARIATES``) its slope is fitted at equal values of. The verdict is on that
#: slope; the slope without them is reported beside it.
AT_EQUAL: dict[str, tuple[str, ...]] = {
    "rss_mb": ("bind_threads", "cached_pods", "book_gangs"),
    "heap_kblocks": ("bind_threads", "cached_pods", "book_gangs"),
    "threads": ("bind_threads",),
    "fds": ("client_sockets",),
}
COVARIATES: dict[str, Callable[[dict[str, Any]], float | None]] = {
    "bind_threads": lambda s: (s.get("python_threads") or {}).get("bind", 0.0) if "python_threads" in s else None,
    # Sockets railyard did not accept: its listeners, its watches and the keep-alive pool of its
    # writes to the API server (Bindings, events; at most 64 connections, ``KubeBinder``'s pool, each
    # closed after 15 s idle), which opens a connection per Binding of a burst at once.
    "client_sockets": lambda s: _minus(s.get("socket_fds"), s.get("connections")),
    "cached_pods": lambda s: (s.get("cache") or {}).get("pods"),
    "book_gangs": lambda s: _held(s, "gangs"),
}


def _held(s: dict[str, Any], kind: str) -> float | None:
    return (s.get("held") or {}).get(kind)


def _minus(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


def _plus(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a + b


def with_outside(samples: list[dict[str, Any]], pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``samples`` with ``waiting_gangs``, ``recent_gangs`` and ``running_pods`` at each sample's time, from the
    harness's pod records (``runner.PodRecord`` as dicts; a gang's members are named after
    their job plus an index, a lone pod is named as its job)."""
    members: dict[str, list[dict[str, Any]]] = {}
    for p in pods:
        if p["name"] != p["job"] and p.get("created") is not None:
            members.setdefault(p["job"], []).append(p)
    whole = {job: max(m["bound"] for m in ms) if all(m["bound"] is not None for m in ms) else math.inf
             for job, ms in members.items()}
    waiting = [(min(m["created"] for m in ms), whole[job]) for job, ms in members.items()]
    recent = [(t, t + RECENT_S) for t in whole.values() if t != math.inf]
    running = [(p["bound"], p["finished"] if p["finished"] is not None else math.inf)
               for p in pods if p.get("bound") is not None]
    ts = [s["t"] for s in samples]
    return [dict(s, waiting_gangs=w, recent_gangs=g, running_pods=r)
            for s, w, g, r in zip(samples, stats.covering(waiting, ts), stats.covering(recent, ts),
                                  stats.covering(running, ts))]
#: Seconds the book may keep a whole gang that holds nothing: ``GC_SECONDS`` after it bound, at
#: the next collection (every ``GC_SECONDS``), plus the sampling and watch delays.
RECENT_S = 2 * GC_SECONDS + 10

#: Verb latency: the p99 of each window (``latency_window_s``) of calls.
LATENCY = {"filter_p99_ms": "filter", "bind_p99_ms": "bind"}


def analyse(samples: list[dict[str, Any]], workload: dict[str, Any]) -> dict[str, Any]:
    """Per metric: its fit, bound and verdict; per verb: its windows' percentiles. ``samples``
    as ``with_outside`` returns them (else the comparisons with the harness's view are empty)."""
    warmup = float(workload.get("warmup_s", 300))
    bounds = workload.get("bounds") or {}
    load = [s for s in samples if s.get("phase") == "load"]
    out: dict[str, Any] = {}
    for key, (unit, get) in SERIES.items():
        raw = stats.fit(((s["segment"], s["t"], get(s)) for s in load), warmup)
        # Older soaks' samples lack some covariates: fit at equal values of those they have.
        names = tuple(c for c in AT_EQUAL.get(key, ()) if any(COVARIATES[c](s) is not None for s in load))
        f = stats.fit(((s["segment"], s["t"], get(s), *(COVARIATES[c](s) for c in names)) for s in load), warmup) \
            if names else raw
        out[key] = _entry(f, bounds.get(key), unit, [get(s) for s in load])
        if names:
            out[key]["at_equal"] = {c: round(b, 4) for c, b in zip(names, f.per_covariate)} if f else list(names)
            out[key]["fit_without"] = raw.as_dict() if raw else None
    windows = {verb: stats.window_quantiles(load, verb, float(workload.get("latency_window_s", 60)))
               for verb in LATENCY.values()}
    for key, verb in LATENCY.items():
        rows = [w for w in windows[verb] if w["p99_ms"] is not None]
        entry = _entry(stats.fit(((w["segment"], w["t"], w["p99_ms"]) for w in rows), warmup),
                       bounds.get(key), "ms", [w["p99_ms"] for w in rows])
        entry["windows"] = len(rows)
        entry["calls"] = sum(w["calls"] for w in windows[verb])
        p50 = [w["p50_ms"] for w in rows]
        entry["p50_ms_median"] = round(statistics.median(p50), 3) if p50 else None
        out[key] = entry
    return {"metrics": out, "windows": windows}


def _entry(f: stats.Fit | None, spec: float | str | None, unit: str, values: list[float | None]) -> dict[str, Any]:
    """``spec``: a bound per hour in the series' unit, or ``"N%"`` of the series' median (for
    latencies, whose level depends on the machine more than on railyard)."""
    vals = [v for v in values if v is not None]
    bound = spec
    if isinstance(spec, str):
        bound = float(spec.rstrip("%")) / 100 * statistics.median(vals) if vals else None
    return {"unit": unit, "bound_per_h": None if bound is None else round(float(bound), 4),
            **({"bound_spec": f"{spec} of the median per hour"} if isinstance(spec, str) else {}),
            "verdict": stats.verdict(f, float(bound)) if bound is not None else "no bound",
            "rises": None if f is None else f.slope_per_h - f.noise_per_h > 0,
            "fit": f.as_dict() if f else None,
            "median": round(statistics.median(vals), 3) if vals else None,
            "max": round(max(vals), 3) if vals else None,
            "end": round(vals[-1], 3) if vals else None}


def table(doc: dict[str, Any]) -> str:
    """The verdicts as a markdown table (printed and copied into bench/README.md)."""
    lines = ["| metric | median | end | slope per hour (95 % noise) | at equal | without them | "
             "rises (slope - noise > 0) | bound per hour | verdict |",
             "|---|---|---|---|---|---|---|---|---|"]

    def slope(f: dict[str, Any] | None, unit: str) -> str:
        return f"{f['slope_per_h']:+.3g} ± {f['noise_per_h']:.2g} {unit}" if f else "n/a"

    for key, e in doc["metrics"].items():
        at = e.get("at_equal")
        held = ", ".join(f"{c} ({b:+.3g} each)" for c, b in at.items()) if isinstance(at, dict) else \
            ", ".join(at or []) or "-"
        without = slope(e.get("fit_without"), e["unit"]) if "fit_without" in e else "-"
        rises = {True: "yes", False: "no", None: "n/a"}[e["rises"]]
        lines.append(f"| {key} | {e['median']} | {e['end']} | {slope(e['fit'], e['unit'])} | {held} | {without} | "
                     f"{rises} | {e['bound_per_h']} | **{e['verdict']}** |")
    return "\n".join(lines)


def write(out: Path, meta: dict[str, Any], analysed: dict[str, Any], samples: list[dict[str, Any]],
          restarts: list[dict[str, Any]], duration: float) -> dict[str, Any]:
    doc = {**meta, "metrics": analysed["metrics"]}
    (out / "results.json").write_text(json.dumps(doc, indent=1))
    with gzip.open(out / "samples.jsonl.gz", "wt") as f:
        f.writelines(json.dumps(s) + "\n" for s in samples)
    plot(out / "soak.png", samples, analysed, restarts, duration)
    return doc


def plot(path: Path, samples: list[dict[str, Any]], analysed: dict[str, Any],
         restarts: list[dict[str, Any]], duration: float) -> None:
    plt = harness_report._pyplot()
    # (title, series whose fit is written in the panel, [(label, series) drawn])
    panels = [
        ("RSS (MB)", "rss_mb", [("", "rss_mb")]),
        ("Python heap (thousand allocated blocks)", "heap_kblocks", [("", "heap_kblocks")]),
        ("threads", "threads", [("all", "threads"), ("bind pool", "bind_threads")]),
        ("file descriptors", "fds", [("all", "fds"), ("sockets railyard did not accept", "client_sockets")]),
        ("open connections", "connections", [("", "connections")]),
        ("gang book: gangs", "book_gangs_beyond_harness",
         [("held", "book_gangs"), ("held beyond those waiting or whole < 130 s ago (harness)",
                                   "book_gangs_beyond_harness")]),
        ("gang book: pods", "book_running_beyond_running",
         [("all indexes", "book_pods"), ("running beyond running (harness)", "book_running_beyond_running")]),
        ("verb p99 per window (ms)", "", []),
    ]
    fig, axes = plt.subplots(4, 2, figsize=(13, 12), sharex=True)
    for ax, (title, fitted, lines) in zip(axes.flat, panels):
        ax.set_title(title, fontsize=10)
        for r in restarts:
            ax.axvline(r["t"] / 60, color="tab:red", lw=0.8, ls=":")
        ax.axvline(duration / 60, color="gray", lw=0.8, ls="--")
        if not lines:
            for verb, color in (("filter", "tab:blue"), ("bind", "tab:orange")):
                rows = [w for w in analysed["windows"][verb] if w["p99_ms"] is not None]
                ax.plot([w["t"] / 60 for w in rows], [w["p99_ms"] for w in rows], ".", ms=3, color=color, label=verb)
            ax.set_yscale("log")
            ax.legend(fontsize=8, loc="lower left")
            continue
        for (label, key), color in zip(lines, ("tab:blue", "tab:green")):
            get = SERIES[key][1] if key in SERIES else COVARIATES[key]
            for n, seg in enumerate(dict.fromkeys(s["segment"] for s in samples)):
                pts = [(s["t"] / 60, get(s)) for s in samples if s["segment"] == seg and get(s) is not None]
                ax.plot([p[0] for p in pts], [p[1] for p in pts], lw=0.8, color=color,
                        label=label if label and n == 0 else None)
        if any(label for label, _ in lines):
            ax.legend(fontsize=8, loc="lower right")
        e = analysed["metrics"].get(fitted)
        if e and e["fit"]:
            f = e["fit"]
            at = " at equal load" if e.get("at_equal") else ""
            ax.text(0.01, 0.95, f"{fitted}: slope{at} {f['slope_per_h']:+.3g} ± {f['noise_per_h']:.2g} {e['unit']}/h "
                    f"(bound {e['bound_per_h']}): {e['verdict']}", transform=ax.transAxes, fontsize=8, va="top")
    for ax in axes[-1]:
        ax.set_xlabel("minutes (dotted: extender restarts; dashed: load ends)")
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
