"""A gang member's address -> the annotations railyard writes on its pod, in the same merge
patch as its Binding round (``pods.binding_annotations``), before any Binding of the round.
Every key made here is a valid qualified name (``tests/adapters``), whatever a level is called.

    railyard.io/rank                 the member's rank in the plan (0 ..), consecutive ranks neighbours
    railyard.io/slice                rank // slice size (sliced gangs only)
    railyard.io/rails                the rails planned for its GPUs, e.g. 0,1,2,3 (rail-aligned gangs
                                     only; a launcher pins NCCL to the matching NICs)
    railyard.io/domain.<level>       its domain at that level: the path from the broadest level,
                                     e.g. railyard.io/domain.leaf: s1/l2 (a label it lacks: absent)

``<level>`` is the level's short name (``spine``, ``leaf``, ``nvlink``...), else the last part
of its key; made a valid name part, and told apart by its position when two levels share one.
"""

from __future__ import annotations

import re
from typing import Mapping

from extender.core.model import Address

PREFIX = "railyard.io/"
RANK = PREFIX + "rank"
SLICE = PREFIX + "slice"
RAILS = PREFIX + "rails"
DOMAIN = PREFIX + "domain."
_NAME_PART = 63
_INVALID = re.compile(r"[^A-Za-z0-9._-]+")


def address_annotations(address: Address) -> dict[str, str]:
    out = {}
    if address.rank is not None:
        out[RANK] = str(address.rank)
    if address.slice is not None:
        out[SLICE] = str(address.slice)
    if address.rails:
        out[RAILS] = ",".join(address.rails)
    seen: set[str] = set()
    for i, place in enumerate(address.domains):
        key = domain_key(place.name)
        if key in seen:
            key = domain_key(f"{place.name}-{i}")
        seen.add(key)
        out[key] = place.domain
    return out


def told_rank(annotations: Mapping[str, str]) -> int | None:
    """The rank railyard wrote on a member it bound, or None (absent or not a whole number below
    a million: never trusted further than its shape)."""
    raw = annotations.get(RANK)
    return int(raw) if raw is not None and raw.isascii() and raw.isdigit() and len(raw) <= 6 else None


MAX_RAILS, MAX_RAIL_CHARS = 64, 63


def told_rails(annotations: Mapping[str, str]) -> tuple[str, ...]:
    """The rails railyard wrote on a member it bound, or () (absent, or not a list of at most
    64 names of at most 63 characters: never trusted further than its shape)."""
    raw = annotations.get(RAILS)
    if not raw or len(raw) > MAX_RAILS * (MAX_RAIL_CHARS + 1):
        return ()
    rails = tuple(raw.split(","))
    if len(rails) > MAX_RAILS or not all(0 < len(r) <= MAX_RAIL_CHARS for r in rails):
        return ()
    return rails


def domain_key(level_name: str) -> str:
    """``railyard.io/domain.<name>`` with the name made a valid annotation name part."""
    room = _NAME_PART - len(DOMAIN) + len(PREFIX)
    name = _INVALID.sub("-", level_name).strip("-_.")[-room:].strip("-_.") or "level"
    return DOMAIN + name
