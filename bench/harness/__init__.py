"""End-to-end scheduler benchmarks on local kwok clusters (issue 5): ``python -m bench run``.

Modules, in the order a run uses them::

    scenario   a scenario data file (bench/scenarios/NAME.yaml) -> Scenario (topology + workload)
    workload   seeded stream of jobs (gangs and single pods) with arrival times and runtimes
    arms       A kube-scheduler alone, A100 the same scoring every node, B + railyard, C native
               gang + topology (the run's Kubernetes version), D Kueue TAS
    cpu        CPU seconds of each cluster process from /proc (issue 13)
    runner     one arm: cluster up, submit on schedule, watch bindings, scrape metrics, cluster down
    analysis   the numbers, from the observed bindings and node labels only (no railyard code)
    report     results.json, report.md, PNG plots

Nothing here imports railyard's planner or service: the placement quality numbers are computed
from node labels and what the API server reported, so they judge railyard from the outside.
"""
