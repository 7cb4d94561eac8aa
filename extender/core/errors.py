"""railyard's exceptions. Every message is what an operator reads; say what to do.

    RailyardError
     ├── BadRequest          the request cannot be read (400 / INVALID_ARGUMENT)
     ├── Overloaded          a cap on held binds or in-flight requests is reached (503 / RESOURCE_EXHAUSTED)
     ├── NotReady            the watch cache has not listed everything yet; the scheduler retries the pod
     ├── BindRefused         bind answered with an error; the scheduler retries the pod
     │    ├── GangTimedOut   the gang's deadline passed before minMember members reached bind
     │    └── GangReleased   the gang's reservation was dropped (member or node gone, re-plan)
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


class BindRefused(RailyardError):
    pass


class GangTimedOut(BindRefused):
    pass


class GangReleased(BindRefused):
    pass


class BindingFailed(RailyardError):
    pass
