"""railyard's exceptions. Every message is what an operator reads; say what to do.

    RailyardError
     ├── BadRequest          the request cannot be read (400 / INVALID_ARGUMENT)
     ├── Overloaded          a cap on held binds or in-flight requests is reached (503 / RESOURCE_EXHAUSTED)
     ├── NotReady            the watch cache has not listed everything yet; the scheduler retries the pod
     │    ├── Settling       a gang of undeclared size may still grow; the scheduler retries the pod
     │    └── Preferring     a gang waits for its preferred level; the scheduler retries the pod
     ├── UnknownPod          a query names a pod railyard has not seen (gRPC NOT_FOUND)
     ├── PermitRejected      the gang gate at bind said Reject; the scheduler retries the pod
     │    ├── GangTimedOut   the gang's deadline passed before every member waited at permit
     │    └── GangUnreserved the gang's reservation was given back (member or node gone, plan again)
     └── BindingFailed       the API server refused a Binding after retries

A placement "no" is not an exception: it is a FailedNodes entry with numbers.
Each transport translates these once (HTTP server, gRPC interceptor).
"""


class RailyardError(Exception):
    """Base of every error railyard raises on purpose."""


class BadRequest(RailyardError):
    pass


class Overloaded(RailyardError):
    pass


class NotReady(RailyardError):
    pass


class Settling(NotReady):
    """An error, not a placement "no": kube-scheduler retries an erroring pod after its
    backoff (1 s doubling to 10 s), while a pod the extender filtered out waits for a cluster
    event, up to 5 minutes, and nothing happens when a gang stops growing."""


class Preferring(NotReady):
    """A gang waits, holding nothing, for a domain of its preferred level (``GangSpec.
    preferred_wait_seconds``). An error for the reason ``Settling`` is: the scheduler retries
    the pod after its backoff, so the gang is planned again within about 10 s of a domain
    freeing or of its wait ending, which is no cluster event."""


class UnknownPod(RailyardError):
    pass


class PermitRejected(RailyardError):
    pass


class GangTimedOut(PermitRejected):
    pass


class GangUnreserved(PermitRejected):
    pass


class BindingFailed(RailyardError):
    pass
