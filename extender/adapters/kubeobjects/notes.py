"""What railyard writes on pods: a member's ``PodNotes`` -> annotations, carried by its Binding.

The API server merges a Binding's ``metadata.annotations`` into the pod in the same update that
sets ``spec.nodeName`` (``BindingREST.setPodNodeAndMetadata``, pkg/registry/core/pod/storage/
storage.go, Kubernetes v1.37.2), so a bound pod always has its address, before any kubelet
starts it, and no other write or permission is needed. That path skips the pod's own
validation, so every key made here is a valid qualified name (``tests/adapters``).

    railyard.io/rank                 the member's rank in the plan (0 ..), consecutive ranks neighbours
    railyard.io/slice                rank // slice size (sliced gangs only)
    railyard.io/domain.<level>       its domain at that level: the path from the broadest level,
                                     e.g. railyard.io/domain.leaf: s1/l2 (a label it lacks: absent)

``<level>`` is the level's short name (``spine``, ``leaf``, ``nvlink``...), else the last part
of its key; made a valid name part, and told apart by its position when two levels share one.
"""

from __future__ import annotations

import re

from extender.core.address import Address, PodNotes

PREFIX = "railyard.io/"
RANK = PREFIX + "rank"
SLICE = PREFIX + "slice"
DOMAIN = PREFIX + "domain."
_NAME_PART = 63
_INVALID = re.compile(r"[^A-Za-z0-9._-]+")


def annotations(notes: PodNotes | None) -> dict[str, str]:
    """The annotations that say ``notes``; {} for none."""
    if notes is None or notes.address is None:
        return {}
    return address_annotations(notes.address)


def address_annotations(address: Address) -> dict[str, str]:
    out = {}
    if address.rank is not None:
        out[RANK] = str(address.rank)
    if address.slice is not None:
        out[SLICE] = str(address.slice)
    seen: set[str] = set()
    for i, place in enumerate(address.domains):
        key = domain_key(place.name)
        if key in seen:
            key = domain_key(f"{place.name}-{i}")
        seen.add(key)
        out[key] = place.domain
    return out


def domain_key(level_name: str) -> str:
    """``railyard.io/domain.<name>`` with the name made a valid annotation name part."""
    room = _NAME_PART - len(DOMAIN) + len(PREFIX)
    name = _INVALID.sub("-", level_name).strip("-_.")[-room:].strip("-_.") or "level"
    return DOMAIN + name
