"""railyard's pure core: topology, counters, gang placement, the gang permit decision.

No Kubernetes client, no sockets, no threads, no clocks: facts and time are passed in.
Nothing here knows a label key or an object shape; ``extender.adapters.kubeobjects``
translates Kubernetes objects into the facts of ``model.py`` where they enter.
Imports: this package and the standard library only (``tests/test_layers.py``).

The shared words at the root, each concern in a package of its own (inner first; every
package's ``__init__`` maps its modules, ``tests/test_layers.py`` keeps the maps whole):

    model.py      the facts: levels, nodes, pods, groups, members, gangs; a pod as the API
                  server's writes name it (PodRef).
    errors.py     railyard's exception hierarchy.
    cluster/      the cluster as railyard holds it: the static tree, the counters and
                  reservations over it, the index of pods.
    placement/    where a gang goes: eligibility, packing, the planner, slices, rails, and
                  each member's address.
    verdicts.py   results and every sentence an operator reads, built from numbers.
    gangs/        a gang's life: its request, the lifecycle table, the gang book (reserve /
                  unreserve / permit -> Allow | Wait | Reject), settling, the starvation
                  bound, recovery of partly bound rounds, gang preemption.
    devices/      GPUs as DRA devices and claims, counted once.
    lone.py       pods of no gang: filter, scores, the veto on kube-scheduler's victims.
    ports.py      the Protocols the service needs, in Kubernetes' words (Bindings, Evictions,
                  Events, Claims; Observer, LabelScheme), and the bundle app.py wires.
"""
