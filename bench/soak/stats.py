"""The soak's arithmetic (issue 25 item 1): slopes per hour with their noise, verb latency
percentiles per time window, and the verdict against a stated bound. Pure: lists in, numbers out.

A sample belongs to a *segment*: one extender process (a restart starts a new one, whose memory
and counters start again). Slopes are fitted **within** segments and pooled (least squares with
one intercept per segment, one common slope), after dropping each segment's first ``warmup_s``
(caches filling, imports, the first gangs: growth that stops is not a leak).

The noise bound: consecutive samples of a process are not independent (a 5 s sample of RSS looks
much like the one before), so the ordinary standard error of a slope is too small. It is widened
by the AR(1) factor sqrt((1 + r) / (1 - r)), r the lag-1 autocorrelation of the residuals, and
the bound is two of those standard errors (about 95 %). A metric is **flat** when its slope plus
that noise bound is under the stated bound, **grows** when its slope minus the noise is over it,
and **unclear** otherwise (the run was too noisy or too short to tell).
"""

from __future__ import annotations

import math
from bisect import bisect_right
from dataclasses import asdict, dataclass
from typing import Any, Iterable, Sequence

from bench.harness.analysis import histogram_quantile

HOUR = 3600.0


@dataclass(frozen=True)
class Fit:
    slope_per_h: float
    """Pooled within-segment least-squares slope, units per hour."""
    noise_per_h: float
    """Two standard errors of the slope, widened for autocorrelation (about a 95 % bound)."""
    n: int
    """Points used (after each segment's warm-up)."""
    segments: int
    lag1_autocorrelation: float
    first: float
    last: float
    """Mean of the first and of the last 10 % of the points used (end values, for the reader)."""

    def as_dict(self) -> dict[str, Any]:
        return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in asdict(self).items()}


def fit(points: Iterable[tuple[Any, float, float]], warmup_s: float = 0.0) -> Fit | None:
    """Least squares of ``(segment, t seconds, y)`` with one intercept per segment and one
    slope; None when fewer than 3 points per the whole fit survive the warm-up or time does
    not vary within any segment."""
    by_seg: dict[Any, list[tuple[float, float]]] = {}
    for seg, t, y in points:
        if y is None or (isinstance(y, float) and math.isnan(y)):
            continue
        by_seg.setdefault(seg, []).append((t, y))
    kept: list[list[tuple[float, float]]] = []
    for pts in by_seg.values():
        pts.sort()
        start = pts[0][0]
        pts = [(t, y) for t, y in pts if t - start >= warmup_s]
        if len(pts) >= 2:
            kept.append(pts)
    n = sum(len(p) for p in kept)
    if n < 3:
        return None
    sxx = sxy = 0.0
    for pts in kept:
        tm = sum(t for t, _ in pts) / len(pts)
        ym = sum(y for _, y in pts) / len(pts)
        sxx += sum((t - tm) ** 2 for t, _ in pts)
        sxy += sum((t - tm) * (y - ym) for t, y in pts)
    if sxx <= 0:
        return None
    b = sxy / sxx
    residuals: list[list[float]] = []
    for pts in kept:
        tm = sum(t for t, _ in pts) / len(pts)
        ym = sum(y for _, y in pts) / len(pts)
        residuals.append([(y - ym) - b * (t - tm) for t, y in pts])
    dof = n - len(kept) - 1
    sse = sum(e * e for seg in residuals for e in seg)
    se = math.sqrt(sse / dof / sxx) if dof > 0 else math.inf
    r = lag1(residuals)
    se *= math.sqrt((1 + r) / (1 - r))
    ys = [y for pts in sorted(kept, key=lambda p: p[0][0]) for _, y in pts]
    tenth = max(1, len(ys) // 10)
    return Fit(slope_per_h=b * HOUR, noise_per_h=2 * se * HOUR, n=n, segments=len(kept),
               lag1_autocorrelation=r, first=sum(ys[:tenth]) / tenth, last=sum(ys[-tenth:]) / tenth)


def lag1(residuals: Sequence[Sequence[float]]) -> float:
    """Lag-1 autocorrelation of residuals pooled over segments, clipped to [0, 0.95]: negative
    correlation would narrow the bound, and near 1 the series holds almost no information (the
    bound is then at least sqrt(39) ~ 6x the naive one)."""
    num = sum(a * b for seg in residuals for a, b in zip(seg, seg[1:]))
    den = sum(e * e for seg in residuals for e in seg)
    if den <= 0:
        return 0.0
    return min(max(num / den, 0.0), 0.95)


def verdict(f: Fit | None, bound_per_h: float) -> str:
    """``flat``, ``grows`` or ``unclear`` against ``bound_per_h`` (see the module docstring)."""
    if f is None:
        return "unclear"
    if f.slope_per_h + f.noise_per_h < bound_per_h:
        return "flat"
    if f.slope_per_h - f.noise_per_h > bound_per_h:
        return "grows"
    return "unclear"


def window_quantiles(samples: Sequence[dict[str, Any]], verb: str, width_s: float,
                     qs: tuple[float, ...] = (0.5, 0.99)) -> list[dict[str, Any]]:
    """Per window of about ``width_s`` inside one segment: the calls of ``verb`` answered in it
    (the difference of two cumulative histograms of the same process) and their quantiles.

    Each sample has ``t``, ``segment`` and ``buckets[verb]``: ``[[le, cumulative count], ...]``
    (le may be ``inf``). A window with no call has quantiles None."""
    out: list[dict[str, Any]] = []
    start: dict[str, Any] | None = None
    for s in samples:
        if verb not in (s.get("buckets") or {}):
            continue
        if start is None or s["segment"] != start["segment"]:
            start = s
            continue
        if s["t"] - start["t"] < width_s:
            continue
        a = dict((float(le), c) for le, c in start["buckets"][verb])
        diff = [(float(le), c - a.get(float(le), 0.0)) for le, c in s["buckets"][verb]]
        diff.sort()
        count = diff[-1][1] if diff else 0
        row: dict[str, Any] = {"t": (start["t"] + s["t"]) / 2, "segment": s["segment"], "calls": int(count)}
        for q in qs:
            v = histogram_quantile(diff, q) if count > 0 else None
            row[f"p{round(q * 100):d}_ms"] = None if v is None else v * 1000
        out.append(row)
        start = s
    return out


def covering(intervals: Sequence[tuple[float, float]], ts: Sequence[float]) -> list[int]:
    """How many of the ``[start, end)`` intervals hold each time in ``ts`` (end ``inf``: open)."""
    starts = sorted(s for s, _ in intervals)
    ends = sorted(e for _, e in intervals)
    return [bisect_right(starts, t) - bisect_right(ends, t) for t in ts]
