"""Pick the extender's HTTP stack and JSON codec by measuring them (issue 4, item 1).

Each candidate server answers POST /scheduler/filter the way the real one must: parse an
ExtenderArgs body, hand the names to a handler that keeps them all, encode an
ExtenderFilterResult. A client in a separate process (so the server owns its GIL) sends the same
body over one keep-alive connection, sequentially, and reports p50/p99 per request. Then the
same run again while HELD bind requests are parked in the server (as a gang held at bind is),
to show that held binds don't slow or block filter.

    python -m bench.http_stack                 # every stack x codec, 500 and 5000 names
    python -m bench.http_stack --requests 3000 --held 64

Only loopback traffic; every loop is bounded.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import multiprocessing as mp
import socket
import statistics
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import orjson

CODECS = {
    "json": (json.loads, lambda obj: json.dumps(obj, separators=(",", ":")).encode()),
    "orjson": (orjson.loads, orjson.dumps),
}


def filter_body(n: int) -> bytes:
    pod = {"metadata": {"name": "p", "namespace": "ml", "uid": "u-1"},
           "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}
    return json.dumps({"Pod": pod, "Nodes": None, "NodeNames": [f"node-{i:05d}" for i in range(n)]}).encode()


def answer(loads, dumps, path: str, body: bytes, release: threading.Event) -> bytes:
    args = loads(body)
    if path.endswith("/bind"):
        release.wait(60)
        return dumps({"Error": ""})
    names = args["NodeNames"]
    return dumps({"Nodes": None, "NodeNames": names, "FailedNodes": {}, "FailedAndUnresolvableNodes": {}, "Error": ""})


def relay(source, target: threading.Event) -> None:
    """Sets ``target`` (this process's event) once ``source`` (the parent's) is set."""
    source.wait()
    target.set()


STACKS = (("floor", "-"), ("stdlib", "json"), ("stdlib", "orjson"), ("aiohttp", "json"), ("aiohttp", "orjson"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve_stdlib(port: int, codec: str, ready, release_evt) -> None:
    loads, dumps = CODECS[codec]
    release = threading.Event()

    class H(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self):
            super().setup()
            # Headers and body go out in separate writes: without NODELAY, Nagle + the client's
            # delayed ACK add 40 ms to every keep-alive response.
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def do_POST(self):
            body = self.rfile.read(int(self.headers["Content-Length"]))
            out = answer(loads, dumps, self.path, body, release)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        def log_message(self, *a):
            pass

    class S(ThreadingHTTPServer):
        def handle_error(self, request, client_address):
            pass  # held sockets closed by the bench at the end

    srv = S(("127.0.0.1", port), H)
    srv.daemon_threads = True
    threading.Thread(target=relay, args=(release_evt, release), daemon=True).start()
    ready.set()
    srv.serve_forever()


def serve_aiohttp(port: int, codec: str, ready, release_evt) -> None:
    from aiohttp import web

    loads, dumps = CODECS[codec]
    release = threading.Event()

    async def handle(request: web.Request) -> web.Response:
        body = await request.read()
        if request.path.endswith("/bind"):  # a blocking handler call must leave the loop
            out = await asyncio.get_running_loop().run_in_executor(None, answer, loads, dumps, request.path, body, release)
        else:
            out = answer(loads, dumps, request.path, body, release)
        return web.Response(body=out, content_type="application/json")

    app = web.Application(client_max_size=8 << 20)
    app.router.add_post("/scheduler/{verb}", handle)
    threading.Thread(target=relay, args=(release_evt, release), daemon=True).start()
    ready.set()
    web.run_app(app, host="127.0.0.1", port=port, print=None, handle_signals=False, access_log=None)


def serve_floor(port: int, codec: str, ready, release_evt) -> None:
    """Not a candidate: reads each request and sends a canned reply, no HTTP parsing, no JSON.
    Its latency is what the client and the loopback cost, the floor under every stack."""
    reply = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"

    class Floor(asyncio.Protocol):
        def connection_made(self, transport):
            self.t, self.buf = transport, b""

        def data_received(self, data):
            self.buf += data
            while True:
                head, sep, rest = self.buf.partition(b"\r\n\r\n")
                if not sep:
                    return
                n = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                             if line.lower().startswith(b"content-length")))
                if len(rest) < n:
                    return
                self.buf = rest[n:]
                self.t.write(reply)

    async def main():
        server = await asyncio.get_running_loop().create_server(Floor, "127.0.0.1", port)
        ready.set()
        await server.serve_forever()

    asyncio.run(main())


def hold_binds(port: int, n: int) -> list[socket.socket]:
    body = json.dumps({"PodName": "p", "PodNamespace": "ml", "PodUID": "u", "Node": "n"}).encode()
    socks = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(b"POST /scheduler/bind HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        socks.append(s)
    return socks


def client(port: int, body: bytes, requests: int, path: str = "/scheduler/filter") -> list[float]:
    conn = http.client.HTTPConnection("127.0.0.1", port)
    headers = {"Content-Type": "application/json"}
    times = []
    for i in range(requests + 200):  # the first 200 warm up
        t0 = time.perf_counter()
        conn.request("POST", path, body, headers)
        resp = conn.getresponse()
        resp.read()
        dt = time.perf_counter() - t0
        if resp.status != 200:
            raise SystemExit(f"{path}: status {resp.status}: {resp.read()[:300]!r}")
        if i >= 200:
            times.append(dt)
    conn.close()
    return times


def pct(times: list[float], q: float) -> float:
    return sorted(times)[min(len(times) - 1, int(q * len(times)))] * 1e3


def run_one(stack: str, codec: str, names: int, requests: int, held: int) -> dict:
    port = free_port()
    ctx = mp.get_context("spawn")
    ready, release = ctx.Event(), ctx.Event()
    target = {"stdlib": serve_stdlib, "aiohttp": serve_aiohttp, "floor": serve_floor}[stack]
    proc = ctx.Process(target=target, args=(port, codec, ready, release), daemon=True)
    proc.start()
    ready.wait(10)
    for _ in range(100):  # wait for the listener
        try:
            socket.create_connection(("127.0.0.1", port)).close()
            break
        except OSError:
            time.sleep(0.05)
    body = filter_body(names)
    with ctx.Pool(1) as pool:
        idle = pool.apply(client, (port, body, requests))
        socks = hold_binds(port, held) if stack != "floor" else []
        busy = pool.apply(client, (port, body, requests)) if stack != "floor" else idle
    release.set()
    for s in socks:
        s.close()
    proc.terminate()
    proc.join(5)
    return {"stack": stack, "codec": codec, "names": names, "held": held if stack != "floor" else 0,
            "p50": pct(idle, 0.5), "p99": pct(idle, 0.99),
            "held_p50": pct(busy, 0.5), "held_p99": pct(busy, 0.99),
            "mean": statistics.fmean(idle) * 1e3}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, default=2000)
    p.add_argument("--held", type=int, default=64, help="bind requests parked during the second run")
    p.add_argument("--names", type=int, nargs="+", default=[500, 5000])
    args = p.parse_args()
    print(f"{'stack':8} {'codec':7} {'names':>5} {'p50 ms':>7} {'p99 ms':>7}  "
          f"{'with held binds':>15} {'p50 ms':>7} {'p99 ms':>7}")
    for names in args.names:
        for stack, codec in STACKS:
            r = run_one(stack, codec, names, args.requests, args.held)
            print(f"{r['stack']:8} {r['codec']:7} {r['names']:5d} {r['p50']:7.3f} {r['p99']:7.3f}  "
                  f"{r['held']:>15d} {r['held_p50']:7.3f} {r['held_p99']:7.3f}", flush=True)


if __name__ == "__main__":
    main()
