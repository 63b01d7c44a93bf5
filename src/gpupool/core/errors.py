"""The exception tree of gpupool.

GpupoolError
 +-- ConfigError        profile, quota tree, flags: the operator must fix configuration
 +-- InvalidJobError    a job that can never run as written (a share over 100 %, ...)
 +-- NotFoundError      unknown job, queue or node
 +-- ConflictError      a change that contradicts the state (a node added twice, a bind
 |                      onto capacity that is already taken)
 +-- TraceError         a trace row that cannot be read: file, line, column, value
 +-- AdapterError       the outside world failed (Kubernetes API, disk); cause chained

"Does not fit" is not an error: placement answers with a ``Status``. Errors are for input
that is wrong, and each message names what was expected, what was found and where.
"""

from __future__ import annotations


class GpupoolError(Exception):
    """Root of every error gpupool raises on purpose."""


class ConfigError(GpupoolError):
    """Configuration the operator must fix: a profile, a quota tree, a flag.

    Where the problem is one field, ``field`` is its path (``spec.resourceGroups[0].flavors``),
    ``value`` what was given, ``rule`` what it must satisfy and ``where`` the object or
    document it is in, so that callers (a status condition, an Event) need not parse the
    message; the message stays the one line a person reads.
    """

    def __init__(self, message: str, *, field: str | None = None, value: object = None,
                 rule: str | None = None, where: str | None = None,
                 document: tuple[str, str] | None = None) -> None:
        super().__init__(message)
        self.field = field
        self.value = value
        self.rule = rule
        self.where = where
        self.document = document
        """(kind, name) of the object the problem is in, where it is one (``namespace/name``
        for a namespaced one), so that its object can be marked."""


class InvalidJobError(GpupoolError):
    """A job that can never run as written.

    ``field`` is the path of the offending field (``pod_sets[0].gpu.gpu_milli``), ``value``
    what was given and ``rule`` what it must satisfy.
    """

    def __init__(self, field: str, value: object, rule: str, job: str | None = None) -> None:
        self.field = field
        self.value = value
        self.rule = rule
        self.job = job
        where = f"job {job}: " if job else ""
        super().__init__(f"{where}{field}={value!r}: {rule}")


class NotFoundError(GpupoolError):
    """An unknown job, queue, node or plugin name."""


class ConflictError(GpupoolError):
    """A change that contradicts the current state."""


class TraceError(GpupoolError):
    """A trace row that cannot be read; the message names file, line, column and value."""


class AdapterError(GpupoolError):
    """The outside world failed; the foreign exception is chained as ``__cause__``."""
