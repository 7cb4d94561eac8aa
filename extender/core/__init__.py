"""railyard's pure core: topology, counters, gang placement, gang lifecycle.

No Kubernetes client, no sockets, no threads, no clocks: facts and time are passed in.
Nothing here knows a label key or an object shape; ``extender.adapters.kubeobjects``
translates Kubernetes objects into the facts of ``model.py``.

Modules, inner first:

- ``model``     the facts: levels, nodes, taints, members, gangs.
- ``topology``  the static tree, rebuilt once per node-set generation.
- ``state``     cheap counters (free GPUs per node) and reservations.
- ``planner``   whole-gang placement against a snapshot of the counters.
- ``verdicts``  results and the human-readable reasons built from their numbers.
- ``errors``    railyard's exception hierarchy.
"""
