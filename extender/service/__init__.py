"""The live extender, one job a module, every part sharing one small ``Context`` (no
transport, no decision of its own: the core decides, the adapters translate).

    answers.py     the read-only answers as frozen values (what-if plans, explanations, gang
                   views and changes); the adapters make them JSON or protobuf.
    context.py     the shared context: the lock around the core's state, the ports, the
                   settings and the clock; ``tick`` (time applied) and ``changed`` (the
                   book's notices sent, waiters woken).
    sink.py        the cache sink: nodes, pods, groups and DRA objects from the watch cache;
                   readiness, level detection, pods sized by their claims.
    gate.py        the permit gate: bind calls held until their gang's decision, the
                   Binding round marked, the Binding burst, retries, compensation.
    preemption.py  a high-priority gang's preemption: the domain reserved, the victims
                   evicted through the Eviction API, a refusal choosing again.
    recovery.py    Binding rounds another railyard left partly bound, finished or undone.
    release.py     gated gang members released whole: planned from the watch, each nominated
                   to its planned node, then the scheduling gate lifted.
    whatif.py      what-if planning (``railyard plan``, PlanGang) and the read-only answers
                   (ExplainPod, /debug/gangs, WatchGangs).
    topoview.py    the live topology view's snapshot: the cache copied under the lock.
    verbs.py       kube-scheduler's verbs: filter, prioritize, preempt, bind.
    extender.py    ``TopologyExtender``: the service as the adapters see it, each call
                   handed to its part.
"""

from extender.service.extender import TopologyExtender

__all__ = ["TopologyExtender"]
