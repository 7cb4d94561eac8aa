"""Binding rounds left partly bound, finished or undone: the plan outlives the process.

Before the first Binding of a round, every member carries a ``BindingMark`` on its pod (round id,
node, round size), written through the Bindings port. A process that dies in the middle of the
burst, or loses leadership, leaves the round partly bound; any railyard that serves the
scheduler afterwards (the restarted one, or the new leader's) sees the marks in its watch cache
and, once the round has stayed partial for ``grace`` seconds with no plan of its own in progress
for the gang:

- completes it: binds each unbound member to its marked node, if every one still fits
  (the node exists, takes placements, and has the member's GPUs free), or
- undoes it: evicts the members bound, so the gang restarts whole, with a reason with numbers.

Pure: time is an argument; the service executes the actions and reports them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from extender.core.gangs.lifecycle import HOLDING, Phase
from extender.core.model import PodFacts
from extender.core.cluster.state import ClusterState


@dataclass(frozen=True)
class Complete:
    gang: str
    round: str
    bindings: tuple[tuple[str, str, str], ...]
    """(member key, uid, node) for each member still unbound."""
    bound: int
    """Members the round had bound already."""


@dataclass(frozen=True)
class Undo:
    gang: str
    round: str
    evict: tuple[tuple[str, str], ...]
    """(member key, uid) for each member bound."""
    reason: str
    members: tuple[str, ...] = ()
    """Every member of the round, to be told."""


Action = Complete | Undo


class Rounds:
    """The marked members of every Binding round, as the watch shows them. Not thread-safe."""

    def __init__(self) -> None:
        self._members: dict[str, dict[str, PodFacts]] = {}
        self._partial: set[str] = set()
        self._since: dict[str, float] = {}
        self._handled: set[str] = set()

    @staticmethod
    def _key(pod: PodFacts) -> str:
        # A round is a gang's: a mark copied onto a pod of another namespace or group joins nothing.
        return f"{pod.gang.key}@{pod.binding.round}" if pod.binding else ""

    def changed(self, pod: PodFacts, now: float) -> None:
        """A pod as the watch shows it at ``now`` (partial rounds are timed from when first seen)."""
        if pod.binding is None or not pod.gang.named:
            return
        r = self._key(pod)
        if pod.finished:
            self.gone(pod)
            return
        self._members.setdefault(r, {})[pod.key] = pod
        self._classify(r, now)

    def gone(self, pod: PodFacts) -> None:
        if pod.binding is None or not pod.gang.named:
            return
        r = self._key(pod)
        members = self._members.get(r)
        if members is not None and members.get(pod.key, pod).uid == pod.uid:
            members.pop(pod.key, None)
            if not members:
                del self._members[r]
        self._classify(r, None)

    def clear(self) -> None:
        self._members.clear()
        self._partial.clear()

    def partial(self) -> list[str]:
        return sorted(self._partial)

    def any_partial(self) -> bool:
        """Whether some round is partly bound: one read, so a caller may ask without the lock
        (an answer a moment old is the next call's to act on)."""
        return bool(self._partial)

    def members(self, round_: str) -> dict[str, PodFacts]:
        return dict(self._members.get(round_, {}))

    def due(self, now: float, grace: float,
            book_phase: Callable[[str], Phase | None]) -> list[tuple[str, str, dict[str, PodFacts]]]:
        """(round, gang, members) of rounds partial for ``grace`` seconds whose gang has no plan
        of ours in progress; each is returned once. ``book_phase(gang)``: this process's phase
        of the gang, or None."""
        actions = []
        for r in sorted(self._partial):
            members = self._members[r]
            gang = next(iter(members.values())).gang.key
            if book_phase(gang) in HOLDING:
                self._since[r] = now  # a plan of ours is in progress: it finishes the gang; wait again
                continue
            first = self._since.setdefault(r, now)
            if now - first < grace or r in self._handled:
                continue
            self._handled.add(r)
            actions.append((r, gang, members))
        return actions

    def _classify(self, r: str, now: float | None) -> None:
        members = self._members.get(r, {})
        bound = any(p.node for p in members.values())
        unbound = any(not p.node for p in members.values())
        if bound and unbound:
            self._partial.add(r)
            if now is not None:
                self._since.setdefault(r, now)
        else:
            self._partial.discard(r)
            self._since.pop(r, None)
            if not members:
                self._handled.discard(r)


def decide(state: ClusterState, round_: str, gang: str, members: dict[str, PodFacts]) -> Action:
    """Complete the round if every unbound member still fits its marked node, else undo it."""
    bound = sorted((p for p in members.values() if p.node), key=lambda p: p.key)
    unbound = sorted((p for p in members.values() if not p.node), key=lambda p: p.key)
    size = max((p.binding.size for p in members.values() if p.binding), default=len(members))
    need: dict[str, int] = {}
    for p in unbound:
        need[_marked(p)] = need.get(_marked(p), 0) + p.gpus
    view = state.view()
    misfit = []
    for node, gpus in sorted(need.items()):
        i = view.topology.index.get(node)
        if i is None:
            misfit.append(f"node {node} is gone")
        elif view.blocked[i] is not None:
            misfit.append(f"node {node} is {view.blocked[i]}")
        elif view.free[i] < gpus:
            misfit.append(f"node {node} has {max(view.free[i], 0)} free GPUs, {gpus} needed")
    missing = size - len(members)
    if missing > 0:
        misfit.append(f"{missing} member{'s' if missing != 1 else ''} of the round no longer exist")
    if not misfit:
        return Complete(gang, round_, tuple((p.key, p.uid, _marked(p)) for p in unbound), len(bound))
    reason = (f"gang {gang}: a Binding round bound {len(bound)}/{size} members before it stopped (its extender "
              f"is gone); it cannot be completed ({'; '.join(misfit)}): evicting the {len(bound)} bound "
              f"member{'s' if len(bound) != 1 else ''} so the gang restarts whole")
    return Undo(gang, round_, tuple((p.key, p.uid) for p in bound), reason, tuple(sorted(members)))


def _marked(pod: PodFacts) -> str:
    """The node a member of a round is marked for (``Rounds`` holds only marked pods)."""
    assert pod.binding is not None
    return pod.binding.node
