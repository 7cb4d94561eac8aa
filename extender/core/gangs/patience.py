"""A preferred level with a bounded wait (``railyard.io/preferred-topology-wait-seconds``; Slurm's
``--switches=N@max-time``): within its wait, a gang is planned with its preferred level as its
bound, and holds nothing while no domain there holds it but a wider one does (the book's
``reserve``; docs/slurm.md). The wait starts at the gang's first plan and spans rounds."""

from __future__ import annotations

from dataclasses import replace
from typing import Sequence

from extender.core.cluster.topology import Domain
from extender.core.model import GangSpec


def waits(spec: GangSpec, homes: Sequence[Domain], drained: bool) -> bool:
    """The gang has a wait for its preferred level that applies to this plan. A round beside
    running members (``homes``, ``ranks``) stays where they are; a drained gang lands where it
    drained: neither waits."""
    return bool(spec.preferred_wait_seconds) and spec.preferred is not None and not homes \
        and not spec.ranks and not drained


def aim(spec: GangSpec, since: float, now: float) -> tuple[GangSpec, float | None]:
    """The request to plan at ``now`` for a gang waiting since ``since``, and until when it
    waits (None: its wait is over, it is planned as asked)."""
    until = since + spec.preferred_wait_seconds
    return (replace(spec, required=spec.preferred), until) if now < until else (spec, None)
