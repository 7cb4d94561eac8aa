"""The gang lifecycle table: every (phase, event) pair is either a listed transition or refused."""

from __future__ import annotations

import itertools

import pytest

from extender.core.gang import HOLDING, TRANSITIONS, Event, IllegalTransition, Phase, next_phase


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


def test_binding_ends_bound_or_back_to_pending():
    outs = {dst for (src, _), dst in TRANSITIONS.items() if src == Phase.BINDING}
    assert outs == {Phase.BOUND, Phase.PENDING}
