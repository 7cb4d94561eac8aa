"""The Metrics class: every collector documented, helpers doing what their names say."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from extender.adapters.metrics import Metrics

DOC = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def sample(metrics, name, **labels):
    return metrics.registry.get_sample_value(name, labels)


def test_every_metric_is_documented_and_every_documented_metric_exists():
    registered = {m.name for m in Metrics(CollectorRegistry()).registry.collect()}
    # Counters register without their _total suffix.
    counters = ("railyard_gangs", "railyard_binding_failures", "railyard_events_dropped",
                "railyard_unshown_pods_forgotten")
    registered = {n + "_total" if n in counters else n for n in registered}
    documented = set(re.findall(r"^\| `(railyard_\w+)`", DOC.read_text(), re.M))
    assert registered == documented
    assert all(n.startswith("railyard_") for n in registered)


def test_helpers():
    clock = Clock()
    m = Metrics(CollectorRegistry(), clock=clock)
    assert sample(m, "railyard_last_watch_event_age_seconds") == -1
    m.watch_event()
    clock.now += 42
    assert sample(m, "railyard_last_watch_event_age_seconds") == 42
    m.verb_finished("filter", "ok", 0.0003)
    assert sample(m, "railyard_verb_duration_seconds_bucket", verb="filter", outcome="ok", le="0.00035") == 1
    assert sample(m, "railyard_verb_duration_seconds_bucket", verb="filter", outcome="ok", le="0.0002") == 0
    m.gang_finished("timed_out")
    assert sample(m, "railyard_gangs_total", outcome="timed_out") == 1
    assert sample(m, "railyard_gangs_total", outcome="bound") == 0  # present from the start
    m.reservations(gangs=3, gpus=96)
    assert sample(m, "railyard_reserved_gpus") == 96
    m.cache_objects("pods", 7)
    assert sample(m, "railyard_cache_objects", kind="pods") == 7
    with pytest.raises(ValueError, match="unknown gang outcome 'lost'"):
        m.gang_finished("lost")
