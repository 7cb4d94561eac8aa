"""Errors from talking to the Kubernetes API server, in railyard's words.

    KubernetesError            a call to the API server failed; the message says which call,
    │                          the HTTP status and the API server's own reason
    ├── Unavailable            no answer, a 5xx or 429: worth retrying after a backoff
    ├── NotFound               404: the object (or the API, e.g. the PodGroup CRD) is not there
    ├── Conflict               409: a precondition failed (pod already bound, UID changed)
    └── Gone                   410: a watch resourceVersion is too old; relist

The kubernetes client's ApiException and urllib3's errors never leave this package.
"""

from __future__ import annotations


class KubernetesError(Exception):
    """A call to the Kubernetes API server failed."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


class Unavailable(KubernetesError):
    """The API server did not answer, or answered 5xx/429."""


class NotFound(KubernetesError):
    """404."""


class Conflict(KubernetesError):
    """409: a precondition (UID, resourceVersion, already bound) failed."""


class Gone(KubernetesError):
    """410: the resourceVersion is too old."""


def error_for_status(status: int, message: str) -> KubernetesError:
    if status == 404:
        return NotFound(message, status)
    if status == 409:
        return Conflict(message, status)
    if status == 410:
        return Gone(message, status)
    if status == 0 or status == 429 or status >= 500:
        return Unavailable(message, status)
    return KubernetesError(message, status)
