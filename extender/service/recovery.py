"""Finishing or undoing Binding rounds another process left partly bound (``core.gangs.recovery``
decides which): the Bindings or evictions, outside the lock, and their Events and metrics.

It runs when this railyard serves a verb (``filter``, ``bind``): only a railyard whose
kube-scheduler is the active one acts, so a standby replica never touches a round.
"""

from __future__ import annotations

from extender.core import verdicts
from extender.core.cluster.state import Reservation, Slot
from extender.core.gangs.book import Notice
from extender.core.gangs.recovery import Complete, Undo, decide
from extender.core.model import PodRef
from extender.service.context import Context, per_pod


class Recovery:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    def run(self) -> None:
        ctx = self.ctx
        if not ctx.rounds.any_partial():
            # Asked without the lock, which every filter and bind call would otherwise take twice:
            # a round the watch shows partly bound after this is finished at the next call.
            return
        with ctx.cond:
            if not ctx.rounds.any_partial():
                return
            actions: list[Complete | Undo] = []
            for round_, gang, members in ctx.rounds.due(ctx.clock(), ctx.settings.gangs.recovery_grace_seconds,
                                                         ctx.book.phase):
                action = decide(ctx.state, round_, gang, members)
                if isinstance(action, Complete):
                    # Hold the GPUs until the watch shows the members bound (the slots are consumed).
                    gpus = {p.key: p.gpus for p in members.values()}
                    slots = tuple(Slot(k, node, gpus[k]) for k, _, node in action.bindings)
                    ctx.state.reserve(Reservation(f"{gang}#recover-{round_}", slots, float("inf"), bound=True))
                actions.append(action)
        for action in actions:
            if isinstance(action, Complete):
                self._complete(action)
            else:
                self._undo(action)

    def _complete(self, action: Complete) -> None:
        ctx = self.ctx
        errors, bound_now = [], []
        answers = per_pod(ctx.ports.bindings.bind_all,
                          [(PodRef.of(key, uid), node) for key, uid, node in action.bindings])
        for key, uid, node in action.bindings:
            exc = answers[key]
            if exc is None:
                bound_now.append((key, uid))
            else:  # the port's errors carry the API server's words
                errors.append(verdicts.binding_failed(key, node, str(exc)))
                ctx.ports.observer.binding_failed()
        if errors:
            # It could not be finished after all: undo it, with what this attempt bound.
            with ctx.cond:
                members = ctx.rounds.members(action.round)
                ctx.state.release(f"{action.gang}#recover-{action.round}")
            evict = sorted({*((p.key, p.uid) for p in members.values() if p.node), *bound_now})
            reason = (f"gang {action.gang}: finishing a Binding round its extender left partly bound failed "
                      f"({errors[0]}): evicting the {len(evict)} bound members so the gang restarts whole")
            self._undo(Undo(action.gang, action.round, tuple(evict), reason, tuple(sorted(members))))
            return
        message = verdicts.round_completed(action.gang, len(action.bindings), action.bound,
                                           [node for _, _, node in action.bindings])
        ctx.ports.observer.gang_finished("completed")
        self._notify(tuple(k for k, _, _ in action.bindings), "GangCompleted", message, warning=False)

    def _undo(self, action: Undo) -> None:
        for key, uid in action.evict:
            try:
                self.ctx.ports.evictions.delete_pod(PodRef.of(key, uid))
            except Exception:  # already gone, or the API server refuses: the next round retries
                pass
        self.ctx.ports.observer.gang_finished("compensated")
        self._notify(action.members or tuple(k for k, _ in action.evict), "GangCompensated", action.reason)

    def _notify(self, members: tuple[str, ...], reason: str, message: str, warning: bool = True) -> None:
        with self.ctx.cond:
            self.ctx.book.notices.append(Notice(members, reason, message, warning))
            self.ctx.changed(wake=False)
