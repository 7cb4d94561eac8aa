"""CLI commands: each module adapts argv to the service and prints results.

    serve.py    ``railyard serve``: the extender, as app.py wires it.
    plan.py     ``railyard plan``: what-if placement over files, offline.
    topology.py ``railyard topology``: the cluster's tree as Slurm's topology files, offline.
    explain.py  ``railyard explain``: why a pod waits, asked of a running extender over gRPC.
    output.py   ``-o table|json`` and aligned tables, for plan and explain.
    demo.py     ``railyard demo``: a local cluster, the extender and sample gangs, then a report.
"""
