"""Quotas of a queue document: resource names and units, resource groups, limits.

A quota's resource name says which core resource it limits and in what unit
(:data:`RESOURCE_NAMES`); a ClusterQueue's or Cohort's ``resourceGroups`` become the core's
``FlavorQuotas`` under Kueue's rules (a flavor, and a resource, in one group; every flavor of a
group lists its ``coveredResources``; lending no more than the nominal quota).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from gpupool.config.documents import Document, field_error, show
from gpupool.config.quantity import (
    cpu_milli,
    gpu_memory_mib,
    gpu_milli,
    memory_mib,
    whole_number,
)
from gpupool.config.queue_shapes import ResourceGroupSpec, ResourceQuotaSpec
from gpupool.core.errors import ConfigError
from gpupool.core.quota import FlavorQuotas, Quota, Resource

__all__ = ["RESOURCE_NAMES", "ResourceName", "convert", "quotas", "resource_name"]


@dataclass(frozen=True, slots=True)
class ResourceName:
    """How a resource name in a quota maps to a core resource, and in what unit."""

    resource: Resource
    convert: Callable[[object, str], int]
    unit: str


_GPUS = ResourceName(
    Resource.GPU_MILLI, gpu_milli, 'GPUs of compute, whole or fractional (8 -> 8000, "0.5" -> 500)'
)
_MILLI = ResourceName(Resource.GPU_MILLI, whole_number, "milli-GPU, 1000 a whole GPU")
_GPU_MEMORY = ResourceName(
    Resource.GPU_MEMORY_MIB, gpu_memory_mib, "GPU memory: MiB when bare, bytes with a suffix (80Gi)"
)
RESOURCE_NAMES: Mapping[str, ResourceName] = {
    "nvidia.com/gpu": _GPUS,
    "gpu": _GPUS,
    "gpupool.io/gpu-milli": _MILLI,
    "gpu_milli": _MILLI,
    "gpupool.io/cards": ResourceName(Resource.GPU, whole_number, "whole cards"),
    "nvidia.com/gpumem": _GPU_MEMORY,
    "gpu_memory": _GPU_MEMORY,
    "cpu": ResourceName(Resource.CPU_MILLI, cpu_milli, 'CPUs (2, "500m")'),
    "memory": ResourceName(Resource.MEMORY_MIB, memory_mib, 'bytes ("64Gi")'),
}
"""Quota resource names. ``nvidia.com/gpu`` counts GPUs of compute: a queue's 8 GPUs are
8000 milli-GPU, used as whole cards or as slices; ``gpupool.io/cards`` counts whole cards."""


def resource_name(name: str, path: str = "name") -> ResourceName:
    """The core resource and unit of a quota resource name; ConfigError for any other."""
    try:
        return RESOURCE_NAMES[name]
    except KeyError:
        raise field_error(
            path, name, "is not a known resource; known: " + ", ".join(RESOURCE_NAMES)
        ) from None


def _resource(name: object, path: str) -> ResourceName:
    if not isinstance(name, str):
        raise field_error(path, name, "should be a resource name")
    return resource_name(name, path)


def convert(doc: Document, fn: Callable[[object, str], Any], value: object, path: str) -> Any:
    try:
        return fn(value, path)
    except ConfigError as exc:
        raise doc.problem(str(exc), exc) from exc


def quotas(
    doc: Document, groups: list[ResourceGroupSpec], limits_rule: str | None, non_preemptive: bool
) -> tuple[tuple[FlavorQuotas, ...], list[tuple[str, str]]]:
    """The flavors' quotas of a ClusterQueue or Cohort, and (path, flavor) references.

    Kueue's rules: a flavor, and a resource, belong to one resource group; every flavor of a
    group lists the group's ``coveredResources``. ``limits_rule``, when set, is why borrowing
    and lending limits are not allowed here.
    """
    out: list[FlavorQuotas] = []
    refs: list[tuple[str, str]] = []
    flavor_at: dict[str, str] = {}
    resource_group: dict[str, int] = {}
    for g, group in enumerate(groups):
        gp = f"spec.resourceGroups[{g}]"
        covered = group.covered_resources
        for f, fq in enumerate(group.flavors):
            fp = f"{gp}.flavors[{f}]"
            if fq.name in flavor_at:
                raise doc.error(
                    f"{fp}.name",
                    fq.name,
                    f"is listed twice (first at {flavor_at[fq.name]}); a flavor "
                    "belongs to one resource group and appears once in it",
                )
            flavor_at[fq.name] = fp
            refs.append((f"{fp}.name", fq.name))
            quotas: dict[Resource, Quota] = {}
            given: dict[Resource, int] = {}
            names: list[str] = []
            for r, rq in enumerate(fq.resources):
                rp = f"{fp}.resources[{r}]"
                unit: ResourceName = convert(doc, _resource, rq.name, f"{rp}.name")
                if unit.resource in quotas:
                    raise doc.error(
                        f"{rp}.name",
                        rq.name,
                        f"counts {unit.resource} as resources[{given[unit.resource]}]"
                        " does already; give each resource once",
                    )
                given[unit.resource] = r
                other = resource_group.setdefault(rq.name, g)
                if other != g:
                    raise doc.error(
                        f"{rp}.name",
                        rq.name,
                        f"is already covered by spec.resourceGroups[{other}]; a "
                        "resource belongs to one resource group",
                    )
                names.append(rq.name)
                quotas[unit.resource] = _quota(doc, rp, rq, unit, limits_rule, non_preemptive)
            if covered is not None and sorted(names) != sorted(covered):
                raise doc.error(
                    f"{fp}.resources",
                    names,
                    f"do not match {gp}.coveredResources={show(covered)}; every "
                    "flavor of a group lists the resources the group covers",
                )
            out.append(FlavorQuotas(fq.name, quotas))
    return tuple(out), refs


def _quota(
    doc: Document,
    rp: str,
    rq: ResourceQuotaSpec,
    unit: ResourceName,
    limits_rule: str | None,
    non_preemptive: bool,
) -> Quota:
    nominal = convert(doc, unit.convert, rq.nominal_quota, f"{rp}.nominalQuota")
    borrowing = lending = None
    if rq.borrowing_limit is not None:
        path = f"{rp}.borrowingLimit"
        borrowing = convert(doc, unit.convert, rq.borrowing_limit, path)
        if limits_rule:
            raise doc.error(path, rq.borrowing_limit, limits_rule)
        if non_preemptive and borrowing > 0:
            raise doc.error(
                path,
                rq.borrowing_limit,
                "is not allowed: spec.nonPreemptive=true, and a non-preemptive "
                "queue cannot borrow, since borrowed capacity must be reclaimable",
            )
    if rq.lending_limit is not None:
        path = f"{rp}.lendingLimit"
        lending = convert(doc, unit.convert, rq.lending_limit, path)
        if limits_rule:
            raise doc.error(path, rq.lending_limit, limits_rule)
        if lending > nominal:
            raise doc.error(
                path,
                rq.lending_limit,
                f"is above nominalQuota={show(rq.nominal_quota)}; one cannot lend "
                "more than one has",
            )
    return Quota(nominal, borrowing, lending)
