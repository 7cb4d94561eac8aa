"""Extender verbs over loopback HTTP, the way kube-scheduler calls them (issue 4, item 11).

The real server (aiohttp + orjson) in front of the real service with N nodes cached; a client in
another process (keep-alive, one call at a time, like the scheduler's single scheduling loop)
sends filter then prioritize with a candidate list of names and reports p50/p99 per verb.

    python -m bench.verbs                         # 1,000 nodes x 500 names, 5,000 x 5,000
    python -m bench.verbs --case 10000:5000 --requests 3000
    python -m bench.verbs --case 5000:5000 --view    # each case again with a browser's poll of the view

``--view``: the server also serves the live topology view (``view.refresh_seconds`` 1) and, in
the second run of each case, a client in a third process polls its /topology.json every 0.5 s
(twice the refresh rate: a new snapshot of the cache every second, the worst a browser can make).

Two pod kinds: a single 8-GPU pod (best-fit packing over every candidate) and a member of a
planned gang (steered to its slot, every other node gets a FailedNodes reason). No timing is
asserted anywhere: these machines are shared and noisy, compare runs side by side.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import time
import urllib.request

from prometheus_client import CollectorRegistry

from bench.http_stack import client, pct
from extender import topotext
from extender.adapters.http.server import ExtenderServer
from extender.adapters.http.view import ViewServer
from extender.adapters.kubeobjects import SCHEME, Translator
from extender.adapters.metrics import Metrics
from extender.core.ports import Ports
from extender.service import TopologyExtender
from extender.service.sink import DRA_KINDS
from extender.settings import DEFAULT_GPU_RESOURCE, ServerSettings, Settings, ViewSettings

TRANSLATE = Translator(DEFAULT_GPU_RESOURCE)


class NoBinder:
    """Every port the service writes through, doing nothing: the benchmarks call filter and
    prioritize only."""

    def bind_all(self, bindings):
        return [None] * len(bindings)

    async def bind_async(self, pod, node):
        return None

    def evict(self, pod, dry_run=False):
        return None

    def delete_pod(self, pod):
        pass

    def mark_all(self, marks):
        return [None] * len(marks)

    def event(self, pod, reason, message, type_="Warning"):
        pass

    def deallocate_claim(self, namespace, name, uid, resource_version):
        pass


def pod(name: str, gpus: int, gang: str | None = None, size: int = 0) -> dict:
    labels = {"scheduling.x-k8s.io/pod-group": gang} if gang else {}
    annotations = {"railyard.io/min-member": str(size)} if gang else {}
    return {"metadata": {"name": name, "namespace": "bench", "uid": f"uid-{name}", "labels": labels,
                         "annotations": annotations},
            "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": str(gpus)},
                                                                  "requests": {"nvidia.com/gpu": str(gpus)}}}]},
            "status": {"phase": "Pending"}}


def cluster(nodes: int) -> list[dict]:
    """Blocks of 5 racks x 5 NVLink domains x 8 nodes (200 nodes a block), 8 GPUs each."""
    return topotext.parse(topotext.generate(blocks=max(1, nodes // 200), racks=5, nvl=5, nodes=8)).nodes


def service_times(service: TopologyExtender, names: list[str], requests: int = 300) -> dict:
    """The same calls made in-process, without HTTP (the pod's translation included): what the
    service alone costs."""
    out = {}
    for kind, p in (("single", pod("solo", 8)), ("gang member", pod("g-3", 8, gang="g", size=16))):
        for verb in ("filter", "prioritize"):
            call = getattr(service, verb)
            times = []
            for _ in range(requests):
                t = time.perf_counter()
                call(TRANSLATE.pod(p), names)
                times.append(time.perf_counter() - t)
            out[(kind, verb)] = (pct(times, 0.5), pct(times, 0.99))
    return out


def serve(nodes: int, n: int, ready, port_out, stop, direct, view_port=None) -> None:
    none = NoBinder()
    service = TopologyExtender(Settings(), Ports(none, none, none, none, SCHEME, Metrics(CollectorRegistry())))
    service.relisted("nodes", [TRANSLATE.node(n) for n in cluster(nodes)])
    members = [TRANSLATE.pod(pod(f"g-{i}", 8, gang="g", size=16)) for i in range(16)]
    service.relisted("pods", members)
    service.relisted("podgroups", [])
    for kind in DRA_KINDS:  # not served on the benchmark's cluster: listed empty
        service.relisted(kind, [])
    direct.update(service_times(service, [node["metadata"]["name"] for node in cluster(nodes)][:n]))
    server = ExtenderServer(service, Metrics(CollectorRegistry()), TRANSLATE,
                            settings=ServerSettings(listen="127.0.0.1:0"))
    _, port = server.start()
    view = ViewServer(service.topology_view, ViewSettings(listen="127.0.0.1:0")) if view_port is not None else None
    if view is not None:
        view_port.value = view.start()[1]
    port_out.value = port
    ready.set()
    stop.wait()
    server.stop()
    if view is not None:
        view.stop()


def poll_view(port: int, stop, polls, timings) -> None:
    """A browser's view of the cluster: GET /topology.json every 0.5 s until told to stop;
    ``timings`` gets each renewal's ``Server-Timing`` (lock, json and gzip milliseconds)."""
    last = ""
    while not stop.is_set():
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/topology.json", timeout=30) as r:
            r.read()
            timing = r.headers.get("Server-Timing", "")
        if timing != last:
            timings.append(timing)
            last = timing
        polls.value += 1
        stop.wait(0.5)


def renewals(timings: list[str]) -> dict[str, float]:
    """Milliseconds per part (lock, json, gzip) summed over the renewals."""
    out: dict[str, float] = {}
    for timing in timings:
        for part in timing.split(","):
            name, _, dur = part.strip().partition(";dur=")
            out[name] = out.get(name, 0.0) + float(dur)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--case", nargs="+", default=["1000:500", "5000:5000"], metavar="NODES:NAMES")
    p.add_argument("--requests", type=int, default=2000)
    p.add_argument("--view", action="store_true", help="each case twice: without and with a client polling the view")
    args = p.parse_args()
    ctx = mp.get_context("spawn")
    print(f"{'':40} {'over HTTP':>15}  {'service alone':>15}")
    print(f"{'nodes':>5} {'names':>5} {'pod':12} {'verb':10} {'p50 ms':>7} {'p99 ms':>7}  "
          f"{'p50 ms':>7} {'p99 ms':>7}  load")
    for case in args.case:
        for polled in (False, True) if args.view else (False,):
            run_case(ctx, case, args.requests, args.view, polled)


def run_case(ctx, case: str, requests: int, view: bool, polled: bool) -> None:
    nodes, n = map(int, case.split(":"))
    ready, stop, port, view_port = ctx.Event(), ctx.Event(), ctx.Value("i", 0), ctx.Value("i", 0)
    direct = ctx.Manager().dict()
    proc = ctx.Process(target=serve, args=(nodes, n, ready, port, stop, direct, view_port if view else None),
                       daemon=True)
    proc.start()
    if not ready.wait(300):
        raise SystemExit("server did not start")
    polls, poller, timings = ctx.Value("i", 0), None, ctx.Manager().list()
    started = time.monotonic()
    if polled:
        poller = ctx.Process(target=poll_view, args=(view_port.value, stop, polls, timings), daemon=True)
        poller.start()
    names = [node["metadata"]["name"] for node in cluster(nodes)][:n]
    label = ("view polled" if polled else "view idle") if view else ""
    with ctx.Pool(1) as pool:
        for kind, body_pod in (("single", pod("solo", 8)), ("gang member", pod("g-3", 8, gang="g", size=16))):
            body = json.dumps({"Pod": body_pod, "Nodes": None, "NodeNames": names}).encode()
            for verb in ("filter", "prioritize"):
                times = pool.apply(client, (port.value, body, requests, f"/scheduler/{verb}"))
                d50, d99 = direct[(kind, verb)]
                print(f"{nodes:5d} {len(names):5d} {kind:12} {verb:10} {pct(times, 0.5):7.3f} "
                      f"{pct(times, 0.99):7.3f}  {d50:7.3f} {d99:7.3f}  {os.getloadavg()[0]:.1f} {label}", flush=True)
    stop.set()
    if poller is not None:
        poller.join(10)
        seconds = time.monotonic() - started
        spent = renewals(list(timings))
        print(f"      view: {polls.value} polls, {len(timings)} snapshots in {seconds:.0f}s; the service lock held "
              f"{spent.get('lock', 0):.1f} ms in all ({spent.get('lock', 0) / seconds / 10:.3f}% of the time), "
              f"JSON {spent.get('json', 0):.0f} ms and gzip {spent.get('gzip', 0):.0f} ms outside it", flush=True)
    proc.join(10)


if __name__ == "__main__":
    main()
