"""One module per extender verb: decode -> handler -> encode, nothing else.

    filter.py      ExtenderArgs -> ExtenderFilterResult.
    prioritize.py  ExtenderArgs -> HostPriorityList.
    bind.py        ExtenderBindingArgs -> ExtenderBindingResult (may block for minutes).
    preempt.py     ExtenderPreemptionArgs -> ExtenderPreemptionResult.

Each offers ``call(handler, body) -> reply`` over parsed JSON. Errors pass through untouched;
the server translates them in one place.
"""

from extender.adapters.http.verbs import bind, filter, preempt, prioritize

VERBS = {"filter": filter.call, "prioritize": prioritize.call, "bind": bind.call, "preempt": preempt.call}
