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

What a process holds also follows its load: a burst of held bind calls starts bind threads (each
with its stack), a burst of Bindings opens connections of the write pool, more waiting gangs hold
more pods. A soak's seeded load is not level over an hour, so a fit may also take *covariates*,
what the process holds at each sample, and then its slope is the growth in time **at equal
load**, the part a leak would show. The covariates are bounded by construction (the bind pool and
the write pool by their caps, the book by the gangs that exist), and each one's coefficient is
reported beside the slope.
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
    per_covariate: tuple[float, ...] = ()
    """The fitted change of the metric per unit of each covariate (e.g. MB per bind thread)."""

    def as_dict(self) -> dict[str, Any]:
        def r(v: Any) -> Any:
            return round(v, 4) if isinstance(v, float) else [r(x) for x in v] if isinstance(v, tuple) else v
        return {k: r(v) for k, v in asdict(self).items()}


def fit(points: Iterable[tuple[Any, ...]], warmup_s: float = 0.0) -> Fit | None:
    """Least squares of ``(segment, t seconds, y, *covariates)`` with one intercept per segment,
    one slope in time and one coefficient per covariate (what the process holds at that moment:
    a leak grows with time at equal load, memory that follows the load does not); None when
    fewer than 3 points survive the warm-up, time does not vary within any segment, or time and
    the covariates are collinear. The slope's noise comes from ``(X'X)^-1`` of the time column."""
    by_seg: dict[Any, list[tuple[float, ...]]] = {}
    for seg, t, y, *xs in points:
        if any(v is None or (isinstance(v, float) and math.isnan(v)) for v in (y, *xs)):
            continue
        by_seg.setdefault(seg, []).append((t, y, *xs))
    kept: list[list[tuple[float, ...]]] = []
    for pts in by_seg.values():
        pts.sort()
        start = pts[0][0]
        pts = [p for p in pts if p[0] - start >= warmup_s]
        if len(pts) >= 2:
            kept.append(pts)
    n = sum(len(p) for p in kept)
    if n < 3:
        return None
    # Demean every column within its segment (the per-segment intercepts), then solve the
    # normal equations of the regressors (t, covariates...) on y.
    rows: list[list[list[float]]] = []  # per segment: [[t, x1.., y], ...] demeaned
    for pts in kept:
        means = [sum(col) / len(pts) for col in zip(*pts)]
        rows.append([[p[0] - means[0], *(v - m for v, m in zip(p[2:], means[2:])), p[1] - means[1]] for p in pts])
    width = len(rows[0][0]) - 1
    # A covariate that never varies inside a process says nothing: it is left out (coefficient 0).
    used = [i for i in range(width) if i == 0 or any(r[i] != 0.0 for seg in rows for r in seg)]
    rows = [[[r[i] for i in used] + [r[width]] for r in seg] for seg in rows]
    k = len(used)
    xtx = [[sum(r[i] * r[j] for seg in rows for r in seg) for j in range(k)] for i in range(k)]
    xty = [sum(r[i] * r[k] for seg in rows for r in seg) for i in range(k)]
    inv = _inverse(xtx)
    if inv is None:
        return None
    beta = [sum(inv[i][j] * xty[j] for j in range(k)) for i in range(k)]
    residuals = [[r[k] - sum(b * v for b, v in zip(beta, r[:k])) for r in seg] for seg in rows]
    per_covariate = dict(zip(used[1:], beta[1:]))
    dof = n - len(kept) - k
    sse = sum(e * e for seg in residuals for e in seg)
    se = math.sqrt(sse / dof * inv[0][0]) if dof > 0 else math.inf
    r = lag1(residuals)
    se *= math.sqrt((1 + r) / (1 - r))
    ys = [p[1] for pts in sorted(kept, key=lambda p: p[0][0]) for p in pts]
    tenth = max(1, len(ys) // 10)
    return Fit(slope_per_h=beta[0] * HOUR, noise_per_h=2 * se * HOUR, n=n, segments=len(kept),
               lag1_autocorrelation=r, first=sum(ys[:tenth]) / tenth, last=sum(ys[-tenth:]) / tenth,
               per_covariate=tuple(per_covariate.get(i, 0.0) for i in range(1, width)))


def _inverse(m: list[list[float]]) -> list[list[float]] | None:
    """Gauss-Jordan with partial pivoting; None when (nearly) singular."""
    k = len(m)
    a = [row[:] + [float(i == j) for j in range(k)] for i, row in enumerate(m)]
    scale = max((abs(v) for row in m for v in row), default=0.0)
    for c in range(k):
        p = max(range(c, k), key=lambda i: abs(a[i][c]))
        if abs(a[p][c]) <= 1e-12 * max(scale, 1e-300):
            return None
        a[c], a[p] = a[p], a[c]
        a[c] = [v / a[c][c] for v in a[c]]
        for i in range(k):
            if i != c and a[i][c] != 0.0:
                f = a[i][c]
                a[i] = [v - f * w for v, w in zip(a[i], a[c])]
    return [row[k:] for row in a]


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
