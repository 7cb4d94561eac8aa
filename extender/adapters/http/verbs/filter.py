"""POST <prefix>/filter: ExtenderArgs -> ExtenderFilterResult."""

from __future__ import annotations

from typing import Any

from extender.adapters.http import wire
from extender.adapters.http.handler import ExtenderHandler, PodTranslator


def call(handler: ExtenderHandler, translate: PodTranslator, body: Any) -> wire.ExtenderFilterResult:
    args = wire.decode_extender_args(body)
    assert args["NodeNames"] is not None  # decode_extender_args refuses a request without them
    return wire.encode_filter_result(handler.filter(translate.pod(args["Pod"]), args["NodeNames"]))


async def now(handler: ExtenderHandler, translate: PodTranslator, body: Any) -> wire.ExtenderFilterResult | None:
    """``call`` if the handler can answer without waiting (``filter_now``), else None."""
    args = wire.decode_extender_args(body)
    assert args["NodeNames"] is not None
    verdict = handler.filter_now(translate.pod(args["Pod"]), args["NodeNames"])
    return None if verdict is None else wire.encode_filter_result(verdict)
