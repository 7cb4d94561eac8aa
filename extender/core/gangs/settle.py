"""Gangs whose size is declared nowhere: planned only once they stop growing.

A pod that names a group, when neither it nor its group object declares how many members the
gang has (no railyard.io/min-member, no PodGroup minMember or gang.minCount, no Kueue total
count), belongs to a gang of "the members seen". Planned at its first member, such a gang would
bind in rounds as its controller creates the rest. So it waits, holding nothing, until no new
member has appeared for ``interval`` seconds (setting ``gangs.settle_seconds``), and is then
planned whole with the members it has; a member that comes after that starts a new round.

``Arrivals`` remembers when each gang last got a new member (first seen by the watch or by
filter); time is an argument, as everywhere in the core.
"""

from __future__ import annotations

from typing import Callable

from extender.core import verdicts
from extender.core.model import GangSpec, PodFacts
from extender.core.cluster.pods import PodIndex


class Arrivals:
    """When each gang's newest member was first seen. Not thread-safe: the service serialises."""

    def __init__(self) -> None:
        self._members: dict[str, set[str]] = {}
        self._last: dict[str, float] = {}

    def noted(self, pod: PodFacts, pods: PodIndex, now: float) -> None:
        """The watch or filter showed ``pod`` (``pods`` already updated): a pending member not
        seen before moves its gang's time; a gang with no member pending is forgotten."""
        if not pod.gang.named:
            return
        if not pods.has_pending(pod.gang.key):
            self.forget(pod.gang.key)
        elif pods.pending_pod(pod.key) is not None:
            self.seen(pod.gang.key, pod.key, now)

    def seen(self, gang: str, member: str, now: float) -> None:
        """A member of ``gang`` was seen; only a member not seen before moves the time."""
        members = self._members.setdefault(gang, set())
        if member not in members:
            members.add(member)
            self._last[gang] = now

    def last(self, gang: str) -> float | None:
        return self._last.get(gang)

    def forget(self, gang: str) -> None:
        """The gang has no member waiting any more (bound or gone): bounded memory."""
        self._members.pop(gang, None)
        self._last.pop(gang, None)

    def prune(self, waiting: Callable[[str], bool]) -> None:
        """Forget every gang for which ``waiting`` is false (after a relist of the pods)."""
        for gang in [g for g in self._last if not waiting(g)]:
            self.forget(gang)

    def __len__(self) -> int:
        return len(self._last)


def unsettled(spec: GangSpec, last: float | None, now: float, interval: float) -> str | None:
    """Why the gang waits to be planned (None: plan it now).

    Only a gang of undeclared size waits, and only while its newest member is younger than
    ``interval``; an interval of 0 plans every gang at once.
    """
    if spec.sized or interval <= 0 or spec.invalid:
        return None
    quiet = 0.0 if last is None else max(now - last, 0.0)
    if quiet >= interval:
        return None
    return verdicts.settling(spec.key, len(spec.members), quiet, interval)
