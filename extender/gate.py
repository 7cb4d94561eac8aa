"""The gang's permit gate: bind calls held until their gang's permit decision, the Binding
fan-out, retries and compensation. Orchestration only: the book decides (Allow | Wait |
Reject, bound or compensate); this waits, and does the I/O outside the lock it shares with
the service.

Before the first Binding of a round, every member's pod is marked with the round (its id, the
member's node, the round's size) through the Binder port: if this process dies in the middle
of the burst, the next railyard to serve the scheduler finishes or undoes the round from the
marks (``core.gangs.recovery``). The same write carries the member's topology address (rank, slice,
domain per level: ``core.placement.address``), so no member runs without it.
"""

from __future__ import annotations

import threading
import uuid
from typing import Callable

from extender.core import verdicts
from extender.core.placement.address import gang_addresses
from extender.core.gangs.book import BOUND, FAILED, TIMED_OUT, Allow, GangBook, Outcome, Reject, Wait
from extender.core.errors import BindingFailed, GangTimedOut, GangUnreserved, PermitRejected
from extender.core.model import Address, BindingMark
from extender.core.cluster.pods import PodIndex
from extender.core.ports import Binder, Observer
from extender.settings import GangSettings

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
                error = self._bind_all({key: (uid, node)})[key]
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
        """Mark every member (its round and its address), then create every member's Binding in
        one burst; if some fail after retries, evict the rest."""
        round_ = uuid.uuid4().hex[:12]
        marks = self._mark_all({key: (uid, BindingMark(round_, node, len(members), addresses.get(key)))
                                for key, (uid, node) in members.items()})
        if any(marks.values()):
            # Nothing is bound yet: the round ends here, whole (the book compensates nothing).
            first = next(m for m in marks.values() if m)
            results = {k: m or f"not bound: {first}" for k, m in marks.items()}
        elif self.settings.binding_pause_seconds > 0:  # fault injection for tests only
            results = {}
            for key, (uid, node) in members.items():
                results.update(self._bind_all({key: (uid, node)}))
                self.sleep(self.settings.binding_pause_seconds)
        else:
            results = self._bind_all(members)
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

    def _mark_all(self, marks: dict[str, tuple[str, BindingMark]]) -> dict[str, str]:
        """Record the round on every member's pod at once; per member "" or the error."""
        batch = [(*key.split("/", 1), uid, mark) for key, (uid, mark) in marks.items()]
        try:
            outcomes = list(self.binder.mark_all(batch))
        except Exception as exc:  # a binder that raised instead of answering per pod
            outcomes = [exc] * len(batch)
        return {key: verdicts.mark_failed(key, str(exc)) if exc is not None else ""
                for key, exc in zip(marks, outcomes)}

    def _bind_all(self, members: dict[str, tuple[str, str]]) -> dict[str, str]:
        """Create the Bindings of ``members`` (key -> (uid, node)) in one burst, then retry the
        failed ones together with backoff; per member "" or its last error."""
        errors: dict[str, str] = {}
        pending = dict(members)
        attempts = self.settings.bind_attempts
        for i in range(attempts):
            bindings = [(*key.split("/", 1), uid, node) for key, (uid, node) in pending.items()]
            try:
                outcomes = list(self.binder.bind_all(bindings))
            except Exception as exc:  # a binder that raised instead of answering per Binding
                outcomes = [exc] * len(bindings)
            failed = {}
            for (key, (uid, node)), exc in zip(pending.items(), outcomes):
                if exc is None:
                    errors.pop(key, None)
                    continue
                errors[key] = verdicts.binding_failed(key, node, str(exc))
                self.observer.binding_failed()
                failed[key] = (uid, node)
            pending = failed
            if not pending:
                break
            if i + 1 < attempts:
                self.sleep(0.05 * 2 ** i)
        return {key: errors.get(key, "") for key in members}


def _answer(outcome: Outcome) -> None:
    """A held bind call's reply: return (bound) or the error the scheduler sees."""
    if outcome.kind == BOUND:
        return
    if outcome.kind == FAILED:
        raise BindingFailed(outcome.reason)
    if outcome.kind == TIMED_OUT:
        raise GangTimedOut(outcome.reason)
    raise GangUnreserved(outcome.reason)
