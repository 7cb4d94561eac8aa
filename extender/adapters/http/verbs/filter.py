"""POST <prefix>/filter: ExtenderArgs -> ExtenderFilterResult."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from extender.adapters.http import wire

if TYPE_CHECKING:
    from extender.adapters.http.server import ExtenderHandler


def call(handler: ExtenderHandler, body: Any) -> wire.ExtenderFilterResult:
    args = wire.decode_extender_args(body)
    return wire.encode_filter_result(handler.filter(args["Pod"], args["NodeNames"]))
