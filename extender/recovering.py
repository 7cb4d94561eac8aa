"""Finishing or undoing Binding rounds another process left partly bound (``core.gangs.recovery``
decides which): the Bindings or evictions, outside the lock, and their Events and metrics.

It runs when this railyard serves a verb (``filter``, ``bind``): only a railyard whose
kube-scheduler is the active one acts, so a standby replica never touches a round.
"""

from __future__ import annotations

import threading
from typing import Callable

from extender.core import verdicts
from extender.core.gangs.book import GangBook, Notice
from extender.core.cluster.pods import PodIndex
from extender.core.ports import Binder, Observer
from extender.core.gangs.recovery import Complete, Rounds, Undo, decide
from extender.core.cluster.state import ClusterState, Reservation, Slot
from extender.settings import GangSettings


class Recoverer:
    def __init__(self, cond: threading.Condition, state: ClusterState, book: GangBook, rounds: Rounds,
                 pods: PodIndex, binder: Binder, observer: Observer, settings: GangSettings,
                 clock: Callable[[], float], tell: Callable[[], None]) -> None:
        self._cond = cond
        self.state, self.book, self.rounds, self.pods = state, book, rounds, pods
        self.binder, self.observer, self.settings = binder, observer, settings
        self.clock = clock
        self._tell = tell

    def run(self) -> None:
        with self._cond:
            if not self.rounds.partial():
                return
            actions = []
            for round_, gang, members in self.rounds.due(self.clock(), self.settings.recovery_grace_seconds,
                                                          self.book.phase):
                action = decide(self.state, round_, gang, members)
                if isinstance(action, Complete):
                    # Hold the GPUs until the watch shows the members bound (the slots are consumed).
                    gpus = {p.key: p.gpus for p in members.values()}
                    slots = tuple(Slot(k, node, gpus[k]) for k, _, node in action.bindings)
                    self.state.reserve(Reservation(f"{gang}#recover-{round_}", slots, float("inf"), bound=True))
                actions.append(action)
        for action in actions:
            if isinstance(action, Complete):
                self._complete(action)
            else:
                self._undo(action)

    def _complete(self, action: Complete) -> None:
        errors, bound_now = [], []
        batch = [(*key.split("/", 1), uid, node) for key, uid, node in action.bindings]
        try:
            outcomes = list(self.binder.bind_all(batch))
        except Exception as exc:  # a binder that raised instead of answering per Binding
            outcomes = [exc] * len(batch)
        for (key, uid, node), exc in zip(action.bindings, outcomes):
            if exc is None:
                bound_now.append((key, uid))
            else:  # the binder's errors carry the API server's words
                errors.append(verdicts.binding_failed(key, node, str(exc)))
                self.observer.binding_failed()
        if errors:
            # It could not be finished after all: undo it, with what this attempt bound.
            with self._cond:
                members = self.rounds.members(action.round)
                self.state.release(f"{action.gang}#recover-{action.round}")
            evict = sorted({*((p.key, p.uid) for p in members.values() if p.node), *bound_now})
            reason = (f"gang {action.gang}: finishing a Binding round its extender left partly bound failed "
                      f"({errors[0]}): evicting the {len(evict)} bound members so the gang restarts whole")
            self._undo(Undo(action.gang, action.round, tuple(evict), reason, tuple(sorted(members))))
            return
        message = verdicts.round_completed(action.gang, len(action.bindings), action.bound,
                                           [node for _, _, node in action.bindings])
        self.observer.gang_finished("completed")
        self._notify(tuple(k for k, _, _ in action.bindings), "GangCompleted", message, warning=False)

    def _undo(self, action: Undo) -> None:
        for key, uid in action.evict:
            namespace, name = key.split("/", 1)
            try:
                self.binder.delete_pod(namespace, name, uid)
            except Exception:  # already gone, or the API server refuses: the next round retries
                pass
        self.observer.gang_finished("compensated")
        self._notify(action.members or tuple(k for k, _ in action.evict), "GangCompensated", action.reason)

    def _notify(self, members: tuple[str, ...], reason: str, message: str, warning: bool = True) -> None:
        with self._cond:
            self.book.notices.append(Notice(members, reason, message, warning))
            self._tell()
