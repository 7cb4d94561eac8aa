"""The service's read-only answers (``service/answers.py``) as JSON: /debug/gangs and
``railyard plan``. Keys and their order are the wire's; the gRPC servicer makes the same
answers protobuf.
"""

from __future__ import annotations

from typing import Any

from extender.core.model import Address
from extender.service.answers import GangAnswer, GangView, Slices


def address_json(a: Address) -> dict[str, Any]:
    """rank -> pod -> node -> domains, as the plan and /debug/gangs show it."""
    return {"rank": a.rank, "slice": a.slice, "pod": a.pod, "node": a.node,
            "domains": [{"level": p.level, "name": p.name, "domain": p.domain} for p in a.domains],
            "rails": list(a.rails)}


def slices_json(s: Slices | None) -> dict[str, Any] | None:
    return None if s is None else {"size": s.size, "level": s.level, "count": s.count}


def plan_json(a: GangAnswer) -> dict[str, Any]:
    """One gang of ``railyard plan``'s output."""
    return {"gang": a.gang, "feasible": a.feasible, "level": a.level,
            "domain": list(a.domain) if a.domain is not None else None, "placement": dict(a.placement),
            "reason": a.reason, "slices": slices_json(a.slices), "ranks": [address_json(r) for r in a.ranks],
            "origin": a.origin}


def gang_view_json(g: GangView) -> dict[str, Any]:
    """One gang of /debug/gangs."""
    return {"gang": g.gang, "phase": g.phase, "plan": dict(g.plan), "deadline_in_seconds": g.deadline_in_seconds,
            "reason": g.reason, "slices": slices_json(g.slices), "ranks": [address_json(r) for r in g.ranks],
            "origin": g.origin}
