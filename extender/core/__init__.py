"""railyard's pure core: topology, counters, gang placement, the gang permit decision.

No Kubernetes client, no sockets, no threads, no clocks: facts and time are passed in.
Nothing here knows a label key or an object shape; ``extender.adapters.kubeobjects``
translates Kubernetes objects into the facts of ``model.py`` where they enter.
Imports: this package and the standard library only (``tests/test_layers.py``).

Modules, inner first:

- ``model``        the facts: levels, nodes, pods, groups, members, gangs.
- ``topology``     the static tree, rebuilt once per node-set generation.
- ``state``        cheap counters (free GPUs per node) and reservations; a live ``View``.
- ``planner``      whole-gang placement against a view of the counters.
- ``gangspec``     a gang's request from what its members and group declare, bounded.
- ``lifecycle``    the gang phases as a (phase, event) table parsed from its drawing.
- ``book``         the gang book: reserve / unreserve / permit -> Allow | Wait | Reject /
                   bindings done / expire, over the state.
- ``pods``         the index of pending, bound and filtered pods.
- ``single``       filter and scores for pods of no gang.
- ``preemption``   which of the scheduler's preemption candidates stand (pods of no gang).
- ``eviction``     which domain a gang that cannot be placed clears, and whom it evicts.
- ``verdicts``     results and every sentence an operator reads, built from numbers.
- ``ports``        the Protocols the service needs (Binder, Observer, LabelScheme).
- ``errors``       railyard's exception hierarchy.
"""
