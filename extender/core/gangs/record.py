"""A gang's record: what the gang book knows of a gang, and what became of a member that waited
at permit. Only the book writes a record (``tests/core/gangs/test_records.py``); the service,
its views and its answers read it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from extender.core.cluster.topology import Domain
from extender.core.gangs.lifecycle import Phase
from extender.core.model import GangSpec
from extender.core.placement.planner import Placement

BOUND, FAILED, UNRESERVED, TIMED_OUT = "bound", "failed", "unreserved", "timed_out"


@dataclass(frozen=True)
class Outcome:
    """What became of a member that waited at permit."""

    kind: str
    """``bound``, ``failed`` (a Binding failed: compensated), ``unreserved`` or ``timed_out``."""
    reason: str = ""



@dataclass(frozen=True)
class Tried:
    """A plan that found no room: what it read, and when."""

    writes: int
    """The cluster's ``ClusterState.writes`` then."""
    request: tuple[object, ...]
    """The request, the nodes left out, the homes."""
    at: float


@dataclass
class GangRecord:
    """A gang as the book tracks it."""

    key: str
    first_seen: float
    phase: Phase = Phase.PENDING
    reason: str = ""
    placement: Placement | None = None
    deadline: float | None = None
    timeout_seconds: float | None = None
    min_member: int = 0
    """GPU members that must wait at permit before any is allowed."""
    waiting: dict[str, tuple[str, str]] = field(default_factory=dict)
    """member key -> (uid, node) of members waiting at permit."""
    results: dict[str, str] = field(default_factory=dict)
    """member key -> "" (bound) or the error, once the round's Bindings were tried."""
    round: int = 0
    """Bumped whenever a reservation ends, so waiting members of that round stop waiting."""
    ended: tuple[int, Outcome] | None = None
    """The last round that ended without binding, and how."""
    waiting_since: float | None = None
    """When the round's first member began to wait at permit."""
    spec: GangSpec | None = None
    """The request of the current plan (member eligibility: a node that no longer admits it
    ends the plan)."""
    refused: dict[str, str] = field(default_factory=dict)
    """node -> member: planned nodes kube-scheduler's own filters refused (left out of every
    plan of this gang until it is bound)."""
    members: tuple[str, ...] = ()
    sized: bool = True
    bound_at: float | None = None
    bound_uids: set[str] = field(default_factory=set)
    """UIDs railyard bound for this gang: never members of a later round, even while the
    watch still shows them unbound."""
    lead_size: int = 0
    """``GangSpec.lead_size`` of the current plan: that many leads waiting at permit bind first."""
    leads: set[str] = field(default_factory=set)
    """The GPU members of the current plan that are leads (``PodFacts.lead``)."""
    unplaced_since: float | None = None
    """When planning it last started to fail for lack of room (None: it has a plan, or never
    lacked room); past the starvation bound it drains a domain (``GangBook.starvation_seconds``)."""
    closest: Domain | None = None
    """While it has no placement: the domain of its bound level that held most of it (the
    reason's "best ... fits"); None once planned."""
    preferring_since: float | None = None
    """When it was first planned with a wait for its preferred level (``GangSpec.
    preferred_wait_seconds``); kept across rounds, cleared once it is bound."""
    ran: bool = False
    """A pod of its last bound round was seen running (``end_claims``: the watch caught up)."""
    tried: Tried | None = None
    """Its last plan, when it found no room (``GangBook.reserve`` may let it stand for the next)."""
    preferring_until: float | None = None
    """Set by its last plan attempt while it waits by choice: a wider domain holds it, its
    preferred level's do not, and its wait runs until then. None: it does not wait by choice."""
