"""The live topology view (docs/view.md): a read-only page on a port of its own
(``view.listen``; off unless set), apart from the verbs' listener so a browser never shares
its caps, its threads or its address with kube-scheduler.

    GET /                the page (static/index.html), with /view.js and /view.css
    GET /topology.json   the document (``adapters/topoview.py``), gzip when asked (compressed
                         once per renewal), ETag
    anything else        404

Every document comes from one snapshot of the service's cache (``service/topoview.py``: copies
under the lock, the JSON made outside it) and serves every client for ``view.refresh_seconds``:
however many browsers poll, the service lock is taken at most once per period, by one thread of
its own (never a verb's worker). ``Server-Timing`` says how long the snapshot (``lock``: waiting
for the lock and copying) and the JSON took.
"""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from importlib import resources
from typing import Callable

import orjson
from aiohttp import web

from extender.adapters.topoview import topology_json
from extender.service.topoview import TopologySnapshot
from extender.settings import ViewSettings, listen_address

log = logging.getLogger("railyard.view")

ASSETS = {"/": ("index.html", "text/html"), "/view.js": ("view.js", "text/javascript"),
          "/view.css": ("view.css", "text/css")}
"""Path -> (file in ``static/``, content type): the whole page, shipped in the package."""
GZIP_LEVEL = 6
PAGE_HEADERS = {"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff",
                # Nothing from elsewhere, no inline script: a gang name can never run as code.
                "Content-Security-Policy": "default-src 'self'; frame-ancestors 'none'"}


def asset(name: str) -> bytes:
    return resources.files("extender.adapters.http").joinpath("static", name).read_bytes()


@dataclass(frozen=True)
class Rendered:
    body: bytes
    gzipped: bytes
    """The body compressed once per renewal, not once per viewer."""
    etag: str
    timing: str
    """``Server-Timing``: the snapshot (waiting for the lock and copying) and the JSON, in ms."""
    taken_at: float


class Document:
    """The latest /topology.json, renewed at most once per ``refresh_seconds``; ``current`` is
    replaced whole, so a reader on the event loop never sees half of a renewal."""

    def __init__(self, source: Callable[[], TopologySnapshot], refresh_seconds: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.source = source
        self.refresh = refresh_seconds
        self.clock = clock
        self.current = Rendered(b"", b"", "", "", -float("inf"))

    def stale(self) -> bool:
        return self.clock() - self.current.taken_at >= self.refresh

    def renew(self) -> None:
        """On the view's own thread: snapshot (under the service lock), then JSON (outside it)."""
        started = time.perf_counter()
        snap = self.source()
        copied = time.perf_counter()
        body = orjson.dumps(topology_json(snap))
        encoded = time.perf_counter()
        gzipped = gzip.compress(body, GZIP_LEVEL)
        done = time.perf_counter()
        self.current = Rendered(body, gzipped, '"' + hashlib.blake2b(body, digest_size=12).hexdigest() + '"',
                                f"lock;dur={(copied - started) * 1e3:.2f}, json;dur={(encoded - copied) * 1e3:.2f}, "
                                f"gzip;dur={(done - encoded) * 1e3:.2f}", self.clock())


class ViewServer:
    """Runs the view's aiohttp application on its own thread and event loop."""

    def __init__(self, source: Callable[[], TopologySnapshot], settings: ViewSettings) -> None:
        self.document = Document(source, settings.refresh_seconds)
        self._host, self._port = listen_address(settings.listen)
        self._assets = {path: (asset(name), kind) for path, (name, kind) in ASSETS.items()}
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="view")
        self._renewing: asyncio.Future[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self.address: tuple[str, int] | None = None

    def app(self) -> web.Application:
        app = web.Application(client_max_size=1024)  # GET only: no body is ever read
        app.router.add_get("/topology.json", self._topology)
        for path in ASSETS:
            app.router.add_get(path, self._asset)
        app.router.add_route("*", "/{anything:.*}", self._not_found)
        return app

    def start(self) -> tuple[str, int]:
        """Bind and serve on a background thread; returns the bound (host, port)."""
        loop = asyncio.new_event_loop()
        runner = web.AppRunner(self.app(), access_log=None, handle_signals=False)
        try:
            loop.run_until_complete(runner.setup())
            site = web.TCPSite(runner, self._host, self._port)
            loop.run_until_complete(site.start())
        except OSError as exc:
            loop.run_until_complete(runner.cleanup())
            loop.close()
            raise OSError(f"cannot serve the view on {self._host}:{self._port}: {exc}") from exc
        self.address = tuple(runner.addresses[0][:2])

        def run() -> None:
            asyncio.set_event_loop(loop)
            loop.run_forever()
            loop.run_until_complete(runner.cleanup())
            loop.close()

        self._loop = loop
        self._thread = threading.Thread(target=run, name="view", daemon=True)
        self._thread.start()
        return self.address

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
        self._worker.shutdown(wait=False, cancel_futures=True)

    async def _asset(self, request: web.Request) -> web.Response:
        body, kind = self._assets[request.path]
        return web.Response(body=body, content_type=kind, headers=PAGE_HEADERS)

    async def _not_found(self, request: web.Request) -> web.Response:
        served = ", ".join([*ASSETS, "/topology.json"])
        return web.Response(status=404, text=f"not found; the view serves GET {served}\n")

    async def _topology(self, request: web.Request) -> web.Response:
        doc = self.document
        if doc.stale():
            if self._renewing is None:  # one renewal at a time; every request waits for the same one
                loop = asyncio.get_running_loop()
                self._renewing = asyncio.ensure_future(loop.run_in_executor(self._worker, doc.renew))
            renewing = self._renewing
            try:
                await asyncio.shield(renewing)
            except Exception as exc:
                log.exception("topology view failed")
                return web.json_response({"Error": f"topology view failed: {type(exc).__name__}: {exc}"}, status=500)
            finally:
                if self._renewing is renewing and renewing.done():
                    self._renewing = None
        now = doc.current
        headers = {"ETag": now.etag, "Cache-Control": "no-cache", "Server-Timing": now.timing}
        if request.headers.get("If-None-Match") == now.etag:
            return web.Response(status=304, headers=headers)
        if "gzip" in request.headers.get("Accept-Encoding", ""):
            headers["Content-Encoding"] = "gzip"
            return web.Response(body=now.gzipped, content_type="application/json", headers=headers)
        return web.Response(body=now.body, content_type="application/json", headers=headers)
