"""The one error Kubernetes translation raises."""

from __future__ import annotations

from gpupool.core.errors import GpupoolError

__all__ = ["TranslateError"]


class TranslateError(GpupoolError):
    """A Kubernetes object gpupool cannot read: the message names the object and field."""
