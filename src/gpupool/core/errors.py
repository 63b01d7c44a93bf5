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

import json
from typing import overload


class GpupoolError(Exception):
    """Root of every error gpupool raises on purpose."""


def show(value: object) -> str:
    """A value as the user wrote it: numbers bare, strings in double quotes (JSON), long
    values cut to 80 characters."""
    if isinstance(value, str | int | float | bool) or value is None:
        return json.dumps(value)
    try:
        text = json.dumps(value, default=str, separators=(", ", ": "))
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def field_text(path: str, value: object, rule: str) -> str:
    """``path=value rule``: the one form a field's error takes."""
    return f"{path}={show(value)} {rule}"


class ConfigError(GpupoolError):
    """Configuration the operator must fix: a profile, a quota tree, a flag, a document.

    Built from its structure, ``ConfigError(field, value, rule, where=...)``: ``field`` is the
    path of the offending field (``spec.resourceGroups[0].flavors``), ``value`` what was given,
    ``rule`` what it must satisfy, ``where`` the file, document or object it is in and
    ``document`` that object's (kind, name); the message is ``where: field=value rule``.
    Callers (an API error's details, a status condition, an Event) read the fields, never the
    message. ``ConfigError(message, field=..., ...)`` keeps a message worded otherwise, with
    or without the structure; a problem of no one field (a cycle among cohorts) has none.
    """

    field: str | None
    value: object
    rule: str | None
    where: str | None
    document: tuple[str, str] | None

    @overload
    def __init__(
        self,
        field: str,
        value: object,
        rule: str,
        /,
        *,
        where: str | None = None,
        document: tuple[str, str] | None = None,
    ) -> None: ...

    @overload
    def __init__(
        self,
        message: str,
        /,
        *,
        field: str | None = None,
        value: object = None,
        rule: str | None = None,
        where: str | None = None,
        document: tuple[str, str] | None = None,
    ) -> None: ...

    def __init__(
        self,
        *args: object,
        field: str | None = None,
        value: object = None,
        rule: str | None = None,
        where: str | None = None,
        document: tuple[str, str] | None = None,
    ) -> None:
        if len(args) == 3:
            field, value, rule = str(args[0]), args[1], str(args[2])
            text = field_text(field, value, rule)
            message = f"{where}: {text}" if where else text
        elif len(args) == 1:
            message = str(args[0])
        else:
            raise TypeError(
                f"ConfigError takes (field, value, rule) or (message), not {len(args)} arguments"
            )
        super().__init__(message)
        self.field = field
        self.value = value
        self.rule = rule
        self.where = where
        self.document = document

    @property
    def structured(self) -> bool:
        """Whether the error names its field and rule."""
        return self.field is not None and self.rule is not None

    def as_details(self) -> dict[str, object]:
        """``{field, value, rule}`` where the error names them (an API error's details);
        empty otherwise."""
        if not self.structured:
            return {}
        return {"field": self.field, "value": self.value, "rule": self.rule}

    def __reduce__(self) -> str | tuple[object, ...]:
        if type(self) is not ConfigError:  # a subclass pickles as its own kind
            return super().__reduce__()
        return (
            _rebuild_config_error,
            (str(self), self.field, self.value, self.rule, self.where, self.document),
        )


def _rebuild_config_error(
    message: str,
    field: str | None,
    value: object,
    rule: str | None,
    where: str | None,
    document: tuple[str, str] | None,
) -> ConfigError:
    return ConfigError(message, field=field, value=value, rule=rule, where=where, document=document)


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
