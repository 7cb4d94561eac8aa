"""The soak on one local cluster: up with railyard (arm B), the seeded stream submitted on
schedule, finished pods deleted, nodes cordoned and uncordoned, the extender restarted a few
times, the extender sampled every few seconds; then drain, the gang checks, down.

Times are seconds after the first submission, as in ``bench/harness/runner.py`` (whose watch,
pod records and submitter this reuses).
"""

from __future__ import annotations

import os
import random
import threading
import time
import urllib.error
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, TextIO

import orjson
import urllib3

from bench.harness import arms as arms_mod, kube as kube_mod, runner
from bench.harness.workload import Job
from bench.soak import sample as sample_mod
from extender import topotext
from extender.localcluster import cluster, pki as pki_mod, processes, replicas

ARM = arms_mod.ARMS["B"]


@dataclass
class Observed:
    """What one soak saw, for ``report``."""

    samples: list[dict[str, Any]] = field(default_factory=list)
    restarts: list[dict[str, Any]] = field(default_factory=list)
    """``{"t", "how": "SIGTERM"|"SIGKILL", "ready_s"}``: each restart and how long until /readyz."""
    cordons: int = 0
    deleted: int = 0
    delete_errors: int = 0
    missed_samples: int = 0
    """Ticks whose sample failed (the extender was restarting): left out."""
    result: runner.ArmResult | None = None
    cluster_up_s: float = 0.0


def scaled(workload: dict[str, Any], duration: float) -> dict[str, Any]:
    """``workload`` with its streams' counts and windows scaled from ``duration_s`` to
    ``duration``: the same arrival rates for a longer or shorter soak."""
    factor = duration / float(workload["duration_s"])

    def stream(s: dict[str, Any]) -> dict[str, Any]:
        return dict(s, count=max(1, round(int(s["count"]) * factor)),
                    window_s=float(s.get("window_s", workload["duration_s"])) * factor)

    out = dict(workload, duration_s=duration, gangs=[stream(g) for g in workload.get("gangs") or []])
    if workload.get("singles"):
        out["singles"] = stream(workload["singles"])
    return out


def run(jobs: list[Job], topology_text: str, workload: dict[str, Any], seed: int, workdir: Path,
        log: TextIO) -> Observed:
    """Up, soak, down (always)."""
    say: Callable[[str], None] = lambda m: print(f"soak: {m}", file=log, flush=True)  # noqa: E731
    started = time.monotonic()
    info = cluster.up(cluster.UpOptions(workdir=workdir, topology=topology_text, extender=True, timeout=600),
                      log=log)
    seen = Observed(cluster_up_s=time.monotonic() - started)
    say(f"cluster up in {seen.cluster_up_s:.0f}s ({info.nodes} nodes)")
    try:
        _soak(seen, jobs, topology_text, workload, seed, info, say)
    finally:
        cluster.down(info.workdir, log=log, quiet=True)
    return seen


def _extender(workdir: Path, name: str) -> int:
    return next(p.pid for p in processes.recorded(workdir) if p.name == name)


def _soak(seen: Observed, jobs: list[Job], topology_text: str, workload: dict[str, Any], seed: int,
          info: cluster.ClusterInfo, say: Callable[[str], None]) -> None:
    kube = kube_mod.Kube(info.api_url, pki_mod.Pki.at(info.workdir / "pki"))
    kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                       "metadata": {"name": arms_mod.NAMESPACE}})
    records: dict[str, runner.PodRecord] = {}
    bodies: dict[str, list[dict[str, Any]]] = {}
    for job in jobs:
        bodies[job.name] = [arms_mod.pod(job, i, ARM) for i in range(job.pods)]
        for body in bodies[job.name]:
            records[body["metadata"]["name"]] = runner.PodRecord(body["metadata"]["name"], job.name, job.gpus)
    pod_path = f"/api/v1/namespaces/{arms_mod.NAMESPACE}/pods"
    t0 = [time.monotonic()]
    watcher = runner.PodWatcher(kube, records, t0)
    watcher.start()
    time.sleep(0.5)  # the watch is open before the first pod exists
    t0[0] = time.monotonic()
    errors = [0]

    def now() -> float:
        return time.monotonic() - t0[0]

    def create_pod(body: dict[str, Any]) -> None:
        if kube.create(pod_path, body):
            records[body["metadata"]["name"]].created = now()
        else:
            errors[0] += 1

    submitter = threading.Thread(target=runner._submit, name="soak-submit", daemon=True,
                                 args=(ARM, jobs, bodies, kube, create_pod, t0, errors))
    submitter.start()

    duration = float(workload["duration_s"])
    sample_s, drain = float(workload.get("sample_s", 5)), float(workload.get("drain_timeout_s", 300))
    delete_after = float(workload.get("delete_finished_after_s", 5))
    cordon = workload.get("cordon") or {}
    restart_at = sorted(float(f) * duration for f in workload.get("restarts_at") or [])
    node_names = [n["metadata"]["name"] for n in topotext.load(topology_text).nodes]
    rng = random.Random(seed)
    index = replicas.replicas(info.workdir)[0]["index"]
    ext_name = replicas.replica(info.workdir, index)["extender"]
    pid = _extender(info.workdir, ext_name)
    deleted: set[str] = set()
    cordoned: list[tuple[float, str]] = []
    next_sample = next_cordon = 0.0
    if cordon:
        next_cordon = float(cordon["every_s"])
    last_report = 0.0
    reason = "every pod bound"
    while True:
        t = now()
        if restart_at and t >= restart_at[0]:
            restart_at.pop(0)
            how = "SIGKILL" if len(seen.restarts) % 2 else "SIGTERM"
            if how == "SIGKILL":
                replicas.kill(info.workdir, index, ("extender",))
            (pid,) = replicas.restart(info.workdir, index, ("extender",))
            seen.restarts.append({"t": round(t, 1), "how": how, "ready_s": round(now() - t, 2)})
            say(f"t={t:.0f}s extender restarted ({how}), ready after {now() - t:.1f}s")
        if cordon and t >= next_cordon and t <= duration:
            node = rng.choice(node_names)
            if _patch_node(kube, node, True):
                cordoned.append((t + float(cordon["for_s"]), node))
                seen.cordons += 1
            next_cordon += float(cordon["every_s"])
        while cordoned and (t >= cordoned[0][0]):
            _patch_node(kube, cordoned.pop(0)[1], False)
        with watcher.lock:
            done = [r.name for r in records.values()
                    if r.finished is not None and r.finished < t - delete_after and r.name not in deleted]
            bound, created = watcher.bound_count, sum(r.created is not None for r in records.values())
        for name in done:
            deleted.add(name)
            if _delete(kube, f"{pod_path}/{name}"):
                seen.deleted += 1
            else:
                seen.delete_errors += 1
        if t >= next_sample:
            next_sample = max(next_sample + sample_s, t)  # no burst of samples after a restart
            try:
                row: dict[str, Any] = {"t": round(t, 2), "segment": pid,
                                       "phase": "load" if t <= duration else "drain",
                                       **sample_mod.read_proc(pid),
                                       **sample_mod.parse_metrics(sample_mod.scrape(info.ports.extender)),
                                       "bound": bound, "load1": round(os.getloadavg()[0], 2)}
                seen.samples.append(row)
            except (OSError, ValueError, urllib.error.URLError):
                seen.missed_samples += 1
        if t - last_report > 60:
            last = seen.samples[-1] if seen.samples else {}
            say(f"t={t:.0f}s bound {bound}/{len(records)}, deleted {seen.deleted}; extender RSS "
                f"{last.get('rss_mb', 0):.0f} MB, {last.get('threads')} threads, {last.get('fds')} fds, "
                f"book {last.get('held')}")
            last_report = t
        if t > duration and not submitter.is_alive():
            if bound >= created:
                break
            if t > duration + drain:
                reason = f"drain timeout ({drain:.0f}s after the load ended): {created - bound} pods unbound"
                break
        time.sleep(max(0.0, min(1.0, next_sample - now())))
    for _, node in cordoned:
        _patch_node(kube, node, False)
    time.sleep(1.0)
    end = now()
    watcher.stop()
    say(f"stopped at t={end:.0f}s: {reason}")
    result = runner.ArmResult(ARM.name, records, end, seen.cluster_up_s, errors[0], stop_reason=reason)
    if watcher.error:
        result.notes.append(f"watch reconnected after: {watcher.error}")
    result.scheduler_metrics = runner._scrape(f"https://127.0.0.1:{info.ports.scheduler}/metrics")
    result.extender_metrics = runner._scrape(f"http://127.0.0.1:{info.ports.extender}/metrics")
    seen.result = result


def _patch_node(kube: kube_mod.Kube, node: str, unschedulable: bool) -> bool:
    """Cordon (``kubectl cordon``: ``spec.unschedulable``) or uncordon one node."""
    try:
        r = kube.pool.request("PATCH", f"{kube.url}/api/v1/nodes/{node}",
                              body=orjson.dumps({"spec": {"unschedulable": unschedulable}}),
                              headers={"Content-Type": "application/merge-patch+json"})
    except urllib3.exceptions.HTTPError:
        return False
    return r.status == 200


def _delete(kube: kube_mod.Kube, path: str) -> bool:
    """Delete a finished pod, as a Job's TTL controller would; gone already counts as deleted."""
    try:
        r = kube.pool.request("DELETE", kube.url + path)
    except urllib3.exceptions.HTTPError:
        return False
    return r.status in (200, 202, 404)
