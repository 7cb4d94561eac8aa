"""What no HTTP client library sends: slow and unfinished bodies, malformed HTTP, and floods
past the caps, over raw sockets to the real server. Each gets a clear 4xx or 503; the log gets
one line per kind and 10 s, never a traceback; a real gang binds whole afterwards.
"""

from __future__ import annotations

import json
import socket
import threading
import time

import pytest

from extender.adapters.http import server as http_server
from tests.fuzz.live import Live, LogWatch
from tests.topologies import TRANSLATE, gang, pod

FILTER = json.dumps({"Pod": pod("solo", 1, ns="raw"), "NodeNames": ["h1", "h2"]}).encode()


@pytest.fixture
def live(monkeypatch):
    monkeypatch.setattr(http_server, "BODY_SECONDS", 0.5)
    live = Live(max_in_flight=16, max_held_binds=4)
    with LogWatch() as watch:
        live.watch = watch
        yield live
    live.close()


def connect(live: Live) -> socket.socket:
    return socket.create_connection((live.host, live.port), timeout=10)


def head(path: str, length: int | None = None, extra: str = "") -> bytes:
    sized = f"Content-Length: {length}\r\n" if length is not None else ""
    return f"POST {path} HTTP/1.1\r\nHost: railyard\r\nContent-Type: application/json\r\n{sized}{extra}\r\n".encode()


def answer(sock: socket.socket) -> tuple[int, bytes]:
    """Status and body of one HTTP/1.1 response read from ``sock``."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"closed after {data!r}")
        data += chunk
    header, _, body = data.partition(b"\r\n\r\n")
    length = int(next(line.split(b":")[1] for line in header.split(b"\r\n") if line.lower().startswith(b"content-length")))
    while len(body) < length:
        body += sock.recv(65536)
    return int(header.split()[1]), body


def in_flight(live: Live) -> int:
    return live.http._counters.in_flight


def wait_for(cond, timeout: float = 10) -> None:
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, "condition not reached"
        time.sleep(0.01)


def test_a_body_that_never_ends_is_a_400_and_frees_its_slot(live):
    sock = connect(live)
    sock.sendall(head("/scheduler/filter", len(FILTER)) + FILTER[:20])
    wait_for(lambda: in_flight(live) == 1)
    status, body = answer(sock)
    assert status == 400
    assert json.loads(body)["Error"] == "bad filter request: body not received within 0.5s"
    assert in_flight(live) == 0
    assert live.watch.problems() == []


def test_clients_that_hang_up_mid_body_leave_no_traceback(live):
    sock = connect(live)
    sock.sendall(head("/scheduler/filter", 1000) + b'{"Pod": ')
    wait_for(lambda: in_flight(live) == 1)
    sock.close()
    wait_for(lambda: in_flight(live) == 0)
    assert [r.getMessage() for r in live.watch.warnings()] == [
        "filter 400: bad filter request: connection closed before the body ended"]
    for i in range(50):
        sock = connect(live)
        sock.sendall(head("/scheduler/" + ("filter", "bind", "prioritize")[i % 3], 1000) + b'{"Pod": ')
        sock.close()
    chunked = connect(live)
    chunked.sendall(head("/scheduler/filter", extra="Transfer-Encoding: chunked\r\n") + b"40\r\n{\"Pod\"")
    chunked.close()
    wait_for(lambda: in_flight(live) == 0 and live.http._counters.held_binds == 0)
    assert live.healthz_seconds() < 5
    assert live.watch.problems() == []
    lines = [r.getMessage() for r in live.watch.warnings()]
    # At most one line per verb and status within 10 s (past the caps some were 503s).
    kinds = [line.split(":")[0] for line in lines]
    assert len(kinds) == len(set(kinds)) and set(kinds) <= {f"{v} {s}" for v in ("filter", "bind", "prioritize")
                                                             for s in (400, 503)}, lines


@pytest.mark.parametrize("raw, said", [
    (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(32), "Received HTTPS traffic on an HTTP port"),
    (b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 100_000 + b"\r\n\r\n", "Got more than 8190 bytes"),
    (head("/scheduler/filter", extra="Transfer-Encoding: chunked\r\n") + b"zz\r\nabc\r\n0\r\n\r\n",
     "Invalid character in chunk size"),
    (b"POST /scheduler/filter HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n{}{}{}",
     "Duplicate Content-Length"),
    (b"POST /scheduler/filter HTTP/9.9\r\nHost: x\r\n\r\n", "Invalid HTTP version"),
])
def test_malformed_http_is_a_400_from_aiohttp_with_one_line_in_the_log(live, raw, said):
    for _ in range(20):
        sock = connect(live)
        sock.sendall(raw)
        status, body = answer(sock)
        sock.close()
        assert status == 400 and said.encode() in body, body[:200]
    assert live.watch.problems() == []
    assert len(live.watch.warnings()) <= 1  # at most once per 10 s (a TLS hello is logged at debug)


def test_slow_bodies_past_the_cap_are_503_at_once_and_healthz_still_answers(live):
    slow = []
    for _ in range(16):  # the cap: 16 calls in flight
        sock = connect(live)
        sock.sendall(head("/scheduler/filter", len(FILTER)) + FILTER[:10])
        slow.append(sock)
    wait_for(lambda: in_flight(live) == 16)
    started = time.monotonic()
    status, body = live.request("POST", "/scheduler/filter", FILTER, timeout=5)
    assert status == 503 and time.monotonic() - started < 2
    assert json.loads(body)["Error"] == ("railyard busy: 16 filter/prioritize/preempt calls in flight, the cap is 16")
    assert live.healthz_seconds() < 2
    for sock in slow:  # each is answered when its time is up, and its slot is free again
        assert answer(sock)[0] == 400
        sock.close()
    assert in_flight(live) == 0
    assert live.post("filter", FILTER)[0] == 200


def test_headers_that_never_end_take_no_slot(live):
    idle = [connect(live) for _ in range(50)]
    for sock in idle:
        sock.sendall(b"POST /scheduler/filter HTTP/1.1\r\nHost: x\r\nContent-Le")
    assert live.healthz_seconds() < 2
    assert in_flight(live) == 0
    assert live.post("filter", FILTER)[0] == 200
    for sock in idle:
        sock.close()


def test_binds_past_the_held_cap_are_503_and_the_held_gang_binds_whole_after(live):
    members = gang("big", 6, 1, ns="raw", annotations={"railyard.io/min-member": "6"})
    for p in members:
        live.binder.existing.add(f"raw/{p['metadata']['name']}")
        live.ext.pod_upserted(TRANSLATE.pod(p))
    plan = {}
    for p in members:
        status, reply = live.post("filter", {"Pod": p, "NodeNames": live.node_names})
        plan[p["metadata"]["name"]] = reply["NodeNames"][0]
    results: dict[str, tuple[int, dict]] = {}

    def bind(name: str) -> None:
        results[name] = live.post("bind", {"PodName": name, "PodNamespace": "raw", "PodUID": f"uid-raw-{name}",
                                           "Node": plan[name]})

    threads = [threading.Thread(target=bind, args=(f"big-{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    wait_for(lambda: live.http._counters.held_binds == 4)
    status, reply = live.post("bind", {"PodName": "big-4", "PodNamespace": "raw", "PodUID": "uid-raw-big-4",
                                       "Node": plan["big-4"]}, timeout=5)
    assert (status, reply) == (503, {"Error": "railyard busy: 4 bind calls held, the cap is 4; "
                                              "the scheduler will retry the pod"})
    assert live.healthz_seconds() < 2
    assert live.binder.bound == []  # nobody bound while the gang is incomplete
    # The gang is 6 and only 4 can be held: it times out whole and binds nothing.
    live.clock.now += 61
    for t in threads:
        t.join(10)
    assert {r[1]["Error"].split(":")[0] for r in results.values()} == {"gang raw/big timed out at bind"}
    assert live.binder.bound == []
    live.forget_the_fuzz()
    live.assert_a_real_gang_binds_whole()
    assert live.watch.problems() == []
