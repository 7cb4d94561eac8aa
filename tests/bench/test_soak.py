"""Issue 25 item 1: the soak's slopes, noise bound, verdicts, latency windows and sampling parsers.

Pure parts only (synthetic series with known slopes, fixed /proc text, railyard's own metrics
exposition): no cluster. The soak itself is ``python -m bench run --scenario soak``.
"""

from __future__ import annotations

import gzip
import json
import math
import random
import socket

import pytest

from bench import soak
from bench.harness import scenario as scenario_mod
from bench.soak import drive, report, sample, stats
from extender.adapters.metrics import VERB_BUCKETS, Metrics

H = 3600.0


def series(slope_per_h: float, *, segments: int = 1, seconds: float = H, every: float = 5.0, noise: float = 0.0,
           level=lambda seg: 100.0 + 40 * seg, seed: int = 1) -> list[tuple[int, float, float]]:
    """(segment, t, y): ``segments`` equal processes over ``seconds``, each starting at its own
    level and growing ``slope_per_h`` from its own start, with Gaussian noise."""
    rng = random.Random(seed)
    out = []
    length = seconds / segments
    t = 0.0
    while t < seconds:
        seg = int(t // length)
        out.append((seg, t, level(seg) + slope_per_h * (t - seg * length) / H + rng.gauss(0, noise)))
        t += every
    return out


def test_a_known_slope_is_recovered_within_its_noise_bound():
    f = stats.fit(series(12.0, noise=2.0))
    assert f is not None and f.segments == 1 and f.n == 720
    assert f.slope_per_h == pytest.approx(12.0, abs=1.0) and f.noise_per_h < 1.0
    assert stats.verdict(f, 5.0) == "grows"
    # About 95 % of independent runs have the true slope inside slope +- noise.
    fits = [stats.fit(series(12.0, noise=2.0, seed=s)) for s in range(200)]
    assert 0.9 <= sum(abs(f.slope_per_h - 12.0) < f.noise_per_h for f in fits) / 200 <= 0.99
    flat = stats.fit(series(0.0, noise=2.0))
    assert abs(flat.slope_per_h) < 1.0
    assert stats.verdict(flat, 5.0) == "flat"


def test_restarts_neither_hide_growth_nor_invent_it():
    # Each process grows 10 MB/h from a fresh start: the sawtooth across restarts has about no
    # overall trend, but the within-process slope is 10.
    saw = series(10.0, segments=4, level=lambda seg: 100.0, noise=0.5)
    naive = stats.fit((0, t, y) for _, t, y in saw)
    assert abs(naive.slope_per_h) < 2.0
    assert stats.fit(saw).slope_per_h == pytest.approx(10.0, abs=0.5)
    assert stats.verdict(stats.fit(saw), 5.0) == "grows"
    # Flat processes at different levels (each restart lands higher): no slope.
    steps = series(0.0, segments=4, level=lambda seg: 100.0 + 30 * seg, noise=0.5)
    assert stats.fit((0, t, y) for _, t, y in steps).slope_per_h > 50
    assert stats.verdict(stats.fit(steps), 5.0) == "flat"


def test_warm_up_is_left_out_of_each_process():
    # 40 MB in the first 5 minutes of each process, flat after: caches filling, not a leak.
    pts = [(seg, t, y + (40 * min(1.0, (t - seg * 1800) / 300))) for seg, t, y in series(0.0, segments=2, noise=0.3)]
    assert stats.verdict(stats.fit(pts), 5.0) == "grows"
    f = stats.fit(pts, warmup_s=300)
    assert f.n == 720 - 2 * 60 and stats.verdict(f, 5.0) == "flat"


def test_autocorrelated_noise_widens_the_bound():
    rng = random.Random(7)
    walk, y = [], 100.0
    for i in range(720):
        y += rng.gauss(0, 0.5)
        walk.append((0, i * 5.0, y))
    f = stats.fit(walk)
    white = stats.fit((0, t, 100 + rng.gauss(0, 0.5)) for _, t, _ in walk)
    assert f.lag1_autocorrelation > 0.8 and white.lag1_autocorrelation < 0.2
    # The same residual size would give a bound ~ sqrt((1+r)/(1-r)) >= 3x wider: a random walk
    # never passes for a trend-free process, nor for a proven one.
    assert stats.verdict(f, 0.001) in ("unclear", "grows") and f.noise_per_h > 0


def test_a_slope_at_equal_load_neither_takes_the_loads_trend_nor_hides_a_leak():
    rng = random.Random(11)
    # What the process holds climbs from 0 to 60 over the hour in bursts (a load that bunched
    # up late); each held thing costs 0.5 MB. Memory that only follows it is not a leak.
    held = [min(60.0, max(0.0, 60 * t / H + rng.gauss(0, 8))) for _, t, _ in series(0.0)]

    def memory(leak_per_h: float) -> list[tuple[int, float, float, float]]:
        return [(seg, t, y + leak_per_h * t / H + 0.5 * x, x)
                for (seg, t, y), x in zip(series(0.0, noise=0.3, seed=5), held)]

    follows = memory(0.0)
    raw = stats.fit(p[:3] for p in follows)
    assert raw.slope_per_h > 20 and stats.verdict(raw, 5.0) == "grows"  # the load's trend, read as growth
    at_equal = stats.fit(follows)
    assert abs(at_equal.slope_per_h) < 1.0 and stats.verdict(at_equal, 5.0) == "flat"
    assert at_equal.per_covariate == (pytest.approx(0.5, abs=0.02),)
    leak = stats.fit(memory(12.0))  # 12 MB/h at any load is still seen
    assert leak.slope_per_h == pytest.approx(12.0, abs=1.0) and stats.verdict(leak, 5.0) == "grows"
    # A covariate that never varies is left out; one that is time itself leaves nothing to fit.
    assert stats.fit((seg, t, y, 7.0) for seg, t, y, _ in follows).per_covariate == (0.0,)
    assert stats.fit((seg, t, y, t) for seg, t, y, _ in follows) is None


def test_too_few_points_give_no_fit_and_an_unclear_verdict():
    assert stats.fit([(0, 0.0, 1.0), (1, 5.0, 2.0)]) is None
    assert stats.fit([(0, 0.0, 1.0), (0, 5.0, 2.0), (0, 10.0, 3.0)], warmup_s=60) is None
    assert stats.verdict(None, 5.0) == "unclear"


def cumulative(latencies_s: list[float]) -> list[list[float]]:
    edges = [*VERB_BUCKETS, float("inf")]
    return [[le, sum(1 for x in latencies_s if x <= le)] for le in edges]


def test_latency_windows_difference_the_cumulative_histogram_within_one_process():
    calls = []  # 100 fast calls per 5 s; from t=60 s to the restart also 2 slow ones every 5 s
    samples = []
    for i in range(30):
        t = i * 5.0
        calls += [0.0004] * 100 + ([0.04] * 2 if 60 <= t < 100 else [])
        # a restart at t=100 s: a new process whose histogram starts again
        seg = 1 if t < 100 else 2
        if seg == 2 and samples and samples[-1]["segment"] == 1:
            calls = [0.0004] * 100
        samples.append({"t": t, "segment": seg, "buckets": {"filter": cumulative(calls)}})
    rows = stats.window_quantiles(samples, "filter", 30.0)
    assert [r["segment"] for r in rows] == [1, 1, 1, 2]
    assert rows[0]["calls"] == 600 and rows[0]["p99_ms"] < 0.5  # t 0-30: fast only
    assert rows[2]["calls"] == 612 and 25 < rows[2]["p99_ms"] <= 50  # t 60-90: 2 % slow
    assert rows[3]["calls"] == 600 and rows[3]["p99_ms"] < 0.5  # after the restart: no negative counts
    assert all(r["p50_ms"] < 0.5 for r in rows)


def test_metrics_are_read_from_railyards_own_exposition():
    m = Metrics()
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    client = socket.create_connection(listener.getsockname())
    server, _ = listener.accept()
    try:
        m.sample(lambda: {"gangs": 3, "reservations": 1, "pods_bound": 5, "pods_seen": 2},
                 {"http": listener.getsockname()[1]})
        for s in (0.0001, 0.0003, 0.002):
            m.verb_finished("filter", "ok", s)
        m.verb_finished("filter", "error", 0.02)
        m.verb_finished("bind", "ok", 1.5)
        m.held_binds(2)
        got = sample.parse_metrics(m.exposition()[0].decode())
    finally:
        for s in (client, server, listener):
            s.close()
    assert got["connections"] == 1 and got["connections_by"] == {"http": 1}
    assert got["held"] == {"gangs": 3, "reservations": 1, "pods_bound": 5, "pods_seen": 2}
    assert got["heap_kblocks"] > 1
    filt = dict((le, c) for le, c in got["buckets"]["filter"])
    assert filt[0.0001] == 1 and filt[0.002] == 3 and filt[float("inf")] == 4  # outcomes summed
    assert dict((le, c) for le, c in got["buckets"]["bind"])[1.0] == 0
    assert report.SERIES["book_pods"][1]({"held": got["held"]}) == 7
    assert got["held_binds"] == 2 and got["python_threads"]["MainThread"] == 1
    assert report.COVARIATES["bind_threads"](got) == got["python_threads"].get("bind", 0.0)


def test_proc_status_gives_rss_and_threads():
    text = "Name:\tpython\nVmPeak:\t 900000 kB\nVmRSS:\t  102400 kB\nThreads:\t17\n"
    assert sample.parse_status(text) == {"rss_mb": 100.0, "threads": 17}
    with pytest.raises(ValueError):
        sample.parse_status("Name:\tpython\n")
    assert sample.read_proc(__import__("os").getpid())["fds"] > 0


def test_the_report_fits_only_the_load_and_states_bound_and_verdict(tmp_path):
    rng = random.Random(3)
    samples = []
    for seg, t, y in series(0.0, segments=2, seconds=1200, noise=0.5):
        samples.append({"t": t, "segment": seg, "phase": "load", "rss_mb": y, "heap_kblocks": 300 + t / 10,
                        "threads": 20, "fds": 30, "connections": 4, "held": {"gangs": 2, "pods_bound": 9},
                        "buckets": {"filter": cumulative([0.0004] * int(t)), "bind": cumulative([0.2] * int(t))}})
    samples.append({**samples[-1], "t": 1300.0, "phase": "drain", "rss_mb": 900.0})
    workload = {"warmup_s": 60, "latency_window_s": 60,
                "bounds": {"rss_mb": 5, "heap_kblocks": 50, "threads": 1, "bind_p99_ms": "25%"}}
    analysed = report.analyse(samples, workload)
    m = analysed["metrics"]
    assert m["rss_mb"]["verdict"] == "flat" and m["rss_mb"]["max"] < 900  # the drain sample left out
    assert m["heap_kblocks"]["verdict"] == "grows" and m["heap_kblocks"]["rises"]  # 360 k blocks an hour
    assert m["rss_mb"]["rises"] is False
    assert m["heap_kblocks"]["fit"]["slope_per_h"] == pytest.approx(360, rel=1e-6)
    assert m["threads"]["verdict"] == "flat"
    assert m["fds"]["verdict"] == "no bound"
    assert "at_equal" not in m["threads"]  # these samples carry no covariate: plain fits
    assert m["filter_p99_ms"]["windows"] > 10 and m["filter_p99_ms"]["p50_ms_median"] < 0.5
    bind = m["bind_p99_ms"]  # every window's p99 the same: a flat series; its bound a quarter of it
    assert bind["bound_per_h"] == pytest.approx(bind["median"] / 4) and bind["verdict"] == "flat"
    assert "| rss_mb |" in report.table(analysed) and "**grows**" in report.table(analysed)
    doc = report.write(tmp_path, {"command": "x"}, analysed, samples, [{"t": 600.0, "how": "SIGTERM"}], 1200)
    assert json.loads((tmp_path / "results.json").read_text())["metrics"]["threads"]["verdict"] == "flat"
    assert doc["command"] == "x" and (tmp_path / "soak.png").stat().st_size > 10_000
    with gzip.open(tmp_path / "samples.jsonl.gz", "rt") as f:
        assert [json.loads(line)["t"] for line in f] == [s["t"] for s in samples]
    del rng


def test_a_longer_soak_keeps_the_arrival_rates():
    scn = scenario_mod.load("soak", quick=False)
    base = scn.workload
    longer = drive.scaled(base, 2 * float(base["duration_s"]))
    assert longer["gangs"][0]["count"] == 2 * base["gangs"][0]["count"]
    assert longer["singles"]["window_s"] == 2 * float(base["singles"]["window_s"])
    assert longer["duration_s"] == 2 * float(base["duration_s"])
    # Every series has a bound but the raw book sizes, which follow the load (see with_outside).
    assert set(base["bounds"]) == {*report.SERIES, *report.LATENCY} - {"book_gangs", "book_pods"}


def test_the_soak_scenario_is_recognised_and_durations_parse():
    assert soak.is_soak("soak") and not soak.is_soak("gangs") and not soak.is_soak("no-such")
    assert [soak.parse_duration(x) for x in ("300", "300s", "60m", "1h", "1.5h")] == [300, 300, 3600, 3600, 5400]
    for bad in ("", "0", "-5m", "1d", "an hour"):
        with pytest.raises(ValueError, match="--duration"):
            soak.parse_duration(bad)


def test_a_finished_soak_is_fitted_again_with_the_bounds_its_results_keep(tmp_path):
    samples = [{"t": t, "segment": 1, "phase": "load", "rss_mb": 100 + 8 * t / H, "held": {}, "buckets": {}}
               for _, t, _ in series(0.0)]
    report.write(tmp_path, {"scenario": "soak", "mode": "quick", "restarts": [], "load": {"duration_s": H},
                            "analysis": {"bounds": {"rss_mb": 10}}},
                 {"metrics": {}, "windows": {"filter": [], "bind": []}}, samples, [], H)
    assert soak.rereport(tmp_path) == 0
    doc = json.loads((tmp_path / "results.json").read_text())
    assert doc["metrics"]["rss_mb"]["fit"]["slope_per_h"] == pytest.approx(8.0)
    assert doc["metrics"]["rss_mb"]["verdict"] == "flat"  # 8 MB/h under the kept bound of 10
    assert doc["analysis"]["warmup_s"] == 30  # the rest from the scenario's quick section


def test_the_book_is_compared_with_what_the_harness_saw_waiting_and_running():
    pods = [  # gang g (2 members): created at 0 and 2, whole at 10; lone pod s; gang h never whole
        {"name": "g-0", "job": "g", "created": 0.0, "bound": 5.0, "finished": 50.0},
        {"name": "g-1", "job": "g", "created": 2.0, "bound": 10.0, "finished": 60.0},
        {"name": "s", "job": "s", "created": 1.0, "bound": 1.5, "finished": None},
        {"name": "h-0", "job": "h", "created": 20.0, "bound": 21.0, "finished": None},
        {"name": "h-1", "job": "h", "created": 20.0, "bound": None, "finished": None},
        {"name": "x-0", "job": "x", "created": None, "bound": None, "finished": None},  # never created
    ]
    times = (0.5, 9.9, 10.0, 30.0, 55.0, 70.0, 10 + report.RECENT_S)
    samples = [{"t": t, "held": {"gangs": 3, "pods_running": 4}} for t in times]
    got = report.with_outside(samples, pods)
    assert [s["waiting_gangs"] for s in got] == [1, 1, 0, 1, 1, 1, 1]
    assert [s["recent_gangs"] for s in got] == [0, 0, 1, 1, 1, 1, 0]  # g, whole at 10 s, for RECENT_S
    assert [s["running_pods"] for s in got] == [0, 2, 3, 4, 3, 2, 2]
    assert [report.SERIES["book_gangs_beyond_harness"][1](s) for s in got] == [2, 2, 2, 1, 1, 1, 2]
    assert report.SERIES["book_running_beyond_running"][1](got[0]) == 4
    assert report.SERIES["book_running_beyond_running"][1](samples[0]) is None  # no harness view: no value
    assert stats.covering([(0.0, math.inf), (1.0, 2.0)], [0.0, 1.0, 2.0]) == [1, 2, 1]
