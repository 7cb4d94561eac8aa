"""``railyard serve``: the kube-scheduler extender, until SIGTERM or SIGINT."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "serve",
        help="run the kube-scheduler extender (HTTP verbs, gRPC API, watch cache, metrics)",
        description="Serve kube-scheduler's extender verbs (filter, prioritize, bind, preempt) under "
        "PREFIX, with /healthz, /readyz, /metrics and /debug/gangs. Flags override the settings file.",
    )
    p.add_argument("--config", metavar="FILE", help="railyard settings (YAML, see extender/settings.py)")
    p.add_argument("--kubeconfig", metavar="FILE", help="kubeconfig; default: in-cluster service account")
    p.add_argument("--listen", metavar="HOST:PORT", help="address to serve on (default 127.0.0.1:8888)")
    p.add_argument("--prefix", help="urlPrefix path of the verbs (default /scheduler)")
    p.add_argument("--grpc-listen", metavar="HOST:PORT",
                   help="address of the gRPC API (default 127.0.0.1:8889; '' turns it off)")
    p.add_argument("--view-listen", metavar="HOST:PORT",
                   help="address of the live topology view, a read-only page (default: off; docs/view.md)")
    p.add_argument("--scheduler-config", metavar="FILE",
                   help="kube-scheduler's KubeSchedulerConfiguration: refuse to start if its httpTimeout "
                   "would cut gangs held at bind")
    p.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=args.log_level, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from extender import app  # the kubernetes client and aiohttp load only for this command

    overrides: dict = {}
    if args.kubeconfig:
        overrides["kubeconfig"] = args.kubeconfig
    if args.scheduler_config:
        overrides["scheduler_config"] = args.scheduler_config
    server = {k: v for k, v in (("listen", args.listen), ("prefix", args.prefix)) if v}
    if server:
        overrides["server"] = server
    if args.grpc_listen is not None:
        overrides["grpc"] = {"listen": args.grpc_listen}
    if args.view_listen is not None:
        overrides["view"] = {"listen": args.view_listen}
    try:
        settings = app.load_settings(args.config, overrides)
        application = app.build(settings)
        host, port = application.start()
    except (app.ConfigError, OSError) as exc:
        print(f"railyard serve: {exc}", file=sys.stderr)
        return 2
    app.log.info("serving %s/{filter,prioritize,bind,preempt} on %s:%d", settings.server.prefix, host, port)
    if application.grpc is not None:
        app.log.info("serving gRPC extender.api.v1.Extender, health and reflection on %s", settings.grpc.listen)
    if application.view is not None and application.view.address is not None:
        app.log.info("serving the topology view on http://%s:%d/", *application.view.address)

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    app.log.info("stopping")
    application.stop()
    return 0
