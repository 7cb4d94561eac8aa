"""One module per extender verb: decode -> handler -> encode, nothing else.

    filter.py      ExtenderArgs -> ExtenderFilterResult.
    prioritize.py  ExtenderArgs -> HostPriorityList.
    bind.py        ExtenderBindingArgs -> ExtenderBindingResult (may block for minutes).
    preempt.py     ExtenderPreemptionArgs -> ExtenderPreemptionResult.

Each offers ``call(handler, translate, body) -> reply`` over parsed JSON, run on a thread;
filter and bind also ``now``, a coroutine for the server's event loop: the same reply, or None
when the handler would have to wait (``NOW``). Errors pass through untouched;
the server translates them in one place.
"""

from extender.adapters.http.verbs import bind, filter, preempt, prioritize

VERBS = {"filter": filter.call, "prioritize": prioritize.call, "bind": bind.call, "preempt": preempt.call}
NOW = {"filter": filter.now, "bind": bind.now}
"""Verbs the server first tries on its event loop, without a thread hop (issue 21 item 5)."""
