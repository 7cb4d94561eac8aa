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
    anything else              INTERNAL             logged with its traceback; the server keeps serving

Order matters: the subclasses of PermitRejected come before it.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Iterator

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
)


def status_of(exc: Exception) -> tuple[grpc.StatusCode, str]:
    for kind, code in CODES:
        if isinstance(exc, kind):
            return code, str(exc)
    return grpc.StatusCode.INTERNAL, f"railyard internal error: {type(exc).__name__}: {exc}"


class ErrorInterceptor(grpc.ServerInterceptor):
    """Wraps every method handler so an exception ends the call with its status code."""

    def intercept_service(self, continuation: Callable[[Any], Any], details: grpc.HandlerCallDetails) -> Any:
        handler = continuation(details)
        if handler is None:
            return None
        method = details.method
        if handler.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(
                _unary(method, handler.unary_unary), handler.request_deserializer, handler.response_serializer)
        if handler.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(
                _stream(method, handler.unary_stream), handler.request_deserializer, handler.response_serializer)
        return handler  # no client-streaming methods in this API


def _abort(method: str, context: grpc.ServicerContext, exc: Exception) -> None:
    code, message = status_of(exc)
    if code == grpc.StatusCode.INTERNAL:
        log.exception("%s failed", method)
    context.abort(code, message)


def _unary(method: str, behavior: Callable[[Any, grpc.ServicerContext], Any]) -> Callable[..., Any]:
    def call(request: Any, context: grpc.ServicerContext) -> Any:
        try:
            return behavior(request, context)
        except Exception as exc:
            _abort(method, context, exc)
    return call


def _stream(method: str, behavior: Callable[[Any, grpc.ServicerContext], Iterator[Any]]) -> Callable[..., Any]:
    def call(request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        try:
            yield from behavior(request, context)
        except Exception as exc:
            _abort(method, context, exc)
    return call
