"""Exceptions to gRPC status codes, in this one interceptor (STYLE.md habit 11).

    BadRequest                 INVALID_ARGUMENT     the request cannot be read
    Overloaded                 RESOURCE_EXHAUSTED   a cap is reached; try later
    NotReady                   UNAVAILABLE          the watch cache is still listing; try later
    GangTimedOut,              ABORTED              the gang's round ended; the caller retries the pod
      GangUnreserved
    PermitRejected             FAILED_PRECONDITION  the pod is unknown or not where its gang planned it
    BindingFailed              UNAVAILABLE          the API server refused the Binding after retries
    UnknownPod                 NOT_FOUND            ExplainPod: railyard has not seen the pod
    any other RailyardError    FAILED_PRECONDITION
    NotImplementedError        UNIMPLEMENTED        a method the proto has and the servicer lacks
                                                    (grpc.health.v1 Health/List in grpcio-health-checking)
    anything else              INTERNAL             logged with its traceback; the server keeps serving

Order matters: the subclasses of PermitRejected come before it.

Two things happen before a method runs, and are made answers here too, for every service
(Extender, health, reflection):

- Request bytes that are not the method's message. grpc-python deserializes before the handler
  runs and, when the deserializer raises, logs a traceback and answers INTERNAL "Exception
  deserializing request!" (grpc/_server.py, _receive_message). So each method is re-registered
  with a deserializer that never raises; what it could not decode becomes BadRequest,
  INVALID_ARGUMENT naming the message type, logged by nobody.
- Details longer than ``MAX_DETAILS_BYTES`` once percent-encoded (as grpc-message travels) are
  cut: past 8 KiB of metadata a client drops the status and reports RESOURCE_EXHAUSTED about
  metadata instead of the error.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Iterable, Iterator

import grpc

from extender.core.errors import (
    BadRequest,
    BindingFailed,
    GangTimedOut,
    GangUnreserved,
    NotReady,
    Overloaded,
    PermitRejected,
    RailyardError,
    UnknownPod,
)

log = logging.getLogger("railyard.grpc")

MAX_DETAILS_BYTES = 2048
"""Status details, as sent (percent-encoded UTF-8), at most this long: a quarter of the 8 KiB
metadata limit grpc clients apply by default."""


CODES: tuple[tuple[type[Exception], grpc.StatusCode], ...] = (
    (BadRequest, grpc.StatusCode.INVALID_ARGUMENT),
    (Overloaded, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (NotReady, grpc.StatusCode.UNAVAILABLE),
    (GangTimedOut, grpc.StatusCode.ABORTED),
    (GangUnreserved, grpc.StatusCode.ABORTED),
    (PermitRejected, grpc.StatusCode.FAILED_PRECONDITION),
    (BindingFailed, grpc.StatusCode.UNAVAILABLE),
    (UnknownPod, grpc.StatusCode.NOT_FOUND),
    (RailyardError, grpc.StatusCode.FAILED_PRECONDITION),
    # What a generated base servicer raises for a method nobody implemented, with
    # UNIMPLEMENTED set on the context: the code it meant, not INTERNAL and a traceback.
    (NotImplementedError, grpc.StatusCode.UNIMPLEMENTED),
)


def status_of(exc: Exception) -> tuple[grpc.StatusCode, str]:
    for kind, code in CODES:
        if isinstance(exc, kind):
            return code, bounded_details(str(exc))
    return grpc.StatusCode.INTERNAL, bounded_details(f"railyard internal error: {type(exc).__name__}: {exc}")


def bounded_details(text: str, limit: int = MAX_DETAILS_BYTES) -> str:
    """``text`` cut so that, percent-encoded as gRPC sends status details, it fits ``limit`` bytes.

    Printable ASCII but '%' travels as itself, every other byte of its UTF-8 as %XX.
    """
    room = limit - 48  # for the tail saying what was cut
    size, cut = 0, 0
    for i, ch in enumerate(text):  # stops within ``limit`` characters, however long the text
        size += 1 if " " <= ch <= "~" and ch != "%" else 3 * len(ch.encode("utf-8", "replace"))
        if size <= room:
            cut = i + 1
        elif size > limit:
            return f"{text[:cut]}... ({len(text)} characters in all)"
    return text


class Undecodable:
    """A request whose bytes are not the method's message; the method answers INVALID_ARGUMENT."""

    __slots__ = ("message",)

    def __init__(self, message: str) -> None:
        self.message = message


def tolerant(method: str, deserializer: Callable[[bytes], Any] | None) -> Callable[[bytes], Any] | None:
    """``deserializer`` that returns an ``Undecodable`` instead of raising."""
    if deserializer is None:
        return None
    message_type = getattr(getattr(getattr(deserializer, "__self__", None), "DESCRIPTOR", None), "full_name", None)
    expected = f"a valid {message_type} message" if message_type else "the message it takes"

    def deserialize(data: bytes) -> Any:
        try:
            return deserializer(data)
        except Exception as exc:  # DecodeError, or whatever a deserializer raises: never INTERNAL
            return Undecodable(f"request to {method} is not {expected} ({len(data)} bytes): "
                               f"{type(exc).__name__}: {exc}")
    return deserialize


def _decoded(request: Any) -> Any:
    if isinstance(request, Undecodable):
        raise BadRequest(request.message)
    return request


def _each_decoded(requests: Iterable[Any]) -> Iterator[Any]:
    for request in requests:
        yield _decoded(request)


class ErrorInterceptor(grpc.ServerInterceptor):
    """Wraps every method handler so an exception, or request bytes it cannot decode, ends the
    call with its status code."""

    def intercept_service(self, continuation: Callable[[Any], Any], details: grpc.HandlerCallDetails) -> Any:
        handler = continuation(details)
        if handler is None:
            return None
        method = details.method
        decode = tolerant(method, handler.request_deserializer)
        encode = handler.response_serializer
        if handler.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(_unary(method, handler.unary_unary, _decoded), decode, encode)
        if handler.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(_stream(method, handler.unary_stream, _decoded), decode, encode)
        if handler.stream_unary is not None:  # none in this API; reflection and health have none either
            return grpc.stream_unary_rpc_method_handler(
                _unary(method, handler.stream_unary, _each_decoded), decode, encode)
        # server reflection's ServerReflectionInfo
        return grpc.stream_stream_rpc_method_handler(
            _stream(method, handler.stream_stream, _each_decoded), decode, encode)


def _abort(method: str, context: grpc.ServicerContext, exc: Exception) -> None:
    code, message = status_of(exc)
    if code == grpc.StatusCode.INTERNAL:
        log.exception("%s failed", method)
    context.abort(code, message)


def _unary(method: str, behavior: Callable[[Any, grpc.ServicerContext], Any],
           decoded: Callable[[Any], Any]) -> Callable[..., Any]:
    def call(request: Any, context: grpc.ServicerContext) -> Any:
        try:
            return behavior(decoded(request), context)
        except Exception as exc:
            _abort(method, context, exc)
    return call


def _stream(method: str, behavior: Callable[[Any, grpc.ServicerContext], Iterator[Any]],
            decoded: Callable[[Any], Any]) -> Callable[..., Any]:
    def call(request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        try:
            yield from behavior(decoded(request), context)
        except Exception as exc:
            _abort(method, context, exc)
    return call
