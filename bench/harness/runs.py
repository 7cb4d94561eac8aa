"""Several runs of one scenario (issue 21, "measure first, honestly"): the median of each number.

``python -m bench run --runs N`` runs the arms interleaved (A, B, A, B, ...: run 1's arms, then
run 2's), each arm on a fresh cluster, so a neighbour's burst of load on the shared machine
lands on one run of each arm rather than on every run of one arm. results.json keeps every
run's arms and ratios (``runs[]``); its ``arms`` and ``ratios`` are the medians over the runs,
number by number (``median``): the median run of each ratio, not a ratio of medians.
"""

from __future__ import annotations

import statistics
from typing import Any


def median(values: list[Any]) -> Any:
    """The median of each number across ``values`` (one per run), recursively.

    Dicts: key by key over the runs that have the key. Numbers (``None`` = not measured in
    that run, left out): their median, the mean of the middle two for an even count. Lists of
    one length: element by element. Anything else: the value if every run agrees, else the
    list of the runs' values (``stop_reason`` of runs that stopped differently).
    """
    present = [v for v in values if v is not None]
    if not present:
        return None
    if all(isinstance(v, dict) for v in present):
        keys = list(dict.fromkeys(k for v in present for k in v))
        return {k: median([v[k] for v in present if k in v]) for k in keys}
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in present):
        middle = statistics.median(present)
        return middle if len(present) % 2 else round(middle, 4)
    if all(isinstance(v, list) for v in present) and len({len(v) for v in present}) == 1:
        return [median(list(items)) for items in zip(*present)]
    return present[0] if all(v == present[0] for v in present) else list(values)


def arms(runs: list[dict[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Each arm's median over the runs it ran in; an arm that ran in none keeps its first run's
    ``skipped`` reason."""
    names = list(dict.fromkeys(a for run in runs for a in run))
    out = {}
    for name in names:
        ran = [run[name] for run in runs if name in run and "skipped" not in run[name]]
        out[name] = median(ran) if ran else next(run[name] for run in runs if name in run)
    return out
