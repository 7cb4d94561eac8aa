"""The gang's permit gate: bind calls held until their gang's permit decision, the Binding
fan-out, retries and compensation. Orchestration only: the book decides (Allow | Wait |
Reject, bound or compensate); this waits, and does the I/O outside the lock it shares with
the service.

Before the first Binding of a round, every member's pod is marked with the round (its id, the
member's node, the round's size) through the Binder port: if this process dies in the middle
of the burst, the next railyard to serve the scheduler finishes or undoes the round from the
marks (``core.recovery``). The same write carries the member's topology address (rank, slice,
domain per level: ``core.address``), so no member runs without it.
"""

from __future__ import annotations

import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

from extender.core import verdicts
from extender.core.address import gang_addresses
from extender.core.book import BOUND, FAILED, TIMED_OUT, Allow, GangBook, Outcome, Reject, Wait
from extender.core.errors import BindingFailed, GangTimedOut, GangUnreserved, PermitRejected
from extender.core.model import Address, BindingMark
from extender.core.pods import PodIndex
from extender.core.ports import Binder, Observer
from extender.settings import GangSettings

MAX_BINDING_THREADS = 32
"""Bindings of one gang in flight at once."""


class PermitGate:
    def __init__(self, cond: threading.Condition, book: GangBook, pods: PodIndex, binder: Binder,
                 observer: Observer, settings: GangSettings, tick: Callable[[], float],
                 clock: Callable[[], float], sleep: Callable[[float], None], tell: Callable[[], None]) -> None:
        self._cond = cond
        self.book = book
        self.pods = pods
        self.binder = binder
        self.observer = observer
        self.settings = settings
        self._tick = tick
        self.clock = clock
        self.sleep = sleep
        self._tell = tell
        """Sends the book's notices as Events (call under the lock)."""

    def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
        key = f"{namespace}/{name}"
        with self._cond:
            self._tick()
            pod = self.pods.seen_pod(key) or self.pods.pending_pod(key)
            if pod is None:
                raise PermitRejected(verdicts.unknown_pod(key))
            gang = pod.gang.key
            decision = None
            if pod.gang.named and self.book.get(gang):
                decision = self.book.permit(gang, key, uid, node, self.clock())
                self._tell()
            rec = self.book.get(gang) if isinstance(decision, Allow) else None
            addresses = gang_addresses(self.book.state.topology, rec.placement) if rec is not None else {}
        match decision:
            case None:
                error = self._bind_with_retries(key, uid, node)
                if error:
                    raise BindingFailed(error)
                return
            case Reject(reason=reason, unreserved=unreserved):
                raise GangUnreserved(reason) if unreserved else PermitRejected(reason)
            case Wait(round=round_):
                with self._cond:
                    outcome = self._wait(gang, key, round_)
            case Allow(round=round_, members=members):
                self._bind_gang(gang, members, addresses)
                with self._cond:
                    outcome = self.book.outcome(gang, key, round_)
        _answer(outcome)

    def _wait(self, gang: str, key: str, round_: int) -> Outcome:
        """Hold this bind call until the gang's Bindings are done or its round ends."""
        while (outcome := self.book.outcome(gang, key, round_)) is None:
            now = self.clock()
            if self.book.expire(now):
                self._tell()
                self._cond.notify_all()
                continue
            self._cond.wait(timeout=max(min(self.book.deadline(gang) - now, 1.0), 0.01))
        return outcome

    def _bind_gang(self, gang: str, members: dict[str, tuple[str, str]], addresses: dict[str, Address]) -> None:
        """Mark every member (its round and its address), then create every member's Binding at
        once; if some fail after retries, evict the rest."""
        round_ = uuid.uuid4().hex[:12]
        with ThreadPoolExecutor(max_workers=min(MAX_BINDING_THREADS, len(members))) as pool:
            marks = list(pool.map(lambda item: self._mark(item[0], item[1][0], BindingMark(
                round_, item[1][1], len(members), addresses.get(item[0]))), members.items()))
            if any(marks):
                # Nothing is bound yet: the round ends here, whole (the book compensates nothing).
                first = next(m for m in marks if m)
                results = {k: m or f"not bound: {first}" for k, m in zip(members, marks)}
            elif self.settings.binding_pause_seconds > 0:  # fault injection for tests only
                results = {}
                for key, (uid, node) in members.items():
                    results[key] = self._bind_with_retries(key, uid, node)
                    self.sleep(self.settings.binding_pause_seconds)
            else:
                errors = pool.map(lambda item: self._bind_with_retries(item[0], *item[1]), members.items())
                results = dict(zip(members, errors))
        with self._cond:
            compensate = self.book.bindings_done(gang, results, members, self.clock())
            if compensate is None:
                for key in members:
                    self.pods.took_bound(key)
                self._cond.notify_all()
                return
        # Compensate: never leave part of a gang bound. Evict the members bound so the gang
        # restarts whole; their controllers create new pods, which are planned again.
        eviction_errors = {}
        for key, uid in compensate.evict:
            namespace, name = key.split("/", 1)
            try:
                self.binder.delete_pod(namespace, name, uid)
            except Exception as exc:  # the binder's errors carry the API server's words
                eviction_errors[key] = verdicts.eviction_failed(key, str(exc))
        with self._cond:
            self.book.compensated(gang, results, eviction_errors)
            self._tell()
            self._cond.notify_all()

    def _mark(self, key: str, uid: str, mark: BindingMark) -> str:
        """Record the round on the member's pod; "" or the error."""
        namespace, name = key.split("/", 1)
        try:
            self.binder.mark(namespace, name, uid, mark)
            return ""
        except Exception as exc:  # the binder's errors carry the API server's words
            return verdicts.mark_failed(key, str(exc))

    def _bind_with_retries(self, key: str, uid: str, node: str) -> str:
        """Create the Binding, retrying with backoff; "" or the last error."""
        namespace, name = key.split("/", 1)
        attempts = self.settings.bind_attempts
        for i in range(attempts):
            try:
                self.binder.bind(namespace, name, uid, node)
                return ""
            except Exception as exc:  # the binder's errors carry the API server's words
                error = verdicts.binding_failed(key, node, str(exc))
                self.observer.binding_failed()
                if i + 1 < attempts:
                    self.sleep(0.05 * 2 ** i)
        return error


def _answer(outcome: Outcome) -> None:
    """A held bind call's reply: return (bound) or the error the scheduler sees."""
    if outcome.kind == BOUND:
        return
    if outcome.kind == FAILED:
        raise BindingFailed(outcome.reason)
    if outcome.kind == TIMED_OUT:
        raise GangTimedOut(outcome.reason)
    raise GangUnreserved(outcome.reason)
