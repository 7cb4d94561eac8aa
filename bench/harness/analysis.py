"""The numbers of one arm, from observed bindings, node labels and scraped metrics.

Independent of railyard by design: domains come from the node labels (``scenario.LEVEL_KEYS``),
free GPUs from the pods the watch saw bound and not yet finished. Definitions (bench/README.md
repeats them next to the keys):

- throughput: bindings per 1 s bucket, from the first binding to the last; ``avg`` is bindings
  over that span, ``p50``/``p99`` are percentiles of the 1 s samples (as scheduler_perf reports).
- gang time-to-bind: first member created -> last member bound, over gangs that bound whole.
- narrowest-domain share: at the moment a gang's last member bound, the narrowest level
  (host < NVLink < leaf < block < cluster) with one domain whose free GPUs (other gangs' and
  pods' bindings only) could hold the whole gang, node by node; the gang counts if all its
  members share one domain at that level or narrower.
- partial-gang exposure: pod-seconds members spent bound while their gang was incomplete
  (until the gang completed, the member finished, or observation ended).
- deadlocked gangs: gangs that waited longer than ``deadlock_wait_s`` (300 s full) while the
  GPUs held by bound members of *other* incomplete gangs would have covered what they lacked,
  in every 1 s sample for ``deadlock_hold_s`` (10 s) in a row: a holding that persists, not a
  gang's Binding burst caught between two of its members by one sample.
- utilization: GPUs held by bound, unfinished pods over all GPUs, sampled each second.
- fragmentation: the share of free GPUs that pods of the workload's per-pod sizes cannot use
  (sum over nodes of free mod size), weighted by each size's share of requested GPUs. The mean
  of that per-second share weighs a second with 10 GPUs free as much as one with 200, so an
  arm that keeps more of the cluster busy scores worse for the same stranded GPUs (issue 23):
  ``fragmentation_gpu_seconds`` is stranded over free summed over the seconds instead.
- CPU per pod (issue 13): each process's CPU seconds (``/proc``, ``bench/harness/cpu.py``)
  from kube-scheduler's resume (or t0) to the last binding, over the pods bound in that window.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any, Iterable

from prometheus_client.parser import text_string_to_metric_families

from bench.harness import arms as arms_mod, cpu as cpu_mod, holds, pergang, preemption
from bench.harness.pergang import LEVELS
from bench.harness.runner import ArmResult, PodRecord, bound_pods
from bench.harness.scenario import HOSTNAME, LEVEL_KEYS
from bench.harness.workload import Job


def percentile(values: Iterable[float], q: float) -> float | None:
    data = sorted(values)
    if not data:
        return None
    pos = (len(data) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return data[lo] + (data[hi] - data[lo]) * (pos - lo)


def node_paths(nodes: list[dict[str, Any]]) -> dict[str, tuple[str, ...]]:
    """Node name -> (block, leaf, nvl, host): a domain is identified by its whole path."""
    keys = [LEVEL_KEYS[w] for w in ("block", "leaf", "nvl")]
    out = {}
    for node in nodes:
        labels = node["metadata"]["labels"]
        out[node["metadata"]["name"]] = (*(labels.get(k, "-") for k in keys), labels[HOSTNAME])
    return out


def node_capacity(nodes: list[dict[str, Any]]) -> dict[str, int]:
    caps = {}
    for node in nodes:
        if node.get("spec", {}).get("unschedulable"):
            continue
        caps[node["metadata"]["name"]] = int(node["status"]["allocatable"].get("nvidia.com/gpu", 0))
    return caps


def free_gpus(recs: dict[str, PodRecord], caps: dict[str, int], own: set[str], t: float) -> dict[str, int]:
    """Node -> GPUs free at ``t`` for a gang whose pods are ``own``: capacity minus the pods of
    others bound by then and not finished (never below 0)."""
    free = dict(caps)
    for r in recs.values():
        if (r.bound is not None and r.name not in own and r.node in free and r.bound <= t
                and (r.finished is None or r.finished > t)):
            free[r.node] -= r.gpus
    return {n: max(f, 0) for n, f in free.items()}


def held_fewest(recs: dict[str, PodRecord], caps: dict[str, int], paths: dict[str, tuple[str, ...]], job: Job,
                own: set[str], created: float, first_bound: float, bound: float) -> dict[str, int] | None:
    """``gang_records``' ``fewest_held``: the fewest domains per level at the first moment from
    the gang's first creation to its first binding when it fits on the free GPUs less every GPU
    other pods took after that moment, until ``HELD_S`` after it bound (railyard reserves a
    planned gang's GPUs; the watch sees only the bindings). Free GPUs only grow between those
    moments as pods finish, so the first moment it fits allows the most domains. None if none."""
    others = [(r, at, node) for r, at, node in bound_pods(recs.values()) if r.name not in own and node in caps]
    moments = [created, *sorted(r.finished for r, _, _ in others
                                if r.finished is not None and created < r.finished <= first_bound)]
    for t in moments:
        free = free_gpus(recs, caps, own, t)
        for r, at, node in others:
            if t < at <= bound + pergang.HELD_S:
                free[node] = max(free[node] - r.gpus, 0)
        fewest = pergang.fewest_domains(paths, free, job.pods, job.gpus, job.required)
        if fewest is not None:
            return fewest
    return None


def narrowest_possible(paths: dict[str, tuple[str, ...]], free: dict[str, int], pods: int, gpus: int) -> int:
    """Deepest depth with one domain whose nodes' free GPUs fit ``pods`` x ``gpus``; -1 if none."""
    for depth in range(len(LEVELS) - 1, -1, -1):
        fit: dict[tuple[str, ...], int] = defaultdict(int)
        for node, f in free.items():
            fit[paths[node][:depth]] += f // gpus
        if fit and max(fit.values()) >= pods:
            return depth
    return -1


def shared_depth(paths: list[tuple[str, ...]]) -> int:
    """Deepest depth at which every path is in one domain (0 = only the cluster)."""
    depth = 0
    while depth < len(LEVELS) - 1 and len({p[: depth + 1] for p in paths}) == 1:
        depth += 1
    return depth


def analyse(result: ArmResult, jobs: list[Job], nodes: list[dict[str, Any]],
            workload: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(results.json entry for the arm, series for the plots)."""
    recs = result.pods
    paths, caps = node_paths(nodes), node_capacity(nodes)
    by_job: dict[str, list[PodRecord]] = defaultdict(list)
    for rec in recs.values():
        by_job[rec.job].append(rec)
    gangs = [j for j in jobs if j.kind == "gang"]

    binds = sorted(r.bound for r in recs.values() if r.bound is not None)
    out: dict[str, Any] = {"throughput_pods_per_s": _throughput(binds)}
    # The watch can show the binding a moment before the POST that created the pod returns: 0.
    pod_ttb = [max(0.0, r.bound - r.created) for r in recs.values() if r.bound is not None and r.created is not None]
    created = sorted(r.created for r in recs.values() if r.created is not None)
    out["pod_creation_pods_per_s"] = (_r(len(created) / max(created[-1] - created[0], 1e-3))
                                      if len(created) > 1 else None)
    out["pod_time_to_bind_s"] = {"p50": _r(percentile(pod_ttb, 50)), "p99": _r(percentile(pod_ttb, 99))}

    complete, ttb, narrow, levels_landed, spans = [], [], [], [], defaultdict(list)
    records: dict[str, dict[str, Any]] = {}
    spread: list[float] = []
    exposure = 0.0
    for job in gangs:
        members = by_job[job.name]
        bound = bound_pods(members)
        done = len(bound) == job.pods
        t_complete = max(at for _, at, _ in bound) if done else result.end
        for m, at, _ in bound:
            until = min(t_complete, m.finished) if m.finished is not None else t_complete
            exposure += max(0.0, until - at)
        if not done:
            continue
        complete.append(job)
        first_bound = min(at for _, at, _ in bound)
        spread.append(t_complete - first_bound)
        created = [m.created for m in members if m.created is not None]
        if created:
            ttb.append(t_complete - min(created))
        own = {m.name for m in members}
        free = free_gpus(recs, caps, own, t_complete)
        possible = narrowest_possible(paths, free, job.pods, job.gpus)
        member_paths = [paths[node] for _, _, node in bound]
        actual = shared_depth(member_paths)
        narrow.append(actual >= max(possible, 0))
        levels_landed.append((LEVELS[actual], LEVELS[max(possible, 0)]))
        at_creation = free_gpus(recs, caps, own, min(created)) if created else None
        held = held_fewest(recs, caps, paths, job, own, min(created), first_bound, t_complete) if created else None
        records[job.name] = {**pergang.record(job, member_paths, paths, free, at_creation, t_complete),
                             "fewest_held": held,
                             "landed": LEVELS[actual], "narrowest": LEVELS[max(possible, 0)]}
        plan = holds.planned_at(result.holds, job.name, min(created), first_bound, t_complete) if created else None
        if plan is not None:
            moments, poll = plan
            records[job.name]["fewest_on_view"] = holds.loosest([holds.fewest_on_view(
                poll, free_gpus(recs, caps, own, at), paths, job) for at in moments])
        for lvl, n in records[job.name]["spans"].items():
            spans[lvl].append(n)

    out["gang_time_to_bind_s"] = {"p50": _r(percentile(ttb, 50)), "p99": _r(percentile(ttb, 99))}
    out["gang_bind_spread_s"] = {"p50": _r(percentile(spread, 50)), "p99": _r(percentile(spread, 99)),
                                 "max": _r(max(spread)) if spread else None}
    out["narrowest_domain_fraction"] = _r(sum(narrow) / len(narrow)) if narrow else None
    out["partial_gang_pod_seconds"] = _r(exposure) if gangs else None
    series: dict[str, Any] = _timeline(recs, caps, jobs, result.end)
    out["deadlocked_gangs"] = _deadlocks(gangs, by_job, float(workload.get("deadlock_wait_s", 300)),
                                         result.end, float(workload.get("deadlock_hold_s", 10))) if gangs else None
    out["utilization_mean"] = _r(sum(series["utilization"]) / len(series["utilization"])) if series["t"] else None
    frag = [f for f in series["fragmentation"] if f is not None]
    out["fragmentation_mean"] = _r(sum(frag) / len(frag)) if frag else None
    out["fragmentation_gpu_seconds"] = (_r(sum(series["stranded"]) / sum(series["free"]))
                                        if sum(series["free"]) else None)
    out["stranded_gpus_mean"] = _r(sum(series["stranded"]) / len(series["t"])) if series["t"] else None
    out["domains_spanned_mean"] = {lvl: _r(sum(v) / len(v)) for lvl, v in spans.items()} if spans else None
    out["domains_beyond_fewest_mean"] = pergang.beyond_fewest_mean(records)
    out["gang_records"] = {j.name: records.get(j.name) or {"pods": j.pods, "gpus": j.gpus,
                                                            "request": pergang.request(j), "spans": None}
                           for j in gangs} if gangs else None
    out["gangs"] = {"total": len(gangs), "bound_whole": len(complete),
                    "partly_bound": sum(1 for j in gangs if 0 < sum(m.bound is not None for m in by_job[j.name]) < j.pods),
                    "none_bound": sum(1 for j in gangs if not any(m.bound is not None for m in by_job[j.name]))}
    out["pods"] = {"total": len(recs), "bound": len(binds), "create_errors": result.create_errors}
    out["scheduler_attempt_ms"] = _hist_ms(result.scheduler_metrics, "scheduler_scheduling_attempt_duration_seconds")
    out["scheduler_algorithm_ms"] = _hist_ms(result.scheduler_metrics, "scheduler_scheduling_algorithm_duration_seconds")
    out["scheduler_attempts"] = _counter_by(result.scheduler_metrics, "scheduler_schedule_attempts", "result")
    out.update(attempts_per_pod(result, jobs))
    if result.extender_metrics:
        out["extender_verb_ms"] = {
            verb: _hist_ms(result.extender_metrics, "railyard_verb_duration_seconds", verb=verb)
            for verb in ("filter", "prioritize", "bind")}
        out["extender_verb_outcomes"] = {
            verb: _hist_count_by(result.extender_metrics, "railyard_verb_duration_seconds", "outcome", verb=verb)
            for verb in ("filter", "prioritize", "bind")}
    out["extender_verb_ms_per_pod"] = (
        {verb: _r(_hist_sum(result.extender_metrics, "railyard_verb_duration_seconds", verb=verb) * 1000
                  / len(binds), 4) if binds else None for verb in ("filter", "prioritize", "bind")}
        if result.extender_metrics else None)
    out["apiserver_writes_per_pod"] = apiserver_writes(result.apiserver_metrics,
                                                       sum(r.created is not None for r in recs.values()))
    out["kueue"] = kueue_numbers(result, gangs, by_job) if result.workloads else None
    pct = result.percentage_of_nodes_to_score
    out["percentage_of_nodes_to_score"] = pct
    out["nodes_to_find"] = (arms_mod.nodes_to_find(pct, len(caps)) if pct is None or isinstance(pct, int)
                            else None)
    out["cpu_ms_per_pod"], out["cpu"] = cpu_usage(result.cpu_samples,
                                                   sum(r.created is not None for r in recs.values()))
    out["process_cpu_ms_per_pod"] = _r(cpu_mod.processes(out["cpu_ms_per_pod"])) if out["cpu_ms_per_pod"] else None
    out["ctx_switches_per_pod"] = ((out["cpu"]["scheduling"].get("switches") or {}).get("per_pod")
                                   if out["cpu"] else None)
    loads = result.load_average_1m
    out["load_average_1m"] = {"min": min(loads), "max": max(loads)} if loads else None
    out["started"] = result.started or None
    out["cluster_up_s"] = _r(result.cluster_up_s)
    out["observed_s"] = _r(result.end)
    out["stop_reason"] = result.stop_reason
    out["preemption"] = preemption.analyse(result, jobs, workload, paths, caps, LEVELS)
    series.update(binds=binds, pod_ttb=pod_ttb, gang_ttb=ttb, landed=levels_landed)
    if result.extender_metrics:
        series["verb_cdf"] = {verb: _hist_cdf(result.extender_metrics, "railyard_verb_duration_seconds", verb=verb)
                              for verb in ("filter", "prioritize")}
    series["gangs_per_leaf"] = _gangs_per_leaf(complete, by_job, paths)
    return out, series


WRITE_VERBS = ("POST", "PUT", "PATCH", "APPLY", "DELETE", "DELETECOLLECTION")


def apiserver_writes(metrics: tuple[str, str], pods: int) -> dict[str, float | None] | None:
    """The writes the API server served during the arm (``apiserver_request_total`` at its end
    less at its start, every client and response code), per pod created, by ``VERB
    resource[/subresource]``, most first, with their ``total``; entries under 0.01 per pod are
    left out of the breakdown, not the total. None without both scrapes. Every write is an etcd
    write and a watch event to every watcher of its kind (railyard's pod watch included)."""
    before, after = (_write_counts(text) for text in metrics)
    if not before or not after or not pods:
        return None
    delta = {k: v - before.get(k, 0.0) for k, v in after.items()}
    out = {k: _r(v / pods, 2) for k, v in sorted(delta.items(), key=lambda kv: -kv[1]) if v / pods >= 0.01}
    return {"total": _r(sum(delta.values()) / pods, 2), **out}


def _write_counts(text: str) -> dict[str, float]:
    name = "apiserver_request"
    lines = "\n".join(line for line in text.splitlines() if line.startswith(name + "_total{") or
                       line.startswith(f"# TYPE {name}_total "))
    acc: dict[str, float] = defaultdict(float)
    for family in _families(lines, name):
        for s in family.samples:
            verb = s.labels.get("verb", "")
            if s.name == name + "_total" and verb in WRITE_VERBS:
                what = s.labels.get("resource", "") + ("/" + s.labels["subresource"] if s.labels.get("subresource") else "")
                acc[f"{verb} {what}"] += s.value
    return dict(acc)


def attempts_per_pod(result: ArmResult, jobs: list[Job]) -> dict[str, Any]:
    """kube-scheduler's scheduling attempts (``scheduler_schedule_attempts_total``, by result)
    per pod created, and per gang member where the metric can tell gang members apart.

    The counter is labelled by result and profile only, not by pod. It isolates the gang
    members when no single pod shares their profile: the scenario has no single pods, or the
    arm's gang members name a profile of their own (``arms.GANG_PROFILE``: every arm but D).
    Otherwise ``scheduler_attempts_per_gang_member`` is None and only the all-pods figure exists.
    """
    text = result.scheduler_metrics
    gangs = {j.name for j in jobs if j.kind == "gang"}
    created = [r for r in result.pods.values() if r.created is not None]
    pods, members = len(created), sum(r.job in gangs for r in created)
    arm = arms_mod.ARMS.get(result.arm)
    everyone = _counter_by(text, "scheduler_schedule_attempts", "result")
    if members == pods:
        gang: dict[str, int] | None = everyone
    elif arm is not None and arm.gang_scheduler_name:
        gang = _counter_by(text, "scheduler_schedule_attempts", "result", profile=arm.gang_scheduler_name)
    else:
        gang = None

    def per(counts: dict[str, int], n: int) -> dict[str, float | None]:
        return {res: _r(counts.get(res, 0) / n, 2) if n else None for res in ("scheduled", "unschedulable", "error")}

    return {"scheduler_attempts_by_profile": {prof: _counter_by(text, "scheduler_schedule_attempts", "result",
                                                                profile=prof)
                                              for prof in _counter_by(text, "scheduler_schedule_attempts", "profile")},
            "scheduler_attempts_per_pod": per(everyone, pods),
            "scheduler_attempts_per_gang_member": per(gang, members) if gang is not None and members else None}


def kueue_numbers(result: ArmResult, gangs: list[Job], by_job: dict[str, list[PodRecord]]) -> dict[str, Any]:
    """A Kueue arm's admission times, per gang, from the watch on Workloads and the pods:
    ``created_to_admitted_s`` first member created -> Workload admitted (Kueue's part of the
    gang's time-to-bind, waiting for capacity included); ``last_member_to_admitted_s`` last
    member created -> admitted (a pod group's Workload exists only once every member does);
    ``admitted_to_bound_s`` admitted -> last member bound (Kueue ungating + kube-scheduler).
    From Kueue's metrics: ``admission_attempt_ms`` (one attempt of its scheduler, TAS included;
    every result), ``admission_attempts`` by result, ``admission_wait_s`` (created or requeued
    -> admitted, every Workload)."""
    admitted = {w.job: w.admitted for w in result.workloads.values() if w.admitted is not None}
    to_admit, last_to_admit, to_bound = [], [], []
    for job in gangs:
        at = admitted.get(job.name)
        created = [m.created for m in by_job[job.name] if m.created is not None]
        if at is None or len(created) < job.pods:
            continue
        to_admit.append(at - min(created))
        last_to_admit.append(max(0.0, at - max(created)))
        bound = [m.bound for m in by_job[job.name] if m.bound is not None]
        if len(bound) == job.pods:
            to_bound.append(max(0.0, max(bound) - at))

    def p(values: list[float]) -> dict[str, float | None]:
        return {"p50": _r(percentile(values, 50)), "p99": _r(percentile(values, 99))}

    wait = _buckets(result.kueue_metrics, "kueue_admission_wait_time_seconds")
    return {
        "workloads": {"total": len(result.workloads), "admitted": sum(w.admitted is not None for w in result.workloads.values())},
        "gang_created_to_admitted_s": p(to_admit),
        "gang_last_member_to_admitted_s": p(last_to_admit),
        "gang_admitted_to_bound_s": p(to_bound),
        "admission_attempt_ms": _hist_ms(result.kueue_metrics, "kueue_admission_attempt_duration_seconds"),
        "admission_attempts": _counter_by(result.kueue_metrics, "kueue_admission_attempts", "result"),
        "admission_wait_s": {"p50": _r(histogram_quantile(wait, 0.5)), "p99": _r(histogram_quantile(wait, 0.99))},
    }


def cpu_usage(samples: dict[str, dict[str, Any]], created: int) -> tuple[dict[str, float] | None,
                                                                         dict[str, Any] | None]:
    """(``cpu_ms_per_pod``, ``cpu``) from the runner's samples (``ArmResult.cpu_samples``).

    The scheduling window runs from ``resume`` (kube-scheduler resumed once every pod existed;
    t0 when it was not paused) to ``last_bind`` (``end`` if nothing bound); its CPU is divided
    by the pods bound in it. Its context switches run to ``switched`` (the last read after a
    binding, within a second of the last one; in directories written before it existed, to
    ``last_bind`` when that sample has them, else to ``end``), over the pods bound by then.
    The creating window (``start`` -> ``resume``,
    only when the scheduler was paused) is divided by the pods created: there the API server,
    etcd and railyard's watch cache take in the pods while kube-scheduler is stopped. The arm
    window (``start`` -> ``end``) says what the machine's other work took during the whole arm.
    Each window's ``other_cores`` is that other work in cores (CPU-seconds per second).
    """
    if "start" not in samples or "end" not in samples:
        return None, None
    resume = samples.get("resume", samples["start"])
    stop = samples.get("last_bind", samples["end"])

    def window(a: dict[str, Any], b: dict[str, Any], pods: int, switch_end: dict[str, Any] | None = None) -> dict[str, Any]:
        seconds = cpu_mod.spent(a["cpu"], b["cpu"])
        span = b["t"] - a["t"]

        def cores(key: str) -> float | None:
            return _r(seconds[key] / span, 2) if span > 0 and key in seconds else None

        out = {"from_s": a["t"], "to_s": b["t"], "pods": pods,
               # CPU-seconds per second: 2.0 = both cores of this machine busy.
               "cores_busy": cores(cpu_mod.MACHINE), "other_cores": cores(cpu_mod.OTHER),
               "seconds": {k: _r(v) for k, v in seconds.items()},
               "ms_per_pod": {k: _r(v * 1000 / pods, 3) for k, v in seconds.items()} if pods else None}
        end = switch_end or (b if "switches" in b else samples["end"])
        if "switches" in a and "switches" in end:
            counts = cpu_mod.switched(a["switches"], end["switches"])
            n = pods if end is b else end["bound"] - a["bound"]
            out["switches"] = {"to_s": end["t"], "pods": n, "count": counts,
                               "per_pod": {k: {kind: _r(v / n, 2) for kind, v in c.items()}
                                           for k, c in counts.items()} if n else None}
        return out

    scheduling = window(resume, stop, stop["bound"] - resume["bound"], samples.get("switched"))
    creating = window(samples["start"], resume, created) if resume["t"] > samples["start"]["t"] else None
    arm = window(samples["start"], samples["end"], samples["end"]["bound"])
    return scheduling["ms_per_pod"], {"scheduling": scheduling, "creating": creating, "arm": arm}


def _throughput(binds: list[float]) -> dict[str, float | None]:
    if len(binds) < 2:
        return {"avg": None, "p50": None, "p99": None, "span_s": None}
    first, last = binds[0], binds[-1]
    buckets = [0] * (int(last) - int(first) + 1)
    for b in binds:
        buckets[int(b) - int(first)] += 1
    # A span under 1 s counts as 1 s: ``avg`` is then a floor (every pod bound within a second).
    return {"avg": _r(len(binds) / max(last - first, 1.0)),
            "p50": _r(percentile(buckets, 50)), "p99": _r(percentile(buckets, 99)),
            "span_s": _r(last - first)}


def _timeline(recs: dict[str, PodRecord], caps: dict[str, int], jobs: list[Job], end: float) -> dict[str, list]:
    """Per-second utilization and fragmentation."""
    sizes: dict[int, float] = defaultdict(float)
    for j in jobs:
        sizes[j.gpus] += j.pods * j.gpus
    weight = {s: v / sum(sizes.values()) for s, v in sizes.items()}
    events = []
    for r in recs.values():
        if r.bound is not None and r.node in caps:
            events.append((r.bound, r.node, -r.gpus))
            if r.finished is not None:
                events.append((r.finished, r.node, r.gpus))
    events.sort()
    free = dict(caps)
    total = sum(caps.values())
    t_series, util, frag, stranded_series, free_series = [], [], [], [], []
    i = 0
    for second in range(0, int(end) + 1):
        while i < len(events) and events[i][0] <= second:
            _, node, delta = events[i]
            free[node] += delta
            i += 1
        free_total = sum(max(f, 0) for f in free.values())
        t_series.append(second)
        util.append((total - free_total) / total if total else 0.0)
        stranded = sum(w * sum(max(f, 0) % s for f in free.values()) for s, w in weight.items())
        frag.append(stranded / free_total if free_total else None)
        stranded_series.append(stranded)
        free_series.append(free_total)
    return {"t": t_series, "utilization": util, "fragmentation": frag, "stranded": stranded_series,
            "free": free_series}


def _deadlocks(gangs: list[Job], by_job: dict[str, list[PodRecord]], wait: float, end: float,
               hold: float = 10.0) -> int:
    first_created = {j.name: min((m.created for m in by_job[j.name] if m.created is not None), default=None)
                     for j in gangs}

    def held(job: Job, t: float) -> int:
        return sum(1 for m in by_job[job.name] if m.bound is not None and m.bound <= t
                   and (m.finished is None or m.finished > t))

    def incomplete(job: Job, t: float) -> bool:
        return sum(1 for m in by_job[job.name] if m.bound is not None and m.bound <= t) < job.pods

    dead: set[str] = set()
    run: dict[str, int] = defaultdict(int)
    """gang -> consecutive samples so far in which others' partial holdings covered its lack."""
    for second in range(0, int(end) + 1):
        waiting = [j for j in gangs if j.name not in dead and (start := first_created[j.name]) is not None
                   and second >= start and incomplete(j, second)]
        partial = {j.name: held(j, second) * j.gpus for j in gangs if incomplete(j, second)}
        blocked = set()
        for j in waiting:
            lacking = (j.pods - held(j, second)) * j.gpus
            if sum(v for name, v in partial.items() if name != j.name) >= lacking:
                blocked.add(j.name)
        for j in gangs:
            run[j.name] = run[j.name] + 1 if j.name in blocked else 0
            start = first_created[j.name]
            # None: no member was created, so the gang never waited (``hold`` > 0 keeps its run at 0).
            if run[j.name] >= hold and start is not None and second - start > wait:
                dead.add(j.name)
    return len(dead)


def _gangs_per_leaf(complete: list[Job], by_job, paths) -> dict[str, int]:
    counts: dict[str, int] = defaultdict(int)
    for job in complete:
        for leaf in {paths[m.node][:2] for m in by_job[job.name]}:
            counts["/".join(leaf)] += 1
    return dict(sorted(counts.items()))


# ------------------------------------------------------------------ Prometheus text

def _families(text: str, name: str):
    try:
        for family in text_string_to_metric_families(text):
            if family.name == name:
                yield family
    except ValueError:
        return


def _buckets(text: str, name: str, **match: str) -> list[tuple[float, float]]:
    acc: dict[float, float] = defaultdict(float)
    for family in _families(text, name):
        for s in family.samples:
            if s.name == name + "_bucket" and all(s.labels.get(k) == v for k, v in match.items()):
                acc[float(s.labels["le"])] += s.value
    return sorted(acc.items())


def histogram_quantile(buckets: list[tuple[float, float]], q: float) -> float | None:
    """Prometheus' histogram_quantile: linear inside the bucket; the +Inf bucket gives its lower bound."""
    if not buckets or buckets[-1][1] == 0:
        return None
    rank = q * buckets[-1][1]
    prev_le, prev_count = 0.0, 0.0
    for le, count in buckets:
        if count >= rank:
            if math.isinf(le):
                return prev_le
            return prev_le + (le - prev_le) * (rank - prev_count) / max(count - prev_count, 1e-12)
        prev_le, prev_count = le, count
    return prev_le


def _hist_ms(text: str, name: str, **match: str) -> dict[str, float | None]:
    b = _buckets(text, name, **match)
    p50, p99 = histogram_quantile(b, 0.5), histogram_quantile(b, 0.99)
    count = int(b[-1][1]) if b else 0
    return {"p50": _r(p50 * 1000, 4) if p50 is not None else None,
            "p99": _r(p99 * 1000, 4) if p99 is not None else None,
            "mean": _r(_hist_sum(text, name, **match) * 1000 / count, 4) if count else None,
            "count": count}


def _hist_sum(text: str, name: str, **match: str) -> float:
    """A histogram's ``_sum`` over every series matching ``match`` (seconds)."""
    total = 0.0
    for family in _families(text, name):
        for s in family.samples:
            if s.name == name + "_sum" and all(s.labels.get(k) == v for k, v in match.items()):
                total += s.value
    return total


def _hist_cdf(text: str, name: str, **match: str) -> list[tuple[float, float]]:
    b = _buckets(text, name, **match)
    if not b or b[-1][1] == 0:
        return []
    return [(le, c / b[-1][1]) for le, c in b if not math.isinf(le)]


def _hist_count_by(text: str, name: str, label: str, **match: str) -> dict[str, int]:
    acc: dict[str, float] = defaultdict(float)
    for family in _families(text, name):
        for s in family.samples:
            if s.name == name + "_count" and all(s.labels.get(k) == v for k, v in match.items()):
                acc[s.labels.get(label, "")] += s.value
    return {k: int(v) for k, v in sorted(acc.items())}


def _counter_by(text: str, name: str, label: str, **match: str) -> dict[str, int]:
    acc: dict[str, float] = defaultdict(float)
    for family in _families(text, name):
        for s in family.samples:
            if s.name == name + "_total" and all(s.labels.get(k) == v for k, v in match.items()):
                acc[s.labels.get(label, "")] += s.value
    return {k: int(v) for k, v in sorted(acc.items())}


def _r(x: float | None, digits: int = 3) -> float | None:
    return None if x is None else round(x, digits)
