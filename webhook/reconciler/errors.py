"""The reconciler's own exceptions for API failures.

``kube`` wraps every client-library error into one of these (``raise
NotFound(...) from e``) so that the actuator, cache and elector decide on a
small closed set: done (``NotFound`` on delete), re-read and re-plan
(``Conflict``), relist (``Gone``), retry later (``Transient``), or give up
(anything else).
"""

from __future__ import annotations


class KubeError(Exception):
    """An API request failed. ``status`` is the HTTP status, 0 for no response."""

    def __init__(self, message: str, *, status: int = 0, reason: str = "", method: str = "", path: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.method = method
        self.path = path

    def __str__(self) -> str:
        where = f"{self.method} {self.path}: " if self.method else ""
        code = f"{self.status} {self.reason}: " if self.status else ""
        return f"{where}{code}{self.args[0]}"


class NotFound(KubeError):
    """404: the object (or the whole resource type, e.g. an absent CRD) does not exist."""


class Conflict(KubeError):
    """409 Conflict: stale resourceVersion, or a failed uid precondition."""


class AlreadyExists(KubeError):
    """409 AlreadyExists on create."""


class Gone(KubeError):
    """410: the resourceVersion a watch started from is too old; relist."""


class Forbidden(KubeError):
    """401/403: RBAC does not allow it."""


class Invalid(KubeError):
    """400/422: the request was malformed or the object invalid."""


class Transient(KubeError):
    """No response, 429, or 5xx: worth retrying after a pause."""


class Blocked(KubeError):
    """429 on an eviction: a PodDisruptionBudget forbids it for now (try again in a while, not at once)."""


def error_for(status: int, reason: str, message: str, *, method: str = "", path: str = "") -> KubeError:
    """The exception class a status code and Status ``reason`` call for."""
    cls: type[KubeError]
    if status == 404:
        cls = NotFound
    elif status == 409:
        cls = AlreadyExists if reason == "AlreadyExists" else Conflict
    elif status == 410:
        cls = Gone
    elif status in (401, 403):
        cls = Forbidden
    elif status in (400, 422):
        cls = Invalid
    elif status == 0 or status == 429 or status >= 500:
        cls = Transient
    else:
        cls = KubeError
    return cls(message, status=status, reason=reason, method=method, path=path)
