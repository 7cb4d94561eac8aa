"""The gang lifecycle table: every (phase, event) pair is either a listed transition or refused.
The table is parsed from the drawing in ``core/gangs/lifecycle.py``, so the two cannot differ."""

from __future__ import annotations

import itertools

import pytest

from extender.core.gangs.lifecycle import HOLDING, LIFECYCLE, RESERVED, TRANSITIONS, Event, IllegalTransition, Phase, next_phase, parse


@pytest.mark.parametrize("phase, event", list(itertools.product(Phase, Event)))
def test_every_pair(phase, event):
    if (phase, event) in TRANSITIONS:
        assert next_phase(phase, event) == TRANSITIONS[(phase, event)]
    else:
        with pytest.raises(IllegalTransition, match=f"{phase.value} cannot take event {event.value}"):
            next_phase(phase, event)


def test_every_phase_is_reachable_from_pending():
    seen, frontier = {Phase.PENDING}, [Phase.PENDING]
    while frontier:
        p = frontier.pop()
        for (src, _), dst in TRANSITIONS.items():
            if src == p and dst not in seen:
                seen.add(dst)
                frontier.append(dst)
    assert seen == set(Phase)


def test_losing_a_member_or_node_never_leaves_a_holding_gang_holding():
    for phase in HOLDING - {Phase.BINDING}:
        for event in (Event.MEMBER_LOST, Event.NODE_LOST, Event.DEADLINE):
            assert next_phase(phase, event) not in HOLDING
    for phase in RESERVED:
        assert next_phase(phase, Event.PREEMPTED) not in HOLDING


def test_a_started_gang_is_no_preemptors_prey():
    """Its leads run: a preemptor evicts running gangs whole, it never takes a started gang's slots."""
    assert Phase.STARTED not in RESERVED
    with pytest.raises(IllegalTransition):
        next_phase(Phase.STARTED, Event.PREEMPTED)


def test_binding_ends_bound_started_or_back_to_pending():
    outs = {dst for (src, _), dst in TRANSITIONS.items() if src == Phase.BINDING}
    assert outs == {Phase.BOUND, Phase.STARTED, Phase.PENDING}
    assert next_phase(Phase.BINDING, Event.LEADS_BOUND) == Phase.STARTED
    assert next_phase(Phase.STARTED, Event.ALLOWED) == Phase.STARTED
    assert next_phase(Phase.STARTED, Event.BOUND) == Phase.BOUND
    assert next_phase(Phase.STARTED, Event.DEADLINE) == Phase.TIMED_OUT


def test_the_drawing_is_the_table():
    edges = [line.split("#")[0].split() for line in LIFECYCLE.splitlines() if line.split("#")[0].strip()]
    assert len(edges) == len(TRANSITIONS)
    assert TRANSITIONS[(Phase.WAITING, Event.ALLOWED)] == Phase.BINDING
    assert TRANSITIONS[(Phase.BOUND, Event.RETRY)] == Phase.PENDING
    assert TRANSITIONS[(Phase.PENDING, Event.INVALID)] == Phase.REJECTED
    assert TRANSITIONS[(Phase.WAITING, Event.DEADLINE)] == Phase.TIMED_OUT


def test_a_drawing_that_lists_an_edge_twice_is_refused():
    with pytest.raises(ValueError, match="lists pending --planned--> twice"):
        parse("pending --planned--> planned\npending --planned--> pending\n")
