"""POST <prefix>/bind: ExtenderBindingArgs -> ExtenderBindingResult. May block for minutes."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from extender.adapters.http import wire

if TYPE_CHECKING:
    from extender.adapters.http.server import ExtenderHandler


def call(handler: ExtenderHandler, body: Any) -> wire.ExtenderBindingResult:
    args = wire.decode_binding_args(body)
    handler.bind(args["PodNamespace"], args["PodName"], args["PodUID"], args["Node"])
    return wire.encode_binding_result()
