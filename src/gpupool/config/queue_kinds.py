"""The queue kinds: the apiVersions each is read under, whose defaults apply (Kueue's API group
or gpupool's), and the naming every kind shares.
"""

from __future__ import annotations

from collections.abc import Mapping

from gpupool.config.documents import NAME_RULE, Document, Metadata, is_name

__all__ = [
    "GPUPOOL_API_VERSION",
    "KUEUE_API_VERSIONS",
    "QUEUE_KINDS",
    "attribute",
    "is_kueue",
    "object_name",
]

GPUPOOL_API_VERSION = "gpupool.io/v1alpha1"
KUEUE_API_VERSIONS = ("kueue.x-k8s.io/v1beta1", "kueue.x-k8s.io/v1beta2", "kueue.x-k8s.io/v1")
_KUEUE = (*KUEUE_API_VERSIONS, GPUPOOL_API_VERSION)
QUEUE_KINDS: Mapping[str, tuple[str, ...]] = {
    "ResourceFlavor": _KUEUE,
    "ClusterQueue": _KUEUE,
    "Cohort": ("kueue.x-k8s.io/v1alpha1", *_KUEUE),
    "LocalQueue": _KUEUE,
    "WorkloadPriorityClass": _KUEUE,
    "PriorityClass": ("scheduling.k8s.io/v1",),
    "QueueSettings": (GPUPOOL_API_VERSION,),
    "AdmissionCheck": _KUEUE,
    "ProvisioningRequestConfig": _KUEUE,
}
"""Each queue kind and the apiVersions it is read under (a missing apiVersion is accepted)."""


def is_kueue(doc: Document) -> bool:
    """Whether a document is an object of Kueue's API group (its defaults apply)."""
    version = doc.body.get("apiVersion")
    return isinstance(version, str) and version.startswith("kueue.x-k8s.io/")


def object_name(doc: Document, meta: Metadata) -> str:
    """The object's ``metadata.name``, checked against the naming rule."""
    if not is_name(meta.name):
        raise doc.error("metadata.name", meta.name, NAME_RULE)
    return meta.name


def attribute(camel: str) -> str:
    """The shape's attribute for a field as written (``cohortName`` -> ``cohort_name``)."""
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in camel)
