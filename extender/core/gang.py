"""The gang lifecycle as a (phase, event) -> phase table. Time is data (deadlines), not a clock.

    PENDING --planned--> PLANNED --member_at_bind--> WAITING --quorum--> BINDING --bound--> BOUND
       ^  |                 |                          |                     |
       |  +--unplaceable--> PENDING (holds nothing)    |                     +--bind_failed--> PENDING
       |                    +--------- deadline / member_lost / node_lost ---+--> PENDING (released)
       +------------------------------ retry ---------------------------------- TIMED_OUT

A gang that cannot be placed holds nothing, so two gangs can never wait on each other's
partial holdings (no deadlock). Binding starts only when every planned GPU member is held at
bind, so no member is bound before the whole gang can be.
"""

from __future__ import annotations

from enum import Enum


class Phase(str, Enum):
    PENDING = "pending"
    """Seen, holding nothing: not planned yet, or no placement now (reason kept)."""
    PLANNED = "planned"
    """Slots reserved; members are being steered to them."""
    WAITING = "waiting"
    """Some members are held at bind, waiting for the rest."""
    BINDING = "binding"
    """Every member reached bind; Bindings are being created."""
    BOUND = "bound"
    TIMED_OUT = "timed out"
    """The deadline passed at bind; reservation released; the next filter re-plans."""
    REJECTED = "rejected"
    """The request is invalid (reason kept); fixed annotations re-plan it."""


class Event(str, Enum):
    PLANNED = "planned"
    UNPLACEABLE = "unplaceable"
    INVALID = "invalid"
    MEMBER_AT_BIND = "member_at_bind"
    QUORUM = "quorum"
    BOUND = "bound"
    BIND_FAILED = "bind_failed"
    DEADLINE = "deadline"
    MEMBER_LOST = "member_lost"
    NODE_LOST = "node_lost"
    RETRY = "retry"


P, E = Phase, Event
TRANSITIONS: dict[tuple[Phase, Event], Phase] = {
    (P.PENDING, E.PLANNED): P.PLANNED,
    (P.PENDING, E.UNPLACEABLE): P.PENDING,
    (P.PENDING, E.INVALID): P.REJECTED,
    (P.PENDING, E.MEMBER_LOST): P.PENDING,
    (P.PENDING, E.NODE_LOST): P.PENDING,
    (P.REJECTED, E.RETRY): P.PENDING,
    (P.REJECTED, E.INVALID): P.REJECTED,
    (P.REJECTED, E.MEMBER_LOST): P.REJECTED,
    (P.PLANNED, E.MEMBER_AT_BIND): P.WAITING,
    (P.PLANNED, E.QUORUM): P.BINDING,  # a gang of one
    (P.PLANNED, E.DEADLINE): P.TIMED_OUT,
    (P.PLANNED, E.MEMBER_LOST): P.PENDING,
    (P.PLANNED, E.NODE_LOST): P.PENDING,
    (P.PLANNED, E.RETRY): P.PENDING,  # the gang grew: plan again
    (P.WAITING, E.MEMBER_AT_BIND): P.WAITING,
    (P.WAITING, E.QUORUM): P.BINDING,
    (P.WAITING, E.DEADLINE): P.TIMED_OUT,
    (P.WAITING, E.MEMBER_LOST): P.PENDING,
    (P.WAITING, E.NODE_LOST): P.PENDING,
    (P.WAITING, E.RETRY): P.PENDING,
    (P.BINDING, E.BOUND): P.BOUND,
    (P.BINDING, E.BIND_FAILED): P.PENDING,
    (P.BOUND, E.RETRY): P.PENDING,  # new unbound members (replacements) start a new round
    (P.BOUND, E.MEMBER_LOST): P.BOUND,
    (P.BOUND, E.NODE_LOST): P.BOUND,
    (P.TIMED_OUT, E.RETRY): P.PENDING,
    (P.TIMED_OUT, E.MEMBER_LOST): P.TIMED_OUT,
    (P.TIMED_OUT, E.NODE_LOST): P.TIMED_OUT,
}

HOLDING = frozenset({P.PLANNED, P.WAITING, P.BINDING})
"""Phases in which the gang holds a reservation."""


class IllegalTransition(ValueError):
    pass


def next_phase(phase: Phase, event: Event) -> Phase:
    try:
        return TRANSITIONS[(phase, event)]
    except KeyError:
        raise IllegalTransition(f"gang in phase {phase.value} cannot take event {event.value}") from None
