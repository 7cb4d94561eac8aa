"""POST <prefix>/filter: ExtenderArgs -> ExtenderFilterResult."""

from __future__ import annotations

from typing import Any

from extender.adapters.http import wire
from extender.adapters.http.handler import ExtenderHandler, PodTranslator


def call(handler: ExtenderHandler, translate: PodTranslator, body: Any) -> wire.ExtenderFilterResult:
    args = wire.decode_extender_args(body)
    assert args["NodeNames"] is not None  # decode_extender_args refuses a request without them
    return wire.encode_filter_result(handler.filter(translate.pod(args["Pod"]), args["NodeNames"]))
