"""The gang's permit gate: bind calls held until their gang's permit decision, the Binding
fan-out, retries and compensation. Orchestration only: the book decides (Allow | Wait |
Reject, bound or compensate); this waits, and does the I/O outside the service lock.

Before the first Binding of a round, every member's pod is marked with the round (its id, the
member's node, the round's size) through the Bindings port: if this process dies in the middle
of the burst, the next railyard to serve the scheduler finishes or undoes the round from the
marks (``core.gangs.recovery``). The same write carries the member's topology address (rank,
slice, domain per level: ``core.placement.address``), so no member runs without it.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any, Coroutine

from extender.core import verdicts
from extender.core.errors import BindingFailed, GangTimedOut, GangUnreserved, PermitRejected
from extender.core.gangs.book import Allow, Reject, Wait
from extender.core.gangs.record import BOUND, FAILED, TIMED_OUT, Outcome
from extender.core.model import Address, BindingMark, PodRef
from extender.core.placement.address import gang_addresses
from extender.service.context import Context, per_pod


class PermitGate:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
        ctx = self.ctx
        key = f"{namespace}/{name}"
        with ctx.cond:
            ctx.tick()
            pod = ctx.pods.seen_pod(key) or ctx.pods.pending_pod(key)
            if pod is None:
                raise PermitRejected(verdicts.unknown_pod(key))
            gang = pod.gang.key
            decision = None
            if pod.gang.named and ctx.book.get(gang):
                decision = ctx.book.permit(gang, key, uid, node, ctx.clock())
                ctx.changed(wake=False)
            rec = ctx.book.get(gang) if isinstance(decision, Allow) else None
            addresses = gang_addresses(ctx.state.topology, rec.placement, rec.spec) if rec is not None else {}
        match decision:
            case None:
                error = self._bind_all({key: (uid, node)})[key]
                if error:
                    raise BindingFailed(error)
                return
            case Reject(reason=reason, unreserved=unreserved):
                raise GangUnreserved(reason) if unreserved else PermitRejected(reason)
            case Wait(round=round_):
                with ctx.cond:
                    outcome = self._wait(gang, key, round_)
            case Allow(later=True):
                outcome = self._bind_later(gang, key, uid, node, addresses.get(key))
            case Allow(round=round_, members=members):
                self._bind_gang(gang, members, addresses)
                with ctx.cond:
                    answered = ctx.book.outcome(gang, key, round_)
                assert answered is not None  # the book recorded every member's result
                outcome = answered
        _answer(outcome)

    def bind_now(self, namespace: str, name: str, uid: str, node: str) -> Coroutine[Any, Any, None] | None:
        """``bind`` without waiting, for a pod bound alone (no gang of it planned): its Binding
        as a coroutine for the caller's event loop, retried as ``_bind_all`` retries. None when
        that cannot be known without waiting (the lock held elsewhere, a recovery due) or the
        pod's gang is planned: ``bind`` on a thread then (issue 21 item 5)."""
        ctx = self.ctx
        key = f"{namespace}/{name}"
        if not ctx.cond.acquire(blocking=False):
            return None
        try:
            if ctx.rounds.any_partial():
                return None
            ctx.tick()
            pod = ctx.pods.seen_pod(key) or ctx.pods.pending_pod(key)
            if pod is None:
                raise PermitRejected(verdicts.unknown_pod(key))
            if pod.gang.named and ctx.book.get(pod.gang.key):
                return None
        finally:
            ctx.cond.release()
        return self._bind_alone(PodRef.of(key, uid), node)

    async def _bind_alone(self, pod: PodRef, node: str) -> None:
        ctx = self.ctx
        attempts = ctx.settings.gangs.bind_attempts
        for i in range(attempts):
            try:
                exc = await ctx.ports.bindings.bind_async(pod, node)
            except Exception as raised:  # as per_pod: a port that raised gave the pod its error
                exc = raised
            if exc is None:
                return
            error = verdicts.binding_failed(pod.key, node, str(exc))
            ctx.ports.observer.binding_failed()
            if i + 1 < attempts:
                await asyncio.sleep(0.05 * 2 ** i)
        raise BindingFailed(error)

    def _wait(self, gang: str, key: str, round_: int) -> Outcome:
        """Hold this bind call until the gang's Bindings are done or its round ends."""
        ctx = self.ctx
        while (outcome := ctx.book.outcome(gang, key, round_)) is None:
            now = ctx.clock()
            if ctx.book.expire(now):
                ctx.changed()
                continue
            ctx.cond.wait(timeout=max(min(ctx.book.deadline(gang) - now, 1.0), 0.01))
        return outcome

    def _bind_gang(self, gang: str, members: dict[str, tuple[str, str]], addresses: dict[str, Address]) -> None:
        """Mark every member (its round and its address), then create every member's Binding in
        one burst; if some fail after retries, evict the rest."""
        ctx = self.ctx
        round_ = uuid.uuid4().hex[:12]
        marks = self._mark_all({key: (uid, BindingMark(round_, node, len(members), addresses.get(key)))
                                for key, (uid, node) in members.items()})
        if any(marks.values()):
            # Nothing is bound yet: the round ends here, whole (the book compensates nothing).
            first = next(m for m in marks.values() if m)
            results = {k: m or f"not bound: {first}" for k, m in marks.items()}
        elif ctx.settings.gangs.binding_pause_seconds > 0:  # fault injection for tests only
            results = {}
            for key, (uid, node) in members.items():
                results.update(self._bind_all({key: (uid, node)}))
                ctx.sleep(ctx.settings.gangs.binding_pause_seconds)
        else:
            results = self._bind_all(members)
        with ctx.cond:
            compensate = ctx.book.bindings_done(gang, results, members, ctx.clock())
            if compensate is None:
                for key, (_, node) in members.items():
                    ctx.pods.took_bound(key, node)
                ctx.cond.notify_all()
                return
        # Compensate: never leave part of a gang bound. Evict the members bound so the gang
        # restarts whole; their controllers create new pods, which are planned again.
        eviction_errors = {}
        for key, uid in compensate.evict:
            try:
                ctx.ports.evictions.delete_pod(PodRef.of(key, uid))
            except Exception as exc:  # the port's errors carry the API server's words
                eviction_errors[key] = verdicts.eviction_failed(key, str(exc))
        with ctx.cond:
            ctx.book.compensated(gang, results, eviction_errors)
            ctx.changed()

    def _bind_later(self, gang: str, key: str, uid: str, node: str, address: Address | None) -> Outcome:
        """A started gang's later member: marked with its address and bound on its own; a
        failure is its bind call's alone (its slot stays reserved for kube-scheduler's retry)."""
        ctx = self.ctx
        error = self._mark_all({key: (uid, BindingMark(uuid.uuid4().hex[:12], node, 1, address))})[key]
        error = error or self._bind_all({key: (uid, node)})[key]
        with ctx.cond:
            outcome = ctx.book.later_bound(gang, key, uid, error, ctx.clock())
            if outcome.kind == BOUND:
                ctx.pods.took_bound(key, node)
            ctx.changed()
        return outcome

    def _mark_all(self, marks: dict[str, tuple[str, BindingMark]]) -> dict[str, str]:
        """Record the round on every member's pod at once; per member "" or the error."""
        answers = per_pod(self.ctx.ports.bindings.mark_all,
                          [(PodRef.of(key, uid), mark) for key, (uid, mark) in marks.items()])
        return {key: verdicts.mark_failed(key, str(exc)) if exc is not None else "" for key, exc in answers.items()}

    def _bind_all(self, members: dict[str, tuple[str, str]]) -> dict[str, str]:
        """Create the Bindings of ``members`` (key -> (uid, node)) in one burst, then retry the
        failed ones together with backoff; per member "" or its last error."""
        ctx = self.ctx
        errors: dict[str, str] = {}
        pending = dict(members)
        attempts = ctx.settings.gangs.bind_attempts
        for i in range(attempts):
            answers = per_pod(ctx.ports.bindings.bind_all,
                              [(PodRef.of(key, uid), node) for key, (uid, node) in pending.items()])
            failed = {}
            for key, (uid, node) in pending.items():
                exc = answers[key]
                if exc is None:
                    errors.pop(key, None)
                    continue
                errors[key] = verdicts.binding_failed(key, node, str(exc))
                ctx.ports.observer.binding_failed()
                failed[key] = (uid, node)
            pending = failed
            if not pending:
                break
            if i + 1 < attempts:
                ctx.sleep(0.05 * 2 ** i)
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
