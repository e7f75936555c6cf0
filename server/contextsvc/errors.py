"""Errors the core raises; the RPC layer maps each to one gRPC status.

This is the one tree that decides statuses: `rpc/statuses.py` maps these five classes and
nothing else. A module with errors of its own subclasses one of them (the tool-output store's
`InvalidOutputId` is a `BadInput`, `OutputNotFound` a `NotFound`, `StoreUnavailable` an
`Unavailable`, `LineTooLong` an `Exhausted`).
"""


class BadInput(ValueError):
    """A request field is invalid: maps to INVALID_ARGUMENT with "field: why"."""

    def __init__(self, field: str, why: str):
        super().__init__(f"{field}: {why}")
        self.field = field
        self.why = why


class NotFound(LookupError):
    """A named thing (a stored output) does not exist or has expired: NOT_FOUND."""


class Unavailable(RuntimeError):
    """A dependency (summarizer backend, store) failed: UNAVAILABLE."""


class Exhausted(RuntimeError):
    """A limit was reached (size, concurrency): RESOURCE_EXHAUSTED."""


class DeadlineExceeded(RuntimeError):
    """The caller's deadline passed (or it cancelled) before the work was done: DEADLINE_EXCEEDED."""
