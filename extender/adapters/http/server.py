"""The HTTP face kube-scheduler talks to: the extender verbs, health, readiness, metrics.

    POST <prefix>/filter | /prioritize | /bind | /preempt    (prefix default /scheduler)
    GET  /healthz  /readyz  /metrics  /debug/gangs

aiohttp with orjson, chosen by measurement (bench/README.md). A filter call, and the bind call
of a pod bound alone (its one Binding awaited, not a thread held), are answered on the event
loop when the service can answer them without waiting (``filter_now``, ``bind_now``: its lock
is free, no recovery due, no gang to hold at the gate): no thread hop per call (issue 21 item 5,
measured by bench/lonepath.py). Every other call is decoded and run on worker threads, so a verb
waiting for the service lock (held by a gRPC PlanGang or a relist) or a large prioritize never
keeps /healthz, /readyz or /metrics waiting (issue 11 item 6; measured in
tests/fuzz/test_http_loop.py). filter, prioritize and preempt share ``VERB_WORKERS`` threads
(they take one lock in the service: more threads would only queue on it); a bind call may be
held for minutes at the gang gate, so it runs on a pool sized to the held-bind cap whose idle
threads leave (``workers.py``).

Work is bounded: past ``max_in_flight`` verb calls (filter, prioritize, preempt: reading,
waiting for a worker or running) or ``max_held_binds`` bind calls the server answers 503 at
once instead of queueing.

Errors are translated here and only here (STYLE habit 11; the hierarchy is in core/errors.py):

    BadRequest                  -> 400, message names the field (filter/bind: in ``Error``); also a
                                   body that is not the gzip or deflate data its Content-Encoding says,
                                   one not received within ``BODY_SECONDS``, one the client cut short
    malformed HTTP              -> 400 from aiohttp before any handler; one log line per 10 s
    Overloaded                  -> 503, which cap was hit
    other RailyardError         -> 200 with ``Error`` for filter and bind (the scheduler logs it
                                   and retries the pod); 500 for prioritize and preempt
    anything else               -> 500, logged with its traceback; the server keeps serving

An ``Error`` is cut to ``MAX_ERROR_CHARS``: messages quote what the client sent (a node name,
a pod name), and a client can send megabytes.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import threading
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Protocol

import orjson
from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from extender.adapters.answers import gang_view_json
from extender.adapters.echo import clip, shown
from extender.adapters.http import wire
from extender.adapters.http.handler import ExtenderHandler, PodTranslator
from extender.adapters.http.verbs import NOW, VERBS
from extender.adapters.http.workers import IdleExitPool
from extender.core.errors import BadRequest, Overloaded, RailyardError
from extender.settings import ServerSettings, listen_address

log = logging.getLogger("railyard.http")

VERB_WORKERS = 4
"""Threads that decode and run filter, prioritize and preempt."""

BODY_SECONDS = 10.0
"""A request body must arrive within this long once its headers have (kube-scheduler sends
its bodies at once); else 400, and the slot it held in the cap is free again."""

MAX_ERROR_CHARS = 2048
"""Longest ``Error`` message answered (and logged); longer ones are cut, saying their length."""


class ServerObserver(Protocol):
    """The part of ``extender.adapters.metrics.Metrics`` the server uses."""

    def verb_finished(self, verb: str, outcome: str, seconds: float) -> None: ...
    def held_binds(self, n: int) -> None: ...
    def exposition(self) -> tuple[bytes, str]: ...


@dataclass
class _Counters:
    in_flight: int = 0
    held_binds: int = 0


# Verbs whose reply type has an ``Error`` field the scheduler reads.
_ERROR_FIELD_VERBS = ("filter", "bind")


def _error_reply(verb: str, message: str) -> dict[str, Any]:
    message = clip(message, MAX_ERROR_CHARS)
    if verb == "filter":
        return dict(wire.filter_error(message))
    return {"Error": message}


_WBITS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}


def _decoded(raw: bytes, encoding: str, limit: int) -> bytes:
    """The body with its Content-Encoding undone, at most ``limit`` bytes once decompressed.

    Ours, not aiohttp's (auto_decompress is off): aiohttp's answers a body that is not gzip
    with an exception the handler sees as a 500, logs a traceback while draining it, and
    answers an encoding it lacks (br, zstd) in plain text before any handler runs.
    """
    coding = encoding.strip().lower()
    if coding in ("", "identity"):
        return raw
    wbits = _WBITS.get(coding)
    if wbits is None:
        raise BadRequest(f"body has Content-Encoding {shown(encoding)}; railyard reads gzip, deflate or none")
    out, data = bytearray(), raw
    try:
        while True:  # gzip may hold several members, one after the other (RFC 1952 2.2)
            stream = zlib.decompressobj(wbits)
            out += stream.decompress(data, limit + 1 - len(out))
            if len(out) > limit:
                raise BadRequest(f"body is over the {limit}-byte limit once decompressed ({coding})")
            if not stream.eof:
                raise BadRequest(f"body ends before its {coding} data does ({len(raw)} bytes sent)")
            data = stream.unused_data
            if not data:
                return bytes(out)
            if wbits == zlib.MAX_WBITS:
                raise BadRequest(f"body has {len(data)} bytes after its deflate data")
    except zlib.error as exc:
        raise BadRequest(f"body does not decode as Content-Encoding {shown(encoding)}: {exc}") from None


class _ProtocolLog:
    """aiohttp's server log. A request aiohttp refuses before any handler runs (not HTTP, a
    header line over 8 KiB, bad chunking) is answered 400 by aiohttp and logged here as one
    warning line, at most once per 10 s, without the traceback aiohttp attaches to each."""

    def __init__(self, warn: Callable[[str, str, int, str], None]) -> None:
        self._warn = warn

    def debug(self, msg: str, *args: Any, exc_info: Any = None, **kw: Any) -> None:
        log.debug(msg, *args)

    def exception(self, msg: str, *args: Any, exc_info: Any = None, **kw: Any) -> None:
        if isinstance(exc_info, HttpProcessingError):
            text = " ".join(f"{msg % args}: {exc_info.message}".split())  # aiohttp's spans lines
            self._warn("http", "malformed", exc_info.code, clip(text, MAX_ERROR_CHARS))
        else:
            log.error(msg, *args, exc_info=exc_info)


def _json(status: int, obj: Any) -> web.Response:
    return web.Response(status=status, body=orjson.dumps(obj), content_type="application/json")


class ExtenderServer:
    """Runs the aiohttp application on its own thread and event loop."""

    def __init__(self, handler: ExtenderHandler, observer: ServerObserver, translate: PodTranslator, *,
                 settings: ServerSettings = ServerSettings(),
                 ready_checks: Mapping[str, Callable[[], bool]] | None = None,
                 ssl_context: ssl.SSLContext | None = None, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Listens on ``settings.listen`` (port 0: any free port) under ``settings.prefix``,
        within the caps ``max_body_bytes``, ``max_in_flight`` and ``max_held_binds``. ``loop``:
        an event loop already running on a thread of its own to serve on (the Binding client's:
        a lone pod's Binding is then awaited with no hop at all), else a loop of its own."""
        self.handler = handler
        self.observer = observer
        self.translate = translate
        self.limits = settings
        prefix = settings.prefix
        self.prefix = "/" + prefix.strip("/") if prefix.strip("/") else ""
        self._host, self._port = listen_address(settings.listen)
        self._ready_checks = dict(ready_checks or {})
        self._ssl = ssl_context
        self._counters = _Counters()
        self._warned: dict[tuple[str, str], tuple[float, int]] = {}
        self._binds = IdleExitPool(settings.max_held_binds, "bind")  # a burst's threads leave after it
        self._verbs = ThreadPoolExecutor(max_workers=VERB_WORKERS, thread_name_prefix="verb")
        self._shared = loop
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None
        self.address: tuple[str, int] | None = None

    # -- lifecycle -----------------------------------------------------------------------
    def app(self) -> web.Application:
        # The size check is ours (400 with a message); aiohttp's own would answer 413.
        app = web.Application(client_max_size=self.limits.max_body_bytes)
        app.router.add_post(self.prefix + "/{verb}", self._verb)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/debug/gangs", self._debug_gangs)
        return app

    def start(self) -> tuple[str, int]:
        """Bind and serve on a background thread; returns the bound (host, port)."""
        if self._shared is not None:
            self._loop = self._shared
            try:
                asyncio.run_coroutine_threadsafe(self._start_site(), self._shared).result()
            except Exception as exc:
                raise OSError(f"cannot listen on {self._host}:{self._port}: {exc}") from exc
            assert self.address is not None
            return self.address
        started = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self._start_site())
            except BaseException as exc:  # reported to start()'s caller
                failure.append(exc)
                started.set()
                return
            started.set()
            loop.run_forever()
            assert self._runner is not None  # _start_site made it
            loop.run_until_complete(self._runner.cleanup())
            left = asyncio.all_tasks(loop)  # connections still open: end them here, not in the GC's log
            for task in left:
                task.cancel()
            loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))
            loop.close()

        self._thread = threading.Thread(target=run, name="http", daemon=True)
        self._thread.start()
        started.wait()
        if failure:
            raise OSError(f"cannot listen on {self._host}:{self._port}: {failure[0]}") from failure[0]
        assert self.address is not None
        return self.address

    async def _start_site(self) -> None:
        # Idle connections outlive Go's 90 s IdleConnTimeout, so the scheduler always closes
        # first and never posts a filter on a connection we are closing at the same moment.
        self._runner = web.AppRunner(self.app(), access_log=None, handle_signals=False, keepalive_timeout=300,
                                     auto_decompress=False,  # _decoded() does it, with 400s
                                     logger=_ProtocolLog(self._warn))
        await self._runner.setup()
        site = web.TCPSite(self._runner, self._host, self._port, backlog=1024, ssl_context=self._ssl)
        await site.start()
        self.address = tuple(self._runner.addresses[0][:2])  # the port actually bound when port=0

    def stop(self) -> None:
        if self._shared is not None and self._runner is not None:  # the loop is its owner's to stop
            try:  # as the join below: calls still held after 10 s end with the loop
                asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._shared).result(timeout=10)
            except TimeoutError:
                log.warning("HTTP server stopped with calls still in progress")
        elif self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
        self._binds.shutdown(wait=False, cancel_futures=True)
        self._verbs.shutdown(wait=False, cancel_futures=True)

    # -- verbs ---------------------------------------------------------------------------
    async def _verb(self, request: web.Request) -> web.Response:
        verb = request.match_info["verb"]
        call = VERBS.get(verb)
        if call is None:
            return _json(404, {"Error": f"unknown extender verb {shown(verb)}; railyard serves "
                                        f"{', '.join(self.prefix + '/' + v for v in VERBS)}"})
        started = time.perf_counter()
        c = self._counters
        held = verb == "bind"
        counted = False
        try:
            if held:
                if c.held_binds >= self.limits.max_held_binds:
                    raise Overloaded(f"railyard busy: {c.held_binds} bind calls held, the cap is "
                                     f"{self.limits.max_held_binds}; the scheduler will retry the pod")
                c.held_binds += 1
                self.observer.held_binds(c.held_binds)
            else:
                if c.in_flight >= self.limits.max_in_flight:
                    raise Overloaded(f"railyard busy: {c.in_flight} filter/prioritize/preempt calls in flight, "
                                     f"the cap is {self.limits.max_in_flight}")
                c.in_flight += 1
            counted = True
            raw = await self._read_body(request)
            encoding = request.headers.get("Content-Encoding", "")
            now = NOW.get(verb)
            reply: Any = await self._run(now, raw, encoding) if now is not None else None
            if reply is None:
                reply = await asyncio.get_running_loop().run_in_executor(
                    self._binds if held else self._verbs, self._run, call, raw, encoding)
            status, outcome = 200, "ok"
        except BadRequest as exc:
            status, outcome, reply = 400, "bad_request", _error_reply(verb, f"bad {verb} request: {exc}")
        except Overloaded as exc:
            status, outcome, reply = 503, "busy", _error_reply(verb, str(exc))
        except RailyardError as exc:
            status = 200 if verb in _ERROR_FIELD_VERBS else 500
            outcome, reply = "error", _error_reply(verb, str(exc))
        except Exception as exc:
            log.exception("%s failed", verb)
            status, outcome = 500, "internal"
            reply = _error_reply(verb, f"railyard internal error in {verb}: {type(exc).__name__}: {exc}")
        finally:
            if counted:
                if held:
                    c.held_binds -= 1
                    self.observer.held_binds(c.held_binds)
                else:
                    c.in_flight -= 1
        if outcome not in ("ok", "error"):
            self._warn(verb, outcome, status, reply.get("Error"))
        self.observer.verb_finished(verb, outcome, time.perf_counter() - started)
        response = _json(status, reply)
        if not request.content.at_eof():  # a body left unread (over the limit): hang up, don't drain it
            response.force_close()
        return response

    def _warn(self, verb: str, outcome: str, status: int, message: str) -> None:
        """Log refused calls, at most once per 10 s per verb and outcome: a misconfigured
        scheduler sends hundreds a second, and /metrics counts every one."""
        now = time.monotonic()
        last, suppressed = self._warned.get((verb, outcome), (-1e9, 0))
        if now - last < 10:
            self._warned[(verb, outcome)] = (last, suppressed + 1)
            return
        more = f" ({suppressed} more like it not logged)" if suppressed else ""
        log.warning("%s %s: %s%s", verb, status, message, more)
        self._warned[(verb, outcome)] = (now, 0)

    async def _read_body(self, request: web.Request) -> bytes:
        limit = self.limits.max_body_bytes
        if request.content_length is not None and request.content_length > limit:
            raise BadRequest(f"body of {request.content_length} bytes is over the {limit}-byte limit")
        try:
            async with asyncio.timeout(BODY_SECONDS):  # a body sent slowly holds a slot of the cap
                return await request.read()
        except web.HTTPRequestEntityTooLarge:  # chunked body without Content-Length
            raise BadRequest(f"body is over the {limit}-byte limit") from None
        except TimeoutError:
            raise BadRequest(f"body not received within {BODY_SECONDS:g}s") from None
        except ConnectionResetError:  # the client hung up mid-body; nobody reads this reply
            raise BadRequest("connection closed before the body ended") from None

    def _run(self, call: Callable[..., Any], raw: bytes, encoding: str) -> Any:
        """The body decoded, then the verb (on a worker thread; a ``NOW`` verb on the loop)."""
        raw = _decoded(raw, encoding, self.limits.max_body_bytes)
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise BadRequest(f"body is not valid JSON: {exc}") from None
        return call(self.handler, self.translate, body)

    # -- the rest ------------------------------------------------------------------------
    async def _healthz(self, request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def _readyz(self, request: web.Request) -> web.Response:
        checks = {"handler": self.handler.ready, **self._ready_checks}
        lines, ok = [], True
        for name, check in checks.items():
            try:
                passed = bool(check())
            except Exception as exc:
                log.exception("readiness check %s failed", name)
                passed, name = False, f"{name} ({type(exc).__name__}: {exc})"
            ok &= passed
            lines.append(f"[{'+' if passed else '-'}]{name} {'ok' if passed else 'not ready'}")
        lines.append("ready" if ok else "not ready")
        return web.Response(status=200 if ok else 503, text="\n".join(lines) + "\n")

    async def _metrics(self, request: web.Request) -> web.Response:
        body, content_type = self.observer.exposition()
        return web.Response(body=body, headers={"Content-Type": content_type})

    async def _debug_gangs(self, request: web.Request) -> web.Response:
        def listing() -> bytes:  # on a worker: it waits for the service lock
            gangs = [gang_view_json(g) for g in self.handler.debug_gangs()]
            return orjson.dumps(gangs, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS)
        try:
            body = await asyncio.get_running_loop().run_in_executor(self._verbs, listing)
        except Exception as exc:
            log.exception("debug_gangs failed")
            return _json(500, {"Error": f"debug_gangs failed: {type(exc).__name__}: {exc}"})
        return web.Response(body=body, content_type="application/json")
