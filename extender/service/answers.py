"""The service's read-only answers, as frozen values: what-if plans (``railyard plan``,
PlanGang), the explanation of a waiting pod (ExplainPod), the gangs as they stand
(/debug/gangs) and each gang's phase changes (WatchGangs).

Built by ``whatif`` (and ``context`` for changes); the adapters turn them into JSON
(``adapters/answers.py``) or protobuf (``adapters/grpc/servicer.py``), field for field.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from extender.core.gangs.record import GangRecord
from extender.core.gangs.lifecycle import Event, Phase
from extender.core.model import Address
from extender.core.placement.planner import DomainFit


@dataclass(frozen=True)
class Slices:
    """How a sliced gang is cut: ``count`` slices of ``size`` GPU pods, each inside one domain
    of ``level`` (a level key)."""

    size: int
    level: str | None
    count: int


@dataclass(frozen=True)
class GangAnswer:
    """One gang's what-if answer, as ``railyard plan`` prints it and PlanGang returns it."""

    gang: str
    feasible: bool
    level: str | None
    """The key of the narrowest level whose one domain holds every placed member."""
    domain: tuple[str | None, ...] | None
    """That domain's path from the broadest level."""
    placement: Mapping[str, str]
    """Member -> node, for the members given."""
    reason: str
    ranks: tuple[Address, ...] = ()
    """The topology address of each placed member, in rank order."""
    slices: Slices | None = None
    origin: str = ""
    """The workload the gang came from and where its size was read (``whatif.origin``)."""


@dataclass(frozen=True)
class GangView:
    """One gang as /debug/gangs shows it."""

    gang: str
    phase: str
    """The phase's name; ``waiting at bind 3/8`` while members wait at permit."""
    plan: Mapping[str, str]
    """Member -> node of its reservation (members that came later by name), or of its last plan."""
    deadline_in_seconds: float | None
    """Seconds left while the gang holds a reservation; None otherwise."""
    reason: str
    slices: Slices | None
    ranks: tuple[Address, ...]
    origin: str = ""
    """The workload the gang came from and where its size was read (``whatif.origin``)."""


@dataclass(frozen=True)
class Explanation:
    """Why a pod waits (ExplainPod): its gang's phase and reason, the plan, and how much of
    the gang each domain at the gang's bound level holds."""

    pod: str
    gang: str
    phase: str
    """The gang's phase; ``pending`` or ``bound`` for a pod of no gang."""
    reason: str
    plan: Mapping[str, str]
    """Member -> node while the gang holds a reservation."""
    min_member: int
    at_bind: int
    """Members waiting at permit."""
    deadline_in_seconds: float
    """Seconds left while the gang holds a reservation; 0 otherwise."""
    pods: int
    """The gang's pods, placed or not."""
    level: str
    """The key of the level the gang must fit within; empty: the whole cluster."""
    fit: tuple[DomainFit, ...]
    """Every domain at that level, best first, the gang's own reservation counted as free."""
    slices: Slices | None
    ranks: tuple[Address, ...]
    """The addresses its members were (or will be) bound with, while it holds or is bound."""
    origin: str = ""
    """The workload the gang came from and where its size was read (``whatif.origin``)."""


@dataclass(frozen=True)
class GangChange:
    """A gang's phase change (WatchGangs); ``previous`` and ``event`` are empty in the listing
    that starts a subscription and for a gang seen first."""

    gang: str
    phase: str
    previous: str
    event: str
    reason: str
    origin: str = ""
    """The workload the gang came from and where its size was read (``whatif.origin``)."""

    @classmethod
    def of(cls, rec: GangRecord, previous: Phase | None = None, event: Event | None = None) -> GangChange:
        return cls(rec.key, rec.phase.value, previous.value if previous else "", event.value if event else "",
                   rec.reason)
