"""The gang lifecycle as data: the edge list below *is* the table (parsed at import), so the
drawing cannot drift from the code. Time is data (deadlines), not a clock.

A gang that cannot be placed holds nothing, so two gangs can never wait on each other's
partial holdings (no deadlock). A gang is allowed to bind only when every planned GPU member
waits at permit, so no member is bound before the whole gang can be. The one exception is a
gang with leads (``GangSpec.lead_size``: its controller creates the other members only once the
leads are bound): it is planned and reserved whole all the same, binds its leads once they wait,
and is then ``started``: the other members' slots stay reserved until the deadline and each binds
as it arrives.
"""

from __future__ import annotations

from enum import Enum

LIFECYCLE = """
# phase   --event-->          next phase    what happens
pending   --planned-->        planned       slots reserved for every member
pending   --unplaceable-->    pending       no domain holds the gang; it holds nothing
pending   --invalid-->        rejected      the request cannot be planned (reason kept)
pending   --unsettled-->      pending       its size is declared nowhere and it still grows
pending   --preferring-->     pending       a wider domain holds it, but it waits for its preferred level
pending   --member_lost-->    pending
pending   --node_lost-->      pending
rejected  --retry-->          pending       the scheduler tries a member again
rejected  --invalid-->        rejected
rejected  --member_lost-->    rejected
planned   --member_waiting--> waiting       a member reached permit (bind) and waits
planned   --allowed-->        binding       a gang of one reached permit
planned   --deadline-->       timed out     unreserved
planned   --member_lost-->    pending       unreserved, planned again
planned   --node_lost-->      pending       unreserved, planned again
planned   --retry-->          pending       the gang grew or its node was refused: unreserved
planned   --preempted-->      pending       a gang of higher priority took its slots: unreserved
waiting   --member_waiting--> waiting
waiting   --allowed-->        binding       every member (or, with leads, every lead) waits at permit: Bindings go out
waiting   --deadline-->       timed out     unreserved; waiting members are rejected
waiting   --member_lost-->    pending       unreserved; waiting members are rejected
waiting   --node_lost-->      pending       unreserved; waiting members are rejected
waiting   --retry-->          pending
waiting   --preempted-->      pending       unreserved; waiting members are rejected
binding   --bound-->          bound
binding   --bind_failed-->    pending       bound members evicted so the gang restarts whole
binding   --leads_bound-->    started       the leads are bound; the other members' slots stay reserved
started   --allowed-->        started       a later member reached permit: its Binding goes out at once
started   --bound-->          bound         every reserved slot is bound
started   --deadline-->       timed out     the slots of members not created in time are given back
started   --member_lost-->    pending       unreserved; later members are planned beside the bound ones
started   --node_lost-->      pending       unreserved; later members are planned beside the bound ones
started   --retry-->          pending       a later member's node was refused: unreserved, planned again
bound     --retry-->          pending       new unbound members (replacements) start a new round
bound     --member_lost-->    bound
bound     --node_lost-->      bound
timed out --retry-->          pending
timed out --member_lost-->    timed out
timed out --node_lost-->      timed out
"""


class Phase(str, Enum):
    PENDING = "pending"
    """Seen, holding nothing: not planned yet, or no placement now (reason kept)."""
    PLANNED = "planned"
    """Slots reserved; members are being steered to them."""
    WAITING = "waiting"
    """Some members wait at permit (their bind calls are held) for the rest."""
    BINDING = "binding"
    """Every member waits at permit; Bindings are being created."""
    STARTED = "started"
    """The leads are bound; the slots of the members their controller creates next stay
    reserved, and each binds as it reaches permit, until the deadline."""
    BOUND = "bound"
    TIMED_OUT = "timed out"
    """The deadline passed at permit; unreserved; the next filter plans again."""
    REJECTED = "rejected"
    """The request is invalid (reason kept); fixed annotations plan it again."""


class Event(str, Enum):
    PLANNED = "planned"
    UNPLACEABLE = "unplaceable"
    INVALID = "invalid"
    UNSETTLED = "unsettled"
    PREFERRING = "preferring"
    MEMBER_WAITING = "member_waiting"
    ALLOWED = "allowed"
    BOUND = "bound"
    BIND_FAILED = "bind_failed"
    LEADS_BOUND = "leads_bound"
    DEADLINE = "deadline"
    MEMBER_LOST = "member_lost"
    NODE_LOST = "node_lost"
    RETRY = "retry"
    PREEMPTED = "preempted"


def parse(text: str) -> dict[tuple[Phase, Event], Phase]:
    """``phase --event--> next`` lines (``#`` comments, trailing notes) as a transition table."""
    table: dict[tuple[Phase, Event], Phase] = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        src, rest = line.split("--", 1)
        event, dst = rest.split("-->", 1)
        words = dst.split()
        target = next(p for p in Phase if words[: len(p.value.split())] == p.value.split())
        key = (Phase(src.strip()), Event(event.strip()))
        if key in table:
            raise ValueError(f"lifecycle lists {src.strip()} --{event.strip()}--> twice")
        table[key] = target
    return table


TRANSITIONS: dict[tuple[Phase, Event], Phase] = parse(LIFECYCLE)

HOLDING = frozenset({Phase.PLANNED, Phase.WAITING, Phase.BINDING, Phase.STARTED})
"""Phases in which the gang holds a reservation."""
RESERVED = frozenset({Phase.PLANNED, Phase.WAITING})
"""Phases in which the gang holds a reservation whose Bindings have not gone out: what a lost
member or node, a deadline, a grown gang or a preemptor can still take back. A ``started``
gang's reservation is not among them: its leads run, so no preemptor takes its slots, and it
ends on its own rules (``started`` rows above)."""


class IllegalTransition(ValueError):
    pass


def next_phase(phase: Phase, event: Event) -> Phase:
    try:
        return TRANSITIONS[(phase, event)]
    except KeyError:
        raise IllegalTransition(f"gang in phase {phase.value} cannot take event {event.value}") from None
