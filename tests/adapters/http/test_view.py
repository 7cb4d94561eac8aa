"""The topology view's server over loopback: the page and its assets from the package, the
document renewed at most once per period however many ask, ETags, and 404 for the rest."""

from __future__ import annotations

import gzip
import http.client
import json
import threading
from pathlib import Path

import pytest
import yaml

from extender.adapters.http.view import ASSETS, Document, ViewServer, asset
from extender.settings import Settings, ViewSettings, from_mapping
from tests.service.test_live import extender


class Counting:
    def __init__(self):
        self.ext, _, _ = extender()
        self.calls = 0

    def __call__(self):
        self.calls += 1
        return self.ext.topology_view()


@pytest.fixture
def view():
    source = Counting()
    server = ViewServer(source, ViewSettings(listen="127.0.0.1:0", refresh_seconds=60))
    host, port = server.start()
    yield source, port
    server.stop()


def get(port, path, method="GET", headers=None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request(method, path, headers=headers or {})
    r = conn.getresponse()
    body = r.read()
    conn.close()
    return r.status, dict(r.getheaders()), body


def test_the_page_and_its_assets_come_from_the_package(view):
    _, port = view
    for path, (name, kind) in ASSETS.items():
        status, headers, body = get(port, path)
        assert (status, headers["Content-Type"].split(";")[0]) == (200, kind)
        assert body == asset(name) and body
        assert headers["Content-Security-Policy"] == "default-src 'self'; frame-ancestors 'none'"
    assert b'src="view.js"' in get(port, "/")[2] and b"http" not in get(port, "/")[2]  # nothing from elsewhere


def test_the_document_is_the_snapshot_as_json_with_an_etag(view):
    source, port = view
    status, headers, body = get(port, "/topology.json", headers={"Accept-Encoding": "gzip"})
    assert status == 200 and headers["Content-Encoding"] == "gzip"
    doc = json.loads(gzip.decompress(body))
    assert doc["totals"]["nodes"] == 6 and doc["levels"] == ["spine", "leaf", "nvlink"]
    assert headers["Server-Timing"].startswith("lock;dur=")
    status, plain, body = get(port, "/topology.json")
    assert status == 200 and "Content-Encoding" not in plain and json.loads(body) == doc
    status, again, body = get(port, "/topology.json", headers={"If-None-Match": headers["ETag"]})
    assert (status, body, again["ETag"]) == (304, b"", headers["ETag"])
    assert source.calls == 1  # one snapshot served both


def test_many_viewers_at_once_take_one_snapshot(view):
    source, port = view
    statuses = []
    threads = [threading.Thread(target=lambda: statuses.append(get(port, "/topology.json")[0])) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert statuses == [200] * 20 and source.calls == 1


@pytest.mark.parametrize("method,path", [("GET", "/debug/gangs"), ("GET", "/topology.json/x"), ("GET", "/../etc/passwd"),
                                         ("POST", "/"), ("PUT", "/topology.json"), ("DELETE", "/view.js"),
                                         ("GET", "/static/index.html")])
def test_anything_else_is_404(view, method, path):
    status, _, body = get(view[1], path, method=method)
    assert status == 404 and b"the view serves GET /, /view.js, /view.css, /topology.json" in body


def test_the_document_is_renewed_once_its_period_is_over():
    source = Counting()
    clock = [0.0]
    doc = Document(source, refresh_seconds=2.0, clock=lambda: clock[0])
    assert doc.stale()
    doc.renew()
    first = doc.current.etag
    clock[0] = 1.9
    assert not doc.stale()
    clock[0] = 2.0
    assert doc.stale()
    doc.renew()
    assert (doc.current.etag, source.calls) == (first, 2)  # nothing changed: the same ETag
    source.ext.relisted("pods", [])  # the drawing's pods that held h4's and h6's GPUs are gone
    doc.renew()
    assert doc.current.etag != first and json.loads(doc.current.body)["totals"]["used"] == 0


def test_the_view_is_off_unless_its_address_is_set_and_checked_when_it_is():
    assert Settings().view.listen == ""
    root = Path(__file__).resolve().parents[3]
    for shipped in (yaml.safe_load((root / "manifests/base/railyard.yaml").read_text()),
                    yaml.safe_load((root / "charts/railyard/values.yaml").read_text())["railyard"]["settings"]):
        settings, problems = from_mapping(shipped)
        assert problems == [] and settings.view.listen == ""  # off as installed
    assert Settings(view=ViewSettings(listen="127.0.0.1:8890")).validate() == []
    assert Settings(view=ViewSettings(listen="8890", refresh_seconds=0)).validate() == [
        "view.listen must be HOST:PORT or empty, got '8890'",
        "view.refresh_seconds must be between 0.1 and 60, got 0"]
