"""Issue 25 item 2: the bind pool's threads leave once idle, so a burst of held binds does not
leave the process that many threads for the rest of its life."""

from __future__ import annotations

import threading
import time

import pytest

from extender.adapters.http.workers import IdleExitPool


def wait_until(predicate, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return predicate()


def test_a_burst_gets_a_thread_per_held_call_and_they_leave_once_idle():
    pool = IdleExitPool(64, "bind", idle_seconds=0.2)
    release = threading.Event()
    futures = [pool.submit(lambda i=i: (release.wait(5), i)[1]) for i in range(40)]
    assert wait_until(lambda: pool.threads == 40)  # each held call on its own thread, as before
    assert sum(t.name.startswith("bind-") for t in threading.enumerate()) >= 40
    release.set()
    assert [f.result(5) for f in futures] == list(range(40))
    assert wait_until(lambda: pool.threads == 0), f"{pool.threads} threads still alive"
    assert wait_until(lambda: not any(t.name.startswith("bind-") for t in threading.enumerate()))
    # The next call starts a thread again.
    assert pool.submit(lambda: 7).result(5) == 7
    pool.shutdown(wait=True)
    assert pool.threads == 0


def test_idle_threads_are_reused_not_multiplied():
    pool = IdleExitPool(8, "w", idle_seconds=5)
    for i in range(200):
        assert pool.submit(lambda i=i: i * 2).result(5) == 2 * i
    assert pool.threads <= 2  # sequential calls: the idle thread takes each one
    pool.shutdown(wait=True)


def test_the_cap_queues_past_max_workers_and_errors_reach_the_caller():
    pool = IdleExitPool(3, "w", idle_seconds=5)
    release = threading.Event()
    held = [pool.submit(release.wait, 5) for _ in range(5)]
    assert wait_until(lambda: pool.threads == 3) and not held[3].done()
    release.set()
    assert all(f.result(5) for f in held) and pool.threads == 3

    def boom():
        raise KeyError("x")

    with pytest.raises(KeyError):
        pool.submit(boom).result(5)
    pool.shutdown(wait=True, cancel_futures=True)
    with pytest.raises(RuntimeError, match="after shutdown"):
        pool.submit(int)
    with pytest.raises(ValueError):
        IdleExitPool(0, "w")


def test_shutdown_cancels_what_waits_and_lets_what_runs_finish():
    pool = IdleExitPool(1, "w", idle_seconds=5)
    started, release = threading.Event(), threading.Event()
    running = pool.submit(lambda: (started.set(), release.wait(5), "done")[2])
    waiting = pool.submit(int)
    assert started.wait(5)
    pool.shutdown(wait=False, cancel_futures=True)
    assert waiting.cancelled()
    release.set()
    assert running.result(5) == "done"
    assert wait_until(lambda: pool.threads == 0)
