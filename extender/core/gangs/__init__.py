"""A gang's life, as pure bookkeeping over the cluster state (time is an argument):

    gangspec.py     a gang's request, built from what its members and its group declare.
    lifecycle.py    the gang phases as a (phase, event) table parsed from its drawing.
    settle.py       gangs of undeclared size: planned once they stop growing.
    starvation.py   the starvation bound: a gang that lacked room too long drains a domain.
    warm.py         warm restarts: the domain each workload's gang was last bound in.
    patience.py     a preferred level with a bounded wait: what to plan while it runs.
    record.py       a gang's record (what the book knows of it) and a member's outcome at permit.
    book.py         the gang book: reserve / unreserve / permit -> Allow | Wait | Reject,
                    Bindings done or compensated, leads first, expiry; the only writer of a
                    gang's record.
    recovery.py     Binding rounds another process left partly bound: finish or undo.
    preemption.py   a gang's preemption: which domain it clears and whom it evicts.
"""
