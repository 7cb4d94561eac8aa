"""The Metrics class: every collector documented, helpers doing what their names say."""

from __future__ import annotations

import re
import socket
import threading
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


def test_what_a_long_run_samples_is_read_from_this_process_at_scrape():
    """Real sockets and threads of the test process, counted through its own /proc."""
    m = Metrics(CollectorRegistry())
    held = {"gangs": 2, "pods_unshown": 7}
    listener = socket.create_server(("127.0.0.1", 0))
    other = socket.create_server(("127.0.0.1", 0))
    m.sample(lambda: held, {"http": listener.getsockname()[1], "grpc": other.getsockname()[1]})
    assert sample(m, "railyard_open_connections", server="http") == 0
    clients = [socket.create_connection(listener.getsockname()) for _ in range(3)]
    accepted = [listener.accept()[0] for _ in clients]
    # Three accepted; the clients' own sockets (same process, ephemeral local ports) are not.
    assert sample(m, "railyard_open_connections", server="http") == 3
    assert sample(m, "railyard_open_connections", server="grpc") == 0
    clients[0].close()  # the client hung up; railyard's socket is still open (CLOSE_WAIT)
    assert sample(m, "railyard_open_connections", server="http") == 3
    accepted[0].close()
    assert sample(m, "railyard_open_connections", server="http") == 2
    for s in (*clients, *accepted, listener, other):
        s.close()

    before = sample(m, "railyard_process_threads")
    stop = threading.Event()
    extra = [threading.Thread(target=stop.wait, name=f"bind-{n + 7}") for n in range(3)]
    extra.append(threading.Thread(target=stop.wait, name="k8s-events"))
    for t in extra:
        t.start()
    assert sample(m, "railyard_process_threads") == before + 4
    # A pool's numbered threads are counted under the pool's name.
    assert sample(m, "railyard_python_threads", thread="bind") == 3
    assert sample(m, "railyard_python_threads", thread="k8s-events") == 1
    stop.set()
    for t in extra:
        t.join()

    blocks = sample(m, "railyard_python_allocated_blocks")
    kept = [object() for _ in range(100_000)]
    assert sample(m, "railyard_python_allocated_blocks") >= blocks + 100_000
    del kept

    assert sample(m, "railyard_held_objects", kind="gangs") == 2
    held["gangs"] = 0
    assert sample(m, "railyard_held_objects", kind="gangs") == 0
    assert sample(m, "railyard_held_objects", kind="pods_unshown") == 7


def test_before_anything_is_wired_the_process_is_still_sampled():
    m = Metrics(CollectorRegistry())
    assert sample(m, "railyard_process_threads") >= 1
    assert sample(m, "railyard_open_connections", server="http") is None
    assert sample(m, "railyard_held_objects", kind="gangs") is None
