"""``python -m bench run --scenario NAME --out DIR [--quick] [--arms A,A100,B,C,D] [--runs N] [--duration 1h]`` (issue 5).

Runs the scenario's arms one after another, each on a fresh local kwok cluster of the same
shape, N times interleaved (issue 21), and writes DIR/results.json, DIR/report.md and PNG plots;
per arm DIR/arm-X/ (DIR/run-K/arm-X/ with several runs) keeps the observed pods (pods.json),
the scraped metrics and the cluster logs. See bench/README.md.
"""

from __future__ import annotations

import argparse
import sys

from bench.harness import run as run_mod


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run one scenario's arms and write the results")
    run.add_argument("--scenario", required=True, help="a name in bench/scenarios/ or a path to a YAML file")
    run.add_argument("--out", required=True, help="output directory (created)")
    run.add_argument("--quick", action="store_true", help="the scenario's small 'quick' section (minutes)")
    run.add_argument("--arms", help="comma-separated arms to run instead of the scenario's, e.g. A,A100,B")
    run.add_argument("--runs", type=int, help="runs of every arm, interleaved (A, B, A, B, ...), each on a fresh "
                                              "cluster; results per run and their median (default 3, 1 with --quick)")
    run.add_argument("--kubernetes-version", help="a pinned Kubernetes version for every arm's cluster, e.g. "
                     "1.38.0-beta.0 (default: tools/kube's; docs/local-cluster.md, \"Kubernetes versions\")")
    run.add_argument("--duration", help="soak scenarios: how long the load runs, e.g. 300, 60m, 1h "
                                         "(default: the scenario's duration_s)")
    again = sub.add_parser("report", help="analyse a finished run's directory again (after a harness change)")
    again.add_argument("--out", required=True, help="the directory a run wrote")
    gangs = sub.add_parser("gangs", help="each gang's timeline in a finished run (the evidence behind deadlocked_gangs)")
    gangs.add_argument("--out", required=True, help="the directory a run wrote")
    gangs.add_argument("--arm", default="B", help="which arm (default B)")
    gangs.add_argument("--run", type=int, help="which run of a --runs N directory (default: a single run's)")
    args = parser.parse_args(argv)
    if args.command == "gangs":
        from pathlib import Path

        from bench.harness import timeline

        print(timeline.render(Path(args.out), args.arm, args.run), end="")
        return 0
    if args.command == "report":
        from pathlib import Path

        from bench import soak

        if (Path(args.out) / "samples.jsonl.gz").exists():
            return soak.rereport(Path(args.out))
        return run_mod.rereport(Path(args.out))
    command = ["python", "-m", "bench", *(sys.argv[1:] if argv is None else argv)]
    from bench import soak

    if soak.is_soak(args.scenario):
        return soak.main(args, command)
    if args.duration:
        parser.error(f"--duration is for soak scenarios; {args.scenario} is not one")
    return run_mod.main(args, command)


if __name__ == "__main__":
    sys.exit(main())
