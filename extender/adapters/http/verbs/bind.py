"""POST <prefix>/bind: ExtenderBindingArgs -> ExtenderBindingResult. May block for minutes."""

from __future__ import annotations

from typing import Any

from extender.adapters.http import wire
from extender.adapters.http.handler import ExtenderHandler, PodTranslator


def call(handler: ExtenderHandler, translate: PodTranslator, body: Any) -> wire.ExtenderBindingResult:
    args = wire.decode_binding_args(body)
    handler.bind(args["PodNamespace"], args["PodName"], args["PodUID"], args["Node"])
    return wire.encode_binding_result()
