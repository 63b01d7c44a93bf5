"""Naming jobs on the command line: ``NAME``, ``NAMESPACE/NAME``, ``job NAME ...`` and
``job/NAMESPACE/NAME`` (``-o name``'s form), and the namespace of a job given without one.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpupool.client.http import Client
from gpupool.core.errors import ConfigError, NotFoundError

JOB_WORDS = ("job", "jobs")


def job_targets(targets: Sequence[str]) -> list[str]:
    """Job names from ``job NAME [NAME ...]`` or ``job/NAME`` words (``-o name``'s form,
    kubectl's ``TYPE/NAME``), which may be mixed; ConfigError for anything else."""
    words = list(targets)
    kind_given = bool(words) and words[0].lower() in JOB_WORDS
    if kind_given:
        words = words[1:]
    names = []
    for word in words:
        kind, sep, rest = word.partition("/")
        if sep and kind.lower() in JOB_WORDS and rest:
            names.append(rest)
        elif kind_given and word:
            names.append(word)
        else:
            raise ConfigError(
                f"{word!r}: name jobs as `job NAME` or `job/NAME` "
                "(only jobs can be cancelled or deleted here)"
            )
    if not names:
        raise ConfigError("no job named: give `job NAME [NAME ...]` or `job/NAME`")
    return names


def split_key(name: str, namespace: str | None) -> tuple[str | None, str]:
    if "/" in name:
        ns, _, short = name.partition("/")
        if namespace and ns != namespace:
            raise ConfigError(
                f"{name}: the namespace in the name does not match --namespace {namespace}"
            )
        return ns, short
    return namespace, name


def locate_job(client: Client, name: str, namespace: str | None) -> tuple[str, str]:
    """The namespace and name of a job given as ``NAME`` or ``NAMESPACE/NAME``: the
    namespace given, else the token's one namespace, else the one namespace the token can
    see with a job of that name."""
    ns, short = split_key(name, namespace)
    if ns:
        return ns, short
    spaces = client.whoami().get("namespaces") or []
    if len(spaces) == 1:
        return str(spaces[0]), short
    found = sorted(
        {str(j["metadata"]["namespace"]) for j in client.jobs() if j["metadata"]["name"] == short}
    )
    if not found:
        raise NotFoundError(f"job {short} not found in any namespace this token can see")
    if len(found) > 1:
        raise ConfigError(
            f"job {short} is in namespaces {', '.join(found)}: give -n NAMESPACE or NAMESPACE/NAME"
        )
    return found[0], short
