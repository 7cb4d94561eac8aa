"""What a lone pod costs railyard's own process: filter then bind, as kube-scheduler sends them
(issue 21 item 5).

The real server and service with 1,000 nodes cached (the ``throughput`` scenario's shape), the
real Binding client (``KubeBinder`` over ``AsyncApi``) posting to a stub API server in another
process that answers 201 at once, and a client in a third process that sends, for each of N
distinct single pods, a filter call (a 3 KB pod and 420 node names, ``nodeCacheCapable``) then a
bind call, one at a time over keep-alive connections, as kube-scheduler's scheduling loop does.
It reports the server process's CPU per pod (``/proc/<pid>/stat``, all threads), its context
switches per pod and the filter and bind latencies the client saw.

    python -m bench.lonepath                      # 3,000 pods
    python -m bench.lonepath --pods 5000 --profile out.txt   # py-spy record --native (collapsed stacks) on the server

No timing is asserted anywhere: the machine is shared, compare runs side by side.
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing as mp
import os
import signal
import subprocess
import time

from bench.http_stack import pct

NODES, NAMES = 1000, 420


def lone_pod(i: int, gpus: int) -> dict:
    """A pod as kube-scheduler sends it: metadata, a container with its resources, defaults."""
    name = f"lone-{i:06d}"
    return {"metadata": {"name": name, "namespace": "bench", "uid": f"uid-{i:06d}", "resourceVersion": str(1000 + i),
                         "labels": {"app": "lone", "bench": "throughput"},
                         "annotations": {"bench/created": "2026-12-05T13:00:00Z"},
                         "creationTimestamp": "2026-12-05T13:00:00Z"},
            "spec": {"schedulerName": "railyard-sampled", "restartPolicy": "Never", "terminationGracePeriodSeconds": 30,
                     "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10", "imagePullPolicy": "IfNotPresent",
                                     "command": ["/pause"], "env": [{"name": "RANK", "value": "0"}],
                                     "resources": {"limits": {"nvidia.com/gpu": str(gpus), "cpu": "1", "memory": "1Gi"},
                                                   "requests": {"nvidia.com/gpu": str(gpus), "cpu": "1", "memory": "1Gi"}},
                                     "terminationMessagePath": "/dev/termination-log"}],
                     "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
                                      "tolerationSeconds": 300},
                                     {"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}],
                     "priority": 0, "enableServiceLinks": True, "preemptionPolicy": "PreemptLowerPriority"},
            "status": {"phase": "Pending", "qosClass": "Guaranteed"}}


def stub_api(port_out, ready) -> None:
    """An API server that answers every POST with 201 and the Binding's Status."""
    import asyncio

    from aiohttp import web

    async def created(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(status=201, body=b'{"kind":"Status","apiVersion":"v1","status":"Success","code":201}',
                            content_type="application/json")

    async def main() -> None:
        app = web.Application()
        app.router.add_post("/{tail:.*}", created)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port_out.value = runner.addresses[0][1]
        ready.set()
        await asyncio.Event().wait()

    asyncio.run(main())


def serve(api_port: int, port_out, ready, stop) -> None:
    import sys

    from kubernetes.client import ApiClient, Configuration
    from prometheus_client import CollectorRegistry

    from bench.verbs import cluster
    from extender.adapters.http.server import ExtenderServer
    from extender.adapters.k8s.api import Api
    from extender.adapters.k8s.binder import KubeBinder
    from extender.adapters.kubeobjects import SCHEME, Translator
    from extender.adapters.metrics import Metrics
    from extender.app import GIL_SWITCH_INTERVAL
    from extender.core.ports import Ports
    from extender.service import TopologyExtender
    from extender.service.sink import DRA_KINDS
    from extender.settings import DEFAULT_GPU_RESOURCE, ServerSettings, Settings

    sys.setswitchinterval(GIL_SWITCH_INTERVAL)
    translate = Translator(DEFAULT_GPU_RESOURCE)
    metrics = Metrics(CollectorRegistry())
    config = Configuration(host=f"http://127.0.0.1:{api_port}")
    binder = KubeBinder(Api(ApiClient(config)), metrics)
    service = TopologyExtender(Settings(), Ports(binder, binder, binder, binder, SCHEME, metrics))
    service.relisted("nodes", [translate.node(n) for n in cluster(NODES)])
    for kind in ("pods", "podgroups", *DRA_KINDS):
        service.relisted(kind, [])
    server = ExtenderServer(service, metrics, translate, settings=ServerSettings(listen="127.0.0.1:0"),
                            loop=binder.writes.loop)  # as app.py builds it
    port_out.value = server.start()[1]
    ready.set()
    stop.wait()
    server.stop()
    binder.close()


def process_cpu(pid: int) -> tuple[float, int, int]:
    """(CPU seconds, voluntary, involuntary context switches) of every thread of ``pid``."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    vol = invol = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                for line in f:
                    if line.startswith("voluntary_ctxt_switches"):
                        vol += int(line.split()[1])
                    elif line.startswith("nonvoluntary_ctxt_switches"):
                        invol += int(line.split()[1])
        except FileNotFoundError:
            pass
    return cpu, vol, invol


def client(port: int, first: int, pods: int) -> tuple[list[float], list[float]]:
    """kube-scheduler's loop: each pod's filter, then its bind (the Binding cycle runs beside
    the next pod's filter in kube-scheduler; one at a time here, the harder case for hops)."""
    from bench.verbs import cluster

    names = [node["metadata"]["name"] for node in cluster(NODES)][:NAMES]
    filters, binds = [], []
    conn = http.client.HTTPConnection("127.0.0.1", port)
    for i in range(first, first + pods):
        pod = lone_pod(i, (1, 1, 1, 1, 1, 1, 1, 2, 4, 8)[i % 10])
        body = json.dumps({"Pod": pod, "Nodes": None, "NodeNames": names}).encode()
        t = time.perf_counter()
        conn.request("POST", "/scheduler/filter", body, {"Content-Type": "application/json"})
        reply = json.loads(conn.getresponse().read())
        filters.append(time.perf_counter() - t)
        node = reply["NodeNames"][i % len(reply["NodeNames"])]
        bind = json.dumps({"PodName": pod["metadata"]["name"], "PodNamespace": "bench",
                           "PodUID": pod["metadata"]["uid"], "Node": node}).encode()
        t = time.perf_counter()
        conn.request("POST", "/scheduler/bind", bind, {"Content-Type": "application/json"})
        answer = json.loads(conn.getresponse().read())
        binds.append(time.perf_counter() - t)
        if answer.get("Error"):
            raise SystemExit(f"bind failed: {answer['Error']}")
    return filters, binds


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pods", type=int, default=3000)
    p.add_argument("--warmup", type=int, default=300)
    p.add_argument("--profile", metavar="FILE", help="py-spy record --native on the server while the pods run (collapsed stacks)")
    args = p.parse_args()
    ctx = mp.get_context("spawn")
    api_port, api_ready = ctx.Value("i", 0), ctx.Event()
    api = ctx.Process(target=stub_api, args=(api_port, api_ready), daemon=True)
    api.start()
    api_ready.wait(60)
    port, ready, stop = ctx.Value("i", 0), ctx.Event(), ctx.Event()
    server = ctx.Process(target=serve, args=(api_port.value, port, ready, stop), daemon=True)
    server.start()
    if not ready.wait(300):
        raise SystemExit("server did not start")
    if server.pid is None:  # set by start()
        raise SystemExit("server process has no pid")
    with ctx.Pool(1) as pool:
        pool.apply(client, (port.value, 0, args.warmup))
        spy = None
        if args.profile:
            spy = subprocess.Popen(["py-spy", "record", "--native", "-r", "200", "-p", str(server.pid),
                                    "-o", args.profile, "--format", "raw"], stdout=subprocess.DEVNULL)
            time.sleep(1)
        before, t0 = process_cpu(server.pid), time.monotonic()
        filters, binds = pool.apply(client, (port.value, args.warmup, args.pods))
        after, wall = process_cpu(server.pid), time.monotonic() - t0
        if spy is not None:
            spy.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
            spy.wait(30)
    stop.set()
    server.join(10)
    api.kill()
    n = args.pods
    print(json.dumps({
        "pods": n, "load_1min": os.getloadavg()[0], "wall_s": round(wall, 2),
        "server_cpu_ms_per_pod": round((after[0] - before[0]) * 1000 / n, 3),
        "server_switches_per_pod": {"voluntary": round((after[1] - before[1]) / n, 2),
                                    "involuntary": round((after[2] - before[2]) / n, 2)},
        "filter_ms": {"p50": round(pct(filters, 0.5), 3), "p99": round(pct(filters, 0.99), 3)},
        "bind_ms": {"p50": round(pct(binds, 0.5), 3), "p99": round(pct(binds, 0.99), 3)},
    }))


if __name__ == "__main__":
    main()
