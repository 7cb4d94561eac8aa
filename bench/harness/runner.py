"""One arm of one scenario on a fresh local cluster: up, submit on schedule, watch, scrape, down.

Times are ``time.monotonic()`` seconds after the arm's start (``t0``, taken just before the first
submission). A pod is *created* when the API server answered its POST, *bound* when the watch
first shows ``spec.nodeName``, *finished* when it shows phase Succeeded or Failed. The watch runs
in this process, so the times include the watch's delivery delay (the same in every arm).
"""

from __future__ import annotations

import gzip
import json
import os
import signal
import ssl
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from itertools import groupby, zip_longest
from pathlib import Path
from typing import Any, Iterable, TextIO

import yaml

from bench.harness import arms as arms_mod, cpu as cpu_mod, holds as holds_mod, kube as kube_mod, kueue as kueue_mod
from bench.harness.workload import Job
from extender import topotext
from extender.localcluster import cluster, config as localconfig, pki as pki_mod

#: The API server's /metrics at the start and at the end of an arm (gzipped: 1-2 MB of text each).
APISERVER_METRICS = ("apiserver-metrics-start.prom.gz", "apiserver-metrics-end.prom.gz")


@dataclass
class PodRecord:
    name: str
    job: str
    gpus: int
    created: float | None = None
    bound: float | None = None
    node: str | None = None
    finished: float | None = None
    deleted: float | None = None
    """When the watch first saw the pod being deleted (``deletionTimestamp``) before it finished:
    a preemption victim (nothing else deletes pods during an arm)."""


def bound_pods(recs: Iterable[PodRecord]) -> list[tuple[PodRecord, float, str]]:
    """The pods of ``recs`` seen bound, each with when and on which node: the watch stamps both
    at once, so a pod bound on no node is a broken record."""
    out = []
    for r in recs:
        if r.bound is not None:
            if r.node is None:
                raise ValueError(f"bench: pod {r.name} bound at {r.bound:.3f} s on no node")
            out.append((r, r.bound, r.node))
    return out


@dataclass
class ArmResult:
    arm: str
    pods: dict[str, PodRecord]
    end: float
    """Seconds after t0 when observation stopped."""
    cluster_up_s: float
    create_errors: int = 0
    extender_metrics: str = ""
    scheduler_metrics: str = ""
    stop_reason: str = ""
    notes: list[str] = field(default_factory=list)
    cpu_samples: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Mark -> ``{"t": s after t0, "bound": pods bound so far, "cpu": {component: CPU s},
    "switches": {component: {tid: [voluntary, involuntary]}}}`` (``cpu.sample``,
    ``cpu.switches``), at ``start`` (t0), ``resume`` (kube-scheduler resumed after the pods
    were created; = start when it was not paused), ``last_bind`` (the first poll after the
    last binding seen; no ``switches``), ``switched`` (the last poll after a binding at which
    the threads' switches were read: at most once a second, and at the last pod's binding)
    and ``end``."""
    percentage_of_nodes_to_score: int | None | str = None
    """As the scheduler configuration the arm ran had it (None: the key was absent, so
    kube-scheduler's adaptive default; ``"unknown"``: a directory from before issue 13 without
    its cluster's scheduler-config.yaml)."""
    load_average_1m: list[float] = field(default_factory=list)
    """The 1-minute load average sampled every 15 s of the arm."""
    workloads: dict[str, kueue_mod.WorkloadRecord] = field(default_factory=dict)
    """A Kueue arm's Workloads by name, as its watch saw them; {} for the others."""
    kueue_metrics: str = ""
    started: str = ""
    """UTC date and time the arm's cluster began to come up ("" in directories from before issue 21)."""
    holds: list[dict[str, Any]] = field(default_factory=list)
    """Arms with railyard: what it held per node and gang, from its topology view, each time that
    changed (``holds.ViewPoller``); [] for the others and in directories from before issue 23."""
    apiserver_metrics: tuple[str, str] = ("", "")
    """The API server's /metrics at t0 and at the end of the arm, for what it wrote meanwhile
    (``analysis.apiserver_writes``); empty in directories from before issue 21's second round."""


class PodWatcher(kube_mod.Watch):
    """Follows the bench namespace's pods and stamps bound/finished times into the records."""

    def __init__(self, kube: kube_mod.Kube, records: dict[str, PodRecord], t0: list[float]) -> None:
        super().__init__(kube, f"/api/v1/namespaces/{arms_mod.NAMESPACE}/pods", "bench-watch")
        self._records, self._t0 = records, t0
        self.bound_count = 0
        self.last_bind = 0.0

    def handle(self, obj: dict[str, Any]) -> None:
        now = time.monotonic() - self._t0[0]
        rec = self._records.get((obj.get("metadata") or {}).get("name", ""))
        if rec is not None:
            node = (obj.get("spec") or {}).get("nodeName")
            phase = (obj.get("status") or {}).get("phase")
            with self.lock:
                if (obj.get("metadata") or {}).get("deletionTimestamp") and rec.finished is None \
                        and rec.deleted is None:
                    rec.deleted = now
                if node and rec.bound is None:
                    rec.bound, rec.node = now, node
                    self.bound_count += 1
                    self.last_bind = now
                if phase in ("Succeeded", "Failed") and rec.finished is None:
                    rec.finished = now


def run_arm(arm: arms_mod.Arm, jobs: list[Job], topology_text: str, workload: dict[str, Any],
            workdir: Path, log: TextIO = sys.stderr, kubernetes_version: str | None = None) -> ArmResult:
    """Start a cluster for ``arm`` (at ``kubernetes_version``, None = the default), run the jobs,
    return what was observed; always tears down."""
    say = lambda m: print(f"bench[{arm.name}]: {m}", file=log, flush=True)  # noqa: E731
    template = arms_mod.scheduler_config(arm)
    config_file = None
    if template is not None:
        # Outside the cluster's workdir: `cluster up` refuses a workdir it did not make.
        config_file = workdir.parent / "scheduler-config.template.yaml"
        config_file.parent.mkdir(parents=True, exist_ok=True)
        config_file.write_text(localconfig.dump_yaml(template))
    up_started, started = time.monotonic(), time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    info = cluster.up(cluster.UpOptions(
        workdir=workdir, topology=topology_text, extender=arm.extender, scheduler_config=config_file,
        feature_gates=dict(arm.feature_gates), runtime_config=arm.runtime_config, kueue=arm.kueue,
        # No kube-controller-manager: no controller acts on the bench's pods (no owners), and
        # every recorded run, issue 21's baseline included, was made without one.
        controllers=False, kubernetes_version=kubernetes_version, timeout=600), log=log)
    up_s = time.monotonic() - up_started
    say(f"cluster up in {up_s:.0f}s ({info.nodes} nodes)")
    try:
        nodes = topotext.load(topology_text).nodes if arm.kueue else []
        result = _drive(arm, jobs, workload, info, nodes, up_s, say)
        result.percentage_of_nodes_to_score = _percentage(info.workdir / "scheduler-config.yaml",
                                                          arm.single_scheduler_name)
        result.started = started
        return result
    finally:
        cluster.down(info.workdir, log=log, quiet=True)


def _percentage(config_file: Path, profile: str | None = None) -> int | None:
    """``percentageOfNodesToScore`` of the configuration kube-scheduler was started with, as
    the single pods' profile (``profile``, else the default one) has it: its own, else the global."""
    try:
        config = yaml.safe_load(config_file.read_text()) or {}
    except (OSError, yaml.YAMLError):
        return None
    value = config.get("percentageOfNodesToScore")
    for p in config.get("profiles") or []:
        if p.get("schedulerName") == (profile or "default-scheduler") and p.get("percentageOfNodesToScore") is not None:
            value = p["percentageOfNodesToScore"]
    return None if value is None else int(value)


def _drive(arm: arms_mod.Arm, jobs: list[Job], workload: dict[str, Any], info: cluster.ClusterInfo,
           nodes: list[dict[str, Any]], up_s: float, say) -> ArmResult:
    kube = kube_mod.Kube(info.api_url, pki_mod.Pki.at(info.workdir / "pki"))
    kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                       "metadata": {"name": arms_mod.NAMESPACE}})
    for name, value in (workload.get("priority_classes") or {}).items():
        kube.create("/apis/scheduling.k8s.io/v1/priorityclasses", {
            "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name},
            "value": int(value)})
    records: dict[str, PodRecord] = {}
    bodies: dict[str, list[dict[str, Any]]] = {}
    for job in jobs:
        bodies[job.name] = [arms_mod.pod(job, i, arm) for i in range(job.pods)]
        for body in bodies[job.name]:
            records[body["metadata"]["name"]] = PodRecord(body["metadata"]["name"], job.name, job.gpus)
    t0 = [time.monotonic()]
    watcher = PodWatcher(kube, records, t0)
    watcher.start()
    workloads, token = None, ""
    if arm.kueue:
        kueue_mod.install(kube, arm, nodes)
        token = kueue_mod.metrics_token(kube)
        workloads = kueue_mod.WorkloadWatcher(kube, {name: r.job for name, r in records.items()}, t0)
        workloads.start()
        say("Kueue Topology, ResourceFlavor, ClusterQueue and LocalQueue active")
    time.sleep(0.5)  # the watch is open before the first pod exists
    t0[0] = time.monotonic()
    # What railyard held explains gang placements (``holds``); a stream of lone pods does not pay
    # for the polls (throughput and scale measure railyard's CPU per pod).
    view = holds_mod.ViewPoller(f"http://127.0.0.1:{info.ports.extender_view}/topology.json", t0) \
        if info.extender_url and info.ports.extender_view and any(j.kind == "gang" for j in jobs) else None
    if view is not None:
        view.start()
    errors = [0]
    pod_path = f"/api/v1/namespaces/{arms_mod.NAMESPACE}/pods"
    samples: dict[str, dict[str, Any]] = {}

    def mark(name: str, bound: int, switches: bool = True) -> None:
        samples[name] = {"t": round(time.monotonic() - t0[0], 3), "bound": bound,
                         "cpu": cpu_mod.sample(info.pids)}
        if switches:  # every thread's status file: too many reads for each 0.25 s poll
            samples[name]["switches"] = cpu_mod.switches(info.pids)

    mark("start", 0)
    apiserver_before = kube.text("/metrics")

    def create_pod(body: dict[str, Any]) -> None:
        if kube.create(pod_path, body):
            rec = records[body["metadata"]["name"]]
            rec.created = time.monotonic() - t0[0]
        else:
            errors[0] += 1

    # A burst workload measures the scheduler draining a backlog, not this harness's creation
    # rate (a few dozen pods/s from Python on a loaded 2-core machine): the scheduler process is
    # paused (SIGSTOP) while the pods are created and resumed once all exist. Its informers
    # catch up (re-list if their watch was dropped meanwhile) before the first binding.
    held = workload.get("hold_scheduler_while_creating") and info.pids.get("kube-scheduler")
    if held:
        os.kill(held, signal.SIGSTOP)
    try:
        _submit(arm, jobs, bodies, kube, create_pod, t0, errors)
    finally:
        if held:
            # Sampled while kube-scheduler is still stopped: what the API server, etcd and
            # railyard's watch spent on the creations stays out of the scheduling window.
            with watcher.lock:
                mark("resume", watcher.bound_count)
            os.kill(held, signal.SIGCONT)
    if not held:
        samples["resume"] = samples["start"]
    last_created = time.monotonic() - t0[0]
    say(f"created {len(records) - errors[0]} pods in {last_created:.1f}s ({errors[0]} errors)"
        + (", kube-scheduler paused meanwhile" if held else ""))
    if held:
        # Throughput counts from the first binding; creation time is not scheduling time.
        t_resume = last_created
    else:
        t_resume = 0.0

    drain = float(workload.get("drain_timeout_s", 300))
    stall = float(workload.get("stall_s", 60))
    reason = "all pods bound"
    last_report = 0.0
    loads = [os.getloadavg()[0]]
    seen = samples["resume"]["bound"]
    while True:
        now = time.monotonic() - t0[0]
        with watcher.lock:
            bound, last_bind = watcher.bound_count, watcher.last_bind
        done = bound >= len(records) - errors[0]
        if bound > seen:
            # The window whose CPU is counted per pod ends at the last binding (to a poll),
            # not after the idle tail or a stall wait. Context switches (every thread's file)
            # are read at most once a second, and at the last pod's binding: their window
            # ends at the last ``switched`` mark, within a second of the last binding.
            mark("last_bind", bound, switches=False)
            if done or now - samples.get("switched", samples["start"])["t"] >= 1.0:
                mark("switched", bound)
            seen = bound
        if done:
            break
        if now > last_created + drain:
            reason = f"drain timeout ({drain:.0f}s after the last creation)"
            break
        if now - max(last_bind, last_created) > stall:
            reason = f"no binding for {stall:.0f}s"
            break
        if now - last_report > 15:
            say(f"t={now:.0f}s bound {bound}/{len(records)}")
            last_report = now
            loads.append(os.getloadavg()[0])
        time.sleep(0.25)
    # Let finishing pods (and late evictions, ``linger_s``) be seen a moment longer than the last bind.
    time.sleep(float(workload.get("linger_s", 1.0)))
    end = time.monotonic() - t0[0]
    with watcher.lock:
        mark("end", watcher.bound_count)
    watcher.stop()
    if workloads is not None:
        workloads.stop()
    if view is not None:
        view.stop()
    say(f"stopped at t={end:.0f}s: {reason}; bound {watcher.bound_count}/{len(records)}")
    loads.append(os.getloadavg()[0])
    result = ArmResult(arm.name, records, end, up_s, errors[0], stop_reason=reason,
                       cpu_samples=samples, load_average_1m=[round(x, 2) for x in loads])
    result.notes.append(f"1-minute load average of this 2-core machine during the arm: "
                        f"{min(loads):.1f} to {max(loads):.1f} (other work shares it)")
    if held:
        result.notes.append(f"kube-scheduler paused while the {len(records)} pods were created "
                            f"({t_resume:.0f}s), resumed at t={t_resume:.0f}s")
    if watcher.error:
        result.notes.append(f"watch reconnected after: {watcher.error}")
    if view is not None:
        result.holds = view.polls
        result.notes.append(f"railyard's topology view polled every {holds_mod.POLL_S:g} s for what it held: "
                            f"{len(view.polls)} changes kept, {view.failures} polls failed")
    if workloads is not None:
        with workloads.lock:
            result.workloads = dict(workloads.records)
        if workloads.error:
            result.notes.append(f"Workload watch reconnected after: {workloads.error}")
        if info.kueue is None:
            raise RuntimeError("bench: the cluster was started with Kueue but reports no Kueue state")
        result.kueue_metrics = kueue_mod.scrape(info.kueue["metrics"], token)
    result.scheduler_metrics = _scrape(f"https://127.0.0.1:{info.ports.scheduler}/metrics")
    result.apiserver_metrics = (apiserver_before, kube.text("/metrics"))
    if info.extender_url:
        result.extender_metrics = _scrape(f"http://127.0.0.1:{info.ports.extender}/metrics")
    return result


def _submit(arm, jobs, bodies, kube: kube_mod.Kube, create_pod, t0: list[float], errors: list[int]) -> None:
    """Create every job's objects at its arrival time, members from a thread pool."""
    pool = ThreadPoolExecutor(kube_mod.CREATE_THREADS, thread_name_prefix="bench-create")
    try:
        for at, arriving in groupby(jobs, key=lambda j: j.at):
            group = list(arriving)
            delay = t0[0] + at - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            for job in group:
                for path, obj in arms_mod.group_objects(job, arm):
                    if not kube.create(path, obj):
                        errors[0] += 1
            # Members of jobs arriving together are created interleaved, as controllers do.
            for row in zip_longest(*(bodies[j.name] for j in group)):
                for body in row:
                    if body is not None:
                        pool.submit(create_pod, body)
    finally:
        pool.shutdown(wait=True)


def _scrape(url: str) -> str:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # kube-scheduler's in-memory self-signed serving cert
    try:
        with urllib.request.urlopen(url, timeout=30, context=context if url.startswith("https") else None) as r:
            return r.read().decode()
    except OSError as exc:
        return f"# scrape of {url} failed: {exc}\n"


def save(result: ArmResult, directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "pods.json").write_text(json.dumps([asdict(r) for r in result.pods.values()]))
    (directory / "arm.json").write_text(json.dumps({
        "end": result.end, "cluster_up_s": result.cluster_up_s, "create_errors": result.create_errors,
        "stop_reason": result.stop_reason, "notes": result.notes, "cpu_samples": result.cpu_samples,
        "percentage_of_nodes_to_score": result.percentage_of_nodes_to_score,
        "load_average_1m": result.load_average_1m, "started": result.started}, indent=1))
    (directory / "scheduler-metrics.prom").write_text(result.scheduler_metrics)
    for name, text in zip(APISERVER_METRICS, result.apiserver_metrics):
        if text:
            (directory / name).write_bytes(gzip.compress(text.encode()))
    if result.extender_metrics:
        (directory / "extender-metrics.prom").write_text(result.extender_metrics)
    if result.kueue_metrics:
        (directory / "kueue-metrics.prom").write_text(result.kueue_metrics)
        (directory / "workloads.json").write_text(json.dumps([asdict(w) for w in result.workloads.values()]))
    if result.holds:
        with gzip.open(directory / "holds.json.gz", "wt") as f:
            json.dump(result.holds, f)


def load(directory: Path, arm: str) -> ArmResult:
    """What ``save`` wrote, for analysing a run again (``python -m bench report``)."""
    meta = json.loads((directory / "arm.json").read_text())
    pods = {p["name"]: PodRecord(**p) for p in json.loads((directory / "pods.json").read_text())}
    ext, kueue_metrics, workloads, held = (directory / f for f in ("extender-metrics.prom", "kueue-metrics.prom",
                                                                    "workloads.json", "holds.json.gz"))
    before, after = (gzip.decompress(p.read_bytes()).decode() if p.exists() else ""
                     for p in (directory / f for f in APISERVER_METRICS))
    return ArmResult(arm, pods, meta["end"], meta["cluster_up_s"], meta["create_errors"],
                     extender_metrics=ext.read_text() if ext.exists() else "",
                     scheduler_metrics=(directory / "scheduler-metrics.prom").read_text(),
                     stop_reason=meta["stop_reason"], notes=meta["notes"],
                     # Absent in directories written before issue 13.
                     cpu_samples=meta.get("cpu_samples") or {},
                     percentage_of_nodes_to_score=meta["percentage_of_nodes_to_score"]
                     if "percentage_of_nodes_to_score" in meta else _percentage_or_unknown(directory),
                     load_average_1m=meta.get("load_average_1m") or [], started=meta.get("started", ""),
                     workloads={w["name"]: kueue_mod.WorkloadRecord(**w) for w in json.loads(workloads.read_text())}
                     if workloads.exists() else {},
                     kueue_metrics=kueue_metrics.read_text() if kueue_metrics.exists() else "",
                     holds=json.loads(gzip.decompress(held.read_bytes())) if held.exists() else [],
                     apiserver_metrics=(before, after))


def _percentage_or_unknown(directory: Path) -> int | None | str:
    config_file = directory / "cluster" / "scheduler-config.yaml"
    return _percentage(config_file) if config_file.exists() else "unknown"
