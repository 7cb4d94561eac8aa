"""A gang's request, built from what its members and its group declare.

Each role (size, timeout, required and preferred level and the wait for it, slice size and
level, leads, exclusive parts, exclusive domains) takes the declaration with the lowest
precedence found among the members and the group; members that declare different values at
that precedence are a problem of the gang. Values are bounded before anything is sized by
them: a pod's creator is not trusted.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Mapping, Sequence

from extender.core.placement import rails
from extender.core.placement.address import whole_ranks
from extender.core.model import (
    EXCLUSIVE,
    EXCLUSIVE_DOMAIN,
    RANK_LAYOUT,
    LEAD_SIZE,
    MIN_MEMBER,
    PREFERRED,
    PREFERRED_WAIT,
    REQUIRED,
    SLICE_LEVEL,
    SLICE_SIZE,
    TIMEOUT,
    Declaration,
    GangSpec,
    GroupFacts,
    Member,
    PodFacts,
)

MAX_MIN_MEMBER = 100_000
"""Largest gang railyard plans (slots for missing members are allocated up to this)."""
MAX_TIMEOUT_SECONDS = 86_400


def group_of(groups: Mapping[tuple[str, str], GroupFacts], pod: PodFacts) -> GroupFacts | None:
    """The group object the pod's convention names (by ``GroupFacts.id``), if there is one."""
    group_id = pod.gang.group_id
    return groups.get(group_id) if group_id is not None else None


def build(key: str, pods: Sequence[PodFacts], group: GroupFacts | None, default_timeout: float,
          running: Sequence[PodFacts] = (), max_timeout: float = 0.0, max_preferred_wait: float = 0.0) -> GangSpec:
    """The gang ``key`` of ``pods`` (in order of first appearance) and its group, if any.

    ``running``: members of the gang already bound and running (or done); they count toward
    min-member, so replacements for a running gang's lost members are planned as a round of
    their own, each with its rank in the whole gang (``address.whole_ranks``).
    ``max_timeout``: a longer timeout is capped to it (kube-scheduler would cut the held bind
    calls first); 0: no cap. ``max_preferred_wait``: a longer wait for the preferred level is
    capped to it (``gangs.max_preferred_wait_seconds``); 0: no cap.
    """
    problems: list[str] = list(group.problems if group else ())
    decls = [d for p in pods for d in p.declarations] + list(group.declarations if group else ())
    owner = {id(d): p.key for p in pods for d in p.declarations}

    def chosen(role: str) -> Declaration | None:
        found = sorted((d for d in decls if d.role == role), key=lambda d: d.precedence)
        if not found:
            return None
        first = [d for d in found if d.precedence == found[0].precedence]
        seen: dict[str, str] = {}
        for d in first:
            seen.setdefault(str(d.value), owner.get(id(d), d.source))
        if len(seen) > 1:
            (v1, p1), (v2, p2) = list(seen.items())[:2]
            problems.append(f"members disagree on {first[0].source}: {v1!r} ({p1}) vs {v2!r} ({p2})")
        return first[0]

    members = tuple(Member(p.key, p.gpus, p.rank, p.eligibility, p.lead, p.part) for p in pods)
    min_member = len(members)
    size = chosen(MIN_MEMBER)
    if size is not None:
        min_member = positive_int(size.value, size.source, MAX_MIN_MEMBER, problems, default=len(members))
    timeout = default_timeout
    found = chosen(TIMEOUT)
    if found is not None:
        timeout = float(positive_int(found.value, found.source, MAX_TIMEOUT_SECONDS, problems,
                                     default=int(default_timeout)))
    capped_from = None
    if max_timeout and timeout > max_timeout:
        capped_from, timeout = timeout, max_timeout
    required, preferred = chosen(REQUIRED), chosen(PREFERRED)
    wait, wait_capped_from = 0.0, None
    found = chosen(PREFERRED_WAIT)
    if found is not None:
        if preferred is None:
            problems.append(f"{found.source} is set without a preferred topology level: it is the wait for one")
        wait = float(positive_int(found.value, found.source, MAX_TIMEOUT_SECONDS, problems, default=0))
        if max_preferred_wait and wait > max_preferred_wait:
            wait_capped_from, wait = wait, max_preferred_wait
    leads = chosen(LEAD_SIZE)
    lead_size = positive_int(leads.value, leads.source, min_member, problems, default=0) if leads else 0
    if len(members) > min_member:
        problems.append(f"{len(members)} members but min-member is {min_member}")
    problems.extend(f"pod {p.key}: {problem}" for p in pods for problem in p.problems)
    spec = GangSpec(
        key=key,
        members=members,
        min_member=min_member,
        timeout_seconds=timeout,
        required=str(required.value).strip() if required else None,
        preferred=str(preferred.value).strip() if preferred else None,
        invalid=tuple(problems),
        sized=size is not None,
        timeout_capped_from=capped_from,
        lineage=pods[0].gang.lineage if pods else "",
        lead_size=lead_size,
        size_from=size.source if size is not None else "",
        preferred_wait_seconds=wait,
        preferred_wait_capped_from=wait_capped_from,
        exclusive_domain=str(own.value).strip() if (own := chosen(EXCLUSIVE_DOMAIN)) else None,
        rank_layout=_layout(chosen(RANK_LAYOUT), problems),
    )
    exclusive = chosen(EXCLUSIVE)
    if exclusive is not None:
        spec = _exclusive(spec, exclusive, chosen(SLICE_SIZE) or chosen(SLICE_LEVEL), problems)
    else:
        spec = _sliced(spec, chosen(SLICE_SIZE), chosen(SLICE_LEVEL), problems)
    if running and min_member - len(members) > 0:
        # A round of replacements is planned beside the running members, not in slices of
        # its own (docs/reference.md, Slices); its leads were bound in the first round: this
        # one binds all at once.
        spec = replace(spec, min_member=max(len(members), min_member - len(running)), slice_size=0,
                       slice_level=None, exclusive=False, lead_size=0, gang_slice_size=spec.slice_size,
                       ranks=whole_ranks([(Member(p.key, p.gpus, p.rank), p.told_rank) for p in running],
                                         members, min_member),
                       rail_set=rail_set_of(running))
    return spec


def _layout(found: Declaration | None, problems: list[str]) -> tuple[tuple[int, int], ...]:
    """``RANK_LAYOUT``'s (Jobs, pods per Job) pairs, each count within the largest gang."""
    if found is None:
        return ()
    value = found.value
    if isinstance(value, tuple) and len(value) <= MAX_MIN_MEMBER and all(
            isinstance(p, tuple) and len(p) == 2 and all(type(n) is int and 0 <= n <= MAX_MIN_MEMBER for n in p)
            for p in value):
        return value
    problems.append(f"{found.source}: not a list of (Jobs, pods per Job) pairs up to {MAX_MIN_MEMBER}")
    return ()


def _sliced(spec: GangSpec, size: Declaration | None, level: Declaration | None, problems: list[str]) -> GangSpec:
    """The gang with its slice request, or with the reason it cannot have it. Unlike Kueue,
    which places the pods past the last whole slice anywhere, a size must divide the gang."""
    if size is None and level is None:
        return spec
    if size is None or level is None:
        given = size or level
        assert given is not None
        problems.append(f"{given.source} is set without a slice {'topology level' if size else 'size'}: "
                        f"a slice needs both")
        return replace(spec, invalid=tuple(problems))
    before = len(problems)
    count = positive_int(size.value, size.source, MAX_MIN_MEMBER, problems, default=0)
    pods = sum(1 for gpus, _ in spec.slots() if gpus > 0)
    if count > pods:
        problems.append(f"{size.source} is {count}, more than the gang's {pods} GPU pods")
    elif count and pods % count:
        fitting = [d for d in range(1, pods + 1) if pods % d == 0]
        shown = ", ".join(map(str, fitting[:12])) + (", ..." if len(fitting) > 12 else "")
        problems.append(f"{size.source} {count} does not cut the gang's {pods} GPU pods into whole slices "
                        f"(sizes that do: {shown})")
    if len(problems) > before:
        return replace(spec, invalid=tuple(problems))
    return replace(spec, slice_size=count, slice_level=str(level.value).strip(), invalid=tuple(problems))


def rail_set_of(running: Sequence[PodFacts]) -> tuple[str, ...]:
    """The rail set of a rail-aligned gang's running GPU members: the rails railyard told most
    of them (the first member on each node is given the gang's set; ties: the lowest), one per
    GPU; () when none was told such rails."""
    counts: dict[tuple[str, ...], int] = {}
    for p in running:
        if p.gpus > 0 and len(p.told_rails) == p.gpus:
            counts[p.told_rails] = counts.get(p.told_rails, 0) + 1
    return min(counts, key=lambda r: (-counts[r], [rails.rail_order(x) for x in r])) if counts else ()


def _exclusive(spec: GangSpec, exclusive: Declaration, slices: Declaration | None,
               problems: list[str]) -> GangSpec:
    """The gang cut into its parts (``Member.part``), each a slice of ``(level, size)`` in a
    domain of its own; or the reason it cannot be: a part index outside the gang's parts, a
    part with more members than its size, or the gang also sliced by railyard's own request."""
    value = exclusive.value
    if not (isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], str)):
        problems.append(f"{exclusive.source}: not a (level, pods per part) pair, got {value!r}")
        return replace(spec, invalid=tuple(problems))
    if slices is not None:
        problems.append(f"{exclusive.source} gives each part a domain of its own; {slices.source} cuts the gang "
                        f"into slices as well: use one of them")
        return replace(spec, invalid=tuple(problems))
    level, size = value
    spec = _sliced(spec, Declaration(SLICE_SIZE, exclusive.source, size, exclusive.precedence),
                   Declaration(SLICE_LEVEL, exclusive.source, level, exclusive.precedence), problems)
    if not spec.slice_size:
        return spec
    parts = sum(1 for gpus, _ in spec.slots() if gpus > 0) // spec.slice_size
    counts: dict[int, int] = {}
    for m in spec.members:
        if m.gpus <= 0:
            continue
        if m.part is None or not 0 <= m.part < parts:
            which = "names no part" if m.part is None else f"is in part {m.part}"
            problems.append(f"pod {m.key} {which}, but the gang has parts 0-{parts - 1} ({exclusive.source})")
        else:
            counts[m.part] = counts.get(m.part, 0) + 1
    problems.extend(f"part {k} has {n} GPU pods, more than its {spec.slice_size} ({exclusive.source})"
                    for k, n in sorted(counts.items()) if n > spec.slice_size)
    return replace(spec, exclusive=True, invalid=tuple(problems))


def positive_int(value: object, source: str, maximum: int, problems: list[str], default: int) -> int:
    """A positive integer of at most ``maximum`` from JSON or annotation text (ASCII digits only)."""
    number = None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str):
        text = value.strip()
        if text.isascii() and text.isdigit():
            number = int(text) if len(text) <= 18 else maximum + 1
    if number is None or number <= 0:
        problems.append(f"{source} must be a positive integer, got {_quoted(value)}")
        return default
    if number > maximum:
        problems.append(f"{source} must be at most {maximum}, got {_quoted(value)}")
        return default
    return number


def _quoted(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
