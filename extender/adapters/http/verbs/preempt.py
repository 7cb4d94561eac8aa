"""POST <prefix>/preempt: ExtenderPreemptionArgs -> ExtenderPreemptionResult."""

from __future__ import annotations

from typing import Any

from extender.adapters.http import wire
from extender.adapters.http.handler import ExtenderHandler, PodTranslator


def call(handler: ExtenderHandler, translate: PodTranslator, body: Any) -> wire.ExtenderPreemptionResult:
    args = wire.decode_preemption_args(body)
    kept = handler.preempt(translate.pod(args["Pod"]), wire.victim_uids(args))
    return wire.encode_preemption_result(kept, wire.pdb_violations(args))
