"""A loopback stand-in for kube-apiserver, for the k8s adapter's translation tests only.

It answers the few paths railyard uses the way the API server does (paged lists, chunked watch
streams of newline-delimited events, Status bodies on errors), so the tests run the real
kubernetes client and urllib3 underneath. Behaviour beyond translation is tested on the real
control plane in tests/e2e.
"""

from __future__ import annotations

import json
import queue
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl, urlsplit

from kubernetes.client import ApiClient, Configuration

HANG = "hang"  # a watch script step: keep the stream open until the server stops


def status(code: int, message: str, reason: str = "") -> dict:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code}


class FakeApiServer:
    def __init__(self) -> None:
        self.pages: dict[str, list[dict]] = {}  # path -> list pages, served in order via continue
        self.watches: dict[str, queue.Queue] = {}  # path -> scripts, one per watch request
        self.replies: dict[tuple[str, str], queue.Queue] = {}  # (method, path) -> (status, body)
        self.requests: list[tuple[str, str, dict, object]] = []
        self.content_types: list[str] = []  # of each request, in order
        self.hold = threading.Event()  # while clear, POSTs to paths in `held` wait
        self.hold.set()
        self.held: set[str] = set()
        self._stopping = threading.Event()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def _answer(self, code: int, body: object) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _handle(self, method: str) -> None:
                url = urlsplit(self.path)
                query = dict(parse_qsl(url.query))
                n = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(n)) if n else None
                fake.requests.append((method, url.path, query, body))
                fake.content_types.append(self.headers.get("Content-Type", ""))
                if url.path in fake.held:
                    fake.hold.wait(10)
                if method == "GET" and query.get("watch") == "true":
                    return self._watch(url.path)
                if method == "GET" and url.path in fake.pages:
                    pages = fake.pages[url.path]
                    i = int(query.get("continue") or 0)
                    return self._answer(200, pages[i])
                replies = fake.replies.get((method, url.path))
                if replies is not None and not replies.empty():
                    code, reply = replies.get()
                    return self._answer(code, reply)
                self._answer(404, status(404, f'the server could not find the requested resource ({url.path})',
                                         "NotFound"))

            def _watch(self, path: str) -> None:
                try:
                    script = fake.watches[path].get(timeout=5)
                except (KeyError, queue.Empty):
                    script = [HANG]
                if isinstance(script, tuple):  # (status, body): refuse the watch
                    return self._answer(*script)
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for step in script:
                    if step == HANG:
                        fake._stopping.wait(30)
                        break
                    data = json.dumps(step).encode() + b"\n"
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")

            def do_GET(self):
                self._handle("GET")

            def do_POST(self):
                self._handle("POST")

            def do_DELETE(self):
                self._handle("DELETE")

            def do_PATCH(self):
                self._handle("PATCH")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> "FakeApiServer":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stopping.set()
        self.hold.set()
        self.server.shutdown()
        self.server.server_close()

    def client(self) -> ApiClient:
        config = Configuration(host=f"http://127.0.0.1:{self.server.server_address[1]}")
        return ApiClient(config)

    def list(self, path: str, *pages: tuple[list[dict], str]) -> None:
        """Serve ``pages`` of (items, resourceVersion) for GET path, linked by continue tokens."""
        out = []
        for i, (items, rv) in enumerate(pages):
            meta = {"resourceVersion": rv}
            if i + 1 < len(pages):
                meta["continue"] = str(i + 1)
            out.append({"kind": "List", "apiVersion": "v1", "metadata": meta, "items": items})
        self.pages[path] = out

    def watch(self, path: str, script) -> None:
        """Queue one watch response: a list of events (dicts or HANG), or (status, body)."""
        self.watches.setdefault(path, queue.Queue()).put(script)

    def reply(self, method: str, path: str, code: int, body: object) -> None:
        self.replies.setdefault((method, path), queue.Queue()).put((code, body))

    def seen(self, method: str, path: str) -> list[tuple[dict, object]]:
        return [(q, b) for m, p, q, b in self.requests if (m, p) == (method, path)]
