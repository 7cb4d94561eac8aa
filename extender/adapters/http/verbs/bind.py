"""POST <prefix>/bind: ExtenderBindingArgs -> ExtenderBindingResult. May block for minutes."""

from __future__ import annotations

from typing import Any

from extender.adapters.http import wire
from extender.adapters.http.handler import ExtenderHandler, PodTranslator


def call(handler: ExtenderHandler, translate: PodTranslator, body: Any) -> wire.ExtenderBindingResult:
    args = wire.decode_binding_args(body)
    handler.bind(args["PodNamespace"], args["PodName"], args["PodUID"], args["Node"])
    return wire.encode_binding_result()


async def now(handler: ExtenderHandler, translate: PodTranslator, body: Any) -> wire.ExtenderBindingResult | None:
    """``call`` for a pod bound alone, its Binding awaited on the caller's loop (``bind_now``);
    None when the handler would have to hold or wait."""
    args = wire.decode_binding_args(body)
    binding = handler.bind_now(args["PodNamespace"], args["PodName"], args["PodUID"], args["Node"])
    if binding is None:
        return None
    await binding
    return wire.encode_binding_result()
