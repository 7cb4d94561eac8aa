"""``railyard explain <ns>/<pod>``: why a pod and its gang wait, asked of a running extender over gRPC.

Prints the gang's phase and reason (the sentence kube-scheduler shows in FailedNodes), the plan
while the gang holds one with each member's rank, slice and domains (what railyard writes on the
pod as it binds it), and the fit table: for every domain at the level the gang must fit within,
how many of its pods (and whole slices) that domain holds right now.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from extender.commands import output

DEFAULT_TARGET = "127.0.0.1:8889"


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "explain",
        help="why a pod and its gang wait (asks a running extender over gRPC)",
        description="Ask a running railyard (gRPC ExplainPod) why a pod waits: its gang's phase, "
        "reason, plan and per-domain fit table.",
    )
    p.add_argument("pod", metavar="NAMESPACE/POD")
    p.add_argument("--grpc", default=DEFAULT_TARGET, metavar="HOST:PORT",
                   help=f"the extender's gRPC address (default {DEFAULT_TARGET})")
    output.add_flag(p, "table")
    p.add_argument("--json", dest="output", action="store_const", const="json", help="the same as -o json")
    p.add_argument("--tls-ca", metavar="FILE", help="CA to verify the server with (turns TLS on)")
    p.add_argument("--tls-cert", metavar="FILE", help="client certificate for mTLS")
    p.add_argument("--tls-key", metavar="FILE", help="client key for mTLS")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for the answer (default 10)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import grpc  # loaded only for this command
    from google.protobuf.json_format import MessageToDict

    from extender.api.v1 import extender_pb2 as pb
    from extender.api.v1 import extender_pb2_grpc as pb_grpc

    namespace, sep, name = args.pod.partition("/")
    if not sep or not namespace or not name:
        print(f"railyard explain: give the pod as NAMESPACE/NAME, got {args.pod!r}", file=sys.stderr)
        return 2
    if bool(args.tls_cert) != bool(args.tls_key):
        print("railyard explain: --tls-cert and --tls-key go together", file=sys.stderr)
        return 2
    try:
        if args.tls_ca:
            creds = grpc.ssl_channel_credentials(
                Path(args.tls_ca).read_bytes(),
                Path(args.tls_key).read_bytes() if args.tls_key else None,
                Path(args.tls_cert).read_bytes() if args.tls_cert else None)
            channel = grpc.secure_channel(args.grpc, creds)
        else:
            channel = grpc.insecure_channel(args.grpc)
    except OSError as exc:
        print(f"railyard explain: {exc}", file=sys.stderr)
        return 2
    with channel:
        try:
            reply = pb_grpc.ExtenderStub(channel).ExplainPod(
                pb.ExplainPodRequest(namespace=namespace, name=name), timeout=args.timeout)
        except grpc.RpcError as exc:
            print(f"railyard explain: {exc.code().name}: {exc.details()}", file=sys.stderr)
            return 1 if exc.code() == grpc.StatusCode.NOT_FOUND else 2
    answer = MessageToDict(reply, preserving_proto_field_name=True, always_print_fields_with_no_presence=True)
    if output.wants_json(args, sys.stdout):
        print(json.dumps(answer, indent=2))
    else:
        print(render(answer))
    return 0


def render(a: dict[str, Any]) -> str:
    """The answer as an operator reads it."""
    phase = a["phase"]
    if phase == "waiting":
        phase += f" ({a['at_bind']}/{a['min_member']} GPU members at bind)"
    if float(a.get("deadline_in_seconds") or 0) > 0:
        phase += f", {float(a['deadline_in_seconds']):.0f}s before it times out"
    lines = [f"pod {a['pod']}: gang {a['gang']} is {phase}"]
    if a["reason"]:
        lines.append(f"reason: {a['reason']}")
    if a.get("origin"):
        lines.append(f"from: {a['origin']}")
    if a["plan"]:
        lines.append("plan:")
        width = max(len(m) for m in a["plan"])
        lines += [f"  {m:<{width}}  {n}" for m, n in sorted(a["plan"].items())]
    if a.get("ranks"):
        lines += _ranks(a)
    if a["fit"]:
        where = f"within one {a['level']}" if a["level"] else "across the cluster"
        lines.append(f"fit of {a['pods']} pods {where} (its own reservation counted as free):")
        slices = a.get("slices") or {}
        rows = [("DOMAIN", "NODES", "GPUS", "AVAILABLE", "FITS", "BLOCKED", *(("SLICES",) if slices else ()))]
        rows += [("/".join(d or "-" for d in f["domain"]) or "(cluster)", str(f["nodes"]), str(f["gpus"]),
                  str(f["available_gpus"]), f"{f['fits']}/{a['pods']}", str(f["blocked_nodes"]),
                  *((f"{f.get('slices', 0)}/{slices.get('count', 0)}",) if slices else ()))
                 for f in a["fit"]]
        lines += output.table(rows)
    return "\n".join(lines)


def _ranks(a: dict[str, Any]) -> list[str]:
    """rank -> pod -> node -> domains, one column per level (short names), and rails if any."""
    slices = a.get("slices") or {}
    head = f"ranks (slices of {slices['size']} within one {slices['level']}):" if slices else "ranks:"
    names = [d["name"] or d["level"] for d in a["ranks"][0].get("domains", [])]
    rails = any(r.get("rails") for r in a["ranks"])  # a rail-aligned gang: one more column
    rows = [("RANK", "SLICE", "POD", "NODE", *(n.upper() for n in names), *(("RAILS",) if rails else ()))]
    for r in a["ranks"]:
        where = {d["name"] or d["level"]: d["domain"] for d in r.get("domains", [])}
        rows.append((str(r.get("rank", "-")), str(r.get("slice", "-")), r["pod"], r["node"],
                     *(where.get(n, "-") for n in names), *((",".join(r.get("rails") or []) or "-",) if rails else ())))
    return [head, *output.table(rows)]
