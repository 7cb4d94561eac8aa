"""POST <prefix>/preempt: ExtenderPreemptionArgs -> ExtenderPreemptionResult."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from extender.adapters.http import wire

if TYPE_CHECKING:
    from extender.adapters.http.server import ExtenderHandler


def call(handler: ExtenderHandler, body: Any) -> wire.ExtenderPreemptionResult:
    args = wire.decode_preemption_args(body)
    kept = handler.preempt(args["Pod"], wire.victim_uids(args))
    return wire.encode_preemption_result(kept, wire.pdb_violations(args))
