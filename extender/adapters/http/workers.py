"""A thread pool whose idle threads leave (issue 25 item 2: flat under load).

``concurrent.futures.ThreadPoolExecutor`` never lets a thread go: after a burst of held bind
calls (up to ``server.max_held_binds``, each on its own thread) the process kept that many
threads, and their stacks, for the rest of its life. Here a thread that found no work for
``idle_seconds`` exits; the next burst starts new ones.

The bookkeeping is ThreadPoolExecutor's: a thread going idle releases one token of ``_idle``;
``submit`` takes a token when it can (an idle thread will pick the work up) and starts a thread
otherwise. A thread whose wait timed out leaves only if it can take a token back itself: if
``submit`` took them all, work is on its way and it stays to do it.
"""

from __future__ import annotations

import queue
import threading
from concurrent.futures import Executor, Future
from typing import Any, Callable

#: Seconds a thread waits for work before it leaves.
IDLE_SECONDS = 30.0


class IdleExitPool(Executor):
    """Up to ``max_workers`` threads named ``name-N``; each exits after ``idle_seconds`` idle."""

    def __init__(self, max_workers: int, name: str, idle_seconds: float = IDLE_SECONDS) -> None:
        if max_workers <= 0:
            raise ValueError("max_workers must be positive")
        self._max, self._name, self._idle_seconds = max_workers, name, idle_seconds
        self._work: queue.SimpleQueue[tuple[Future[Any], Callable[..., Any], tuple[Any, ...], dict[str, Any]] | None] \
            = queue.SimpleQueue()
        self._idle = threading.Semaphore(0)
        self._lock = threading.Lock()
        self._threads = 0
        self._started = 0
        self._shutdown = False
        self._alive: set[threading.Thread] = set()

    @property
    def threads(self) -> int:
        """Threads alive now (idle or working)."""
        return self._threads

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()
        with self._lock:
            if self._shutdown:
                raise RuntimeError("cannot submit after shutdown")
            self._work.put((future, fn, args, kwargs))
            if not self._idle.acquire(blocking=False) and self._threads < self._max:
                self._threads += 1
                self._started += 1
                # Not a daemon, as ThreadPoolExecutor's: at exit a call in progress is finished.
                thread = threading.Thread(target=self._run, name=f"{self._name}-{self._started}")
                self._alive.add(thread)
                thread.start()
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            self._shutdown = True
            if cancel_futures:
                while True:
                    try:
                        item = self._work.get_nowait()
                    except queue.Empty:
                        break
                    if item is not None:
                        item[0].cancel()
            for _ in range(self._threads):
                self._work.put(None)  # each thread takes one and leaves
            alive = list(self._alive)
        if wait:
            for thread in alive:
                thread.join()

    def _run(self) -> None:
        while True:
            try:
                item = self._work.get(timeout=self._idle_seconds)
            except queue.Empty:
                with self._lock:
                    if self._idle.acquire(blocking=False):  # nobody counts on this thread
                        self._threads -= 1
                        self._alive.discard(threading.current_thread())
                        return
                continue
            if item is None:
                with self._lock:
                    self._threads -= 1
                    self._alive.discard(threading.current_thread())
                return
            future, fn, args, kwargs = item
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn(*args, **kwargs))
                except BaseException as exc:  # the caller gets it through the future
                    future.set_exception(exc)
            del item, future, fn, args, kwargs  # no reference to the finished call kept while idle
            self._idle.release()
