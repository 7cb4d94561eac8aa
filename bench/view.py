"""The live topology view at scale (issue 24 item 2): how long the service lock is held for a
snapshot, how long the JSON and its gzip take outside it, how large the document is, and (``--browser``)
how long the page takes to draw it in headless chromium.

    python -m bench.view                          # 1,000 and 5,000 nodes
    python -m bench.view --nodes 5000 10000 --browser

The cluster: blocks of 5 leaves x 5 NVLink domains x 8 nodes x 8 GPUs (``bench.verbs.cluster``),
one running pod per node holding 0-8 GPUs (seeded), and a reservation for one gang of 8 x 8
GPUs per 100 nodes, each planned through the real filter verb. No timing is asserted anywhere.
"""

from __future__ import annotations

import argparse
import gzip
import os
import random
import statistics
import time

import orjson

from bench.verbs import NoBinder, TRANSLATE, cluster, pod
from extender.adapters.http.view import GZIP_LEVEL
from extender.adapters.kubeobjects import SCHEME
from extender.adapters.topoview import topology_json
from extender.core.ports import Ports
from extender.service import TopologyExtender
from extender.service.sink import DRA_KINDS
from extender.settings import Settings


def loaded(nodes: int, seed: int = 1) -> TopologyExtender:
    none = NoBinder()
    service = TopologyExtender(Settings(), Ports(none, none, none, none, SCHEME))
    objects = cluster(nodes)
    service.relisted("nodes", [TRANSLATE.node(n) for n in objects])
    rng = random.Random(seed)
    running = []
    for node in objects:
        body = pod(f"run-{node['metadata']['name']}", rng.randint(0, 8))
        body["spec"]["nodeName"] = node["metadata"]["name"]
        body["status"]["phase"] = "Running"
        running.append(TRANSLATE.pod(body))
    service.relisted("pods", running)
    service.relisted("podgroups", [])
    for kind in DRA_KINDS:
        service.relisted(kind, [])
    names = [n["metadata"]["name"] for n in objects]
    for g in range(nodes // 100):
        members = [pod(f"g{g}-{i}", 8, gang=f"g{g}", size=8) for i in range(8)]
        for m in members:
            service.pod_upserted(TRANSLATE.pod(m))
        service.filter(TRANSLATE.pod(members[0]), names)
    return service


def median_ms(call, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        call()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3


def browser_draw_ms(service: TopologyExtender) -> tuple[float, float]:
    """(first draw, a redraw) in ms as the page measures them (``document.body.dataset.drawMs``)."""
    from extender.adapters.http.view import ViewServer
    from extender.settings import ViewSettings
    from tests.e2e.browser import Chromium

    server = ViewServer(service.topology_view, ViewSettings(listen="127.0.0.1:0", refresh_seconds=0.1))
    _, port = server.start()
    try:
        with Chromium() as browser:
            browser.open(f"http://127.0.0.1:{port}/")
            first = float(browser.wait_for("document.body.dataset.drawMs", 120))
            again = browser.evaluate(
                "(() => { drawnTree = ''; const t = performance.now(); draw(); return performance.now() - t; })()")
            return first, float(again)
    finally:
        server.stop()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, nargs="+", default=[1000, 5000])
    p.add_argument("--repeat", type=int, default=30)
    p.add_argument("--browser", action="store_true", help="also draw it in headless chromium")
    args = p.parse_args()
    print(f"{'nodes':>6} {'gangs':>5} {'lock ms':>8} {'json ms':>8} {'gzip ms':>8} {'bytes':>9} {'gzipped':>8} "
          f"{'draw ms':>8} {'redraw':>7}  load")
    for nodes in args.nodes:
        service = loaded(nodes)
        snap = service.topology_view()
        lock = median_ms(service.topology_view, args.repeat)
        encode = median_ms(lambda: orjson.dumps(topology_json(snap)), args.repeat)
        body = orjson.dumps(topology_json(snap))
        compress = median_ms(lambda: gzip.compress(body, GZIP_LEVEL), args.repeat)
        draw = browser_draw_ms(service) if args.browser else (float("nan"), float("nan"))
        print(f"{nodes:6d} {len(snap.gangs):5d} {lock:8.2f} {encode:8.2f} {compress:8.2f} {len(body):9d} "
              f"{len(gzip.compress(body, GZIP_LEVEL)):8d} {draw[0]:8.0f} {draw[1]:7.0f}  {os.getloadavg()[0]:.1f}",
              flush=True)


if __name__ == "__main__":
    main()
