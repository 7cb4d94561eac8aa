"""The soak's verdicts, results.json and soak.png from the samples (``drive.Observed``).

Only samples taken while the load ran (``phase: load``) are fitted: the drain at the end is a
cluster emptying, not the process aging.
"""

from __future__ import annotations

import gzip
import json
import statistics
from pathlib import Path
from typing import Any, Callable

from bench.harness import report as harness_report
from bench.soak import stats

#: What is followed: key -> (unit, how to read it from a sample). Bounds come from the scenario.
SERIES: dict[str, tuple[str, Callable[[dict[str, Any]], float | None]]] = {
    "rss_mb": ("MB", lambda s: s.get("rss_mb")),
    "heap_kblocks": ("thousand blocks", lambda s: s.get("heap_kblocks")),
    "threads": ("threads", lambda s: s.get("threads")),
    "fds": ("descriptors", lambda s: s.get("fds")),
    "connections": ("connections", lambda s: s.get("connections")),
    "book_gangs": ("gangs", lambda s: (s.get("held") or {}).get("gangs")),
    "book_pods": ("pods", lambda s: sum(v for k, v in (s.get("held") or {}).items() if k.startswith("pods_"))
                  if s.get("held") else None),
}
#: Verb latency: the p99 of each window (``latency_window_s``) of calls.
LATENCY = {"filter_p99_ms": "filter", "bind_p99_ms": "bind"}


def analyse(samples: list[dict[str, Any]], workload: dict[str, Any]) -> dict[str, Any]:
    """Per metric: its fit, bound and verdict; per verb: its windows' percentiles."""
    warmup = float(workload.get("warmup_s", 300))
    bounds = workload.get("bounds") or {}
    load = [s for s in samples if s.get("phase") == "load"]
    out: dict[str, Any] = {}
    for key, (unit, get) in SERIES.items():
        out[key] = _entry(stats.fit(((s["segment"], s["t"], get(s)) for s in load), warmup),
                          bounds.get(key), unit, [get(s) for s in load])
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
            "fit": f.as_dict() if f else None,
            "median": round(statistics.median(vals), 3) if vals else None,
            "max": round(max(vals), 3) if vals else None,
            "end": round(vals[-1], 3) if vals else None}


def table(doc: dict[str, Any]) -> str:
    """The verdicts as a markdown table (printed and copied into bench/README.md)."""
    lines = ["| metric | median | end | slope per hour (95 % noise) | bound per hour | verdict |",
             "|---|---|---|---|---|---|"]
    for key, e in doc["metrics"].items():
        f = e["fit"]
        slope = f"{f['slope_per_h']:+.3g} ± {f['noise_per_h']:.2g} {e['unit']}" if f else "n/a"
        lines.append(f"| {key} | {e['median']} | {e['end']} | {slope} | {e['bound_per_h']} | **{e['verdict']}** |")
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
    panels = [("rss_mb", "RSS (MB)"), ("heap_kblocks", "Python heap (thousand allocated blocks)"),
              ("threads", "threads"), ("fds", "file descriptors"), ("connections", "open connections"),
              ("book_gangs", "gang book: gangs"), ("book_pods", "gang book: pods"),
              ("filter_p99_ms", "verb p99 per window (ms)")]
    fig, axes = plt.subplots(4, 2, figsize=(13, 12), sharex=True)
    for ax, (key, title) in zip(axes.flat, panels):
        ax.set_title(title, fontsize=10)
        for r in restarts:
            ax.axvline(r["t"] / 60, color="tab:red", lw=0.8, ls=":")
        ax.axvline(duration / 60, color="gray", lw=0.8, ls="--")
        if key == "filter_p99_ms":
            for verb, color in (("filter", "tab:blue"), ("bind", "tab:orange")):
                rows = [w for w in analysed["windows"][verb] if w["p99_ms"] is not None]
                ax.plot([w["t"] / 60 for w in rows], [w["p99_ms"] for w in rows], ".", ms=3, color=color, label=verb)
            ax.set_yscale("log")
            ax.legend(fontsize=8)
            continue
        get = SERIES[key][1]
        for seg in dict.fromkeys(s["segment"] for s in samples):
            pts = [(s["t"] / 60, get(s)) for s in samples if s["segment"] == seg and get(s) is not None]
            ax.plot([p[0] for p in pts], [p[1] for p in pts], lw=0.8, color="tab:blue")
        e = analysed["metrics"].get(key)
        if e and e["fit"]:
            f = e["fit"]
            ax.text(0.01, 0.95, f"slope {f['slope_per_h']:+.3g} ± {f['noise_per_h']:.2g} {e['unit']}/h "
                    f"(bound {e['bound_per_h']}): {e['verdict']}", transform=ax.transAxes, fontsize=8, va="top")
    for ax in axes[-1]:
        ax.set_xlabel("minutes (dotted: extender restarts; dashed: load ends)")
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
