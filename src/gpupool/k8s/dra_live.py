"""Whether the API server serves Dynamic Resource Allocation (``resource.k8s.io``), said once
at start-up.

gpupool maps its Elastic GPU objects onto DRA's kinds (``k8s/dra.py``, pure). It reads no DRA
object from a cluster yet: on a server without the group (the test server, v1.20, and every
Kubernetes before 1.34's ``resource.k8s.io/v1``) DRA is simply off, and on one with it the log
says that DRA drivers' devices are not counted, so an operator is not left guessing.
"""

from __future__ import annotations

import logging

from gpupool.k8s.kube import Kube, KubeError

__all__ = ["GROUP", "announce_dra", "dra_message", "dra_versions"]

log = logging.getLogger("gpupool.k8s.dra")
GROUP = "resource.k8s.io"


async def dra_versions(kube: Kube) -> list[str]:
    """The ``resource.k8s.io`` versions the server serves (``[]``: none)."""
    try:
        group = await kube.request("GET", f"/apis/{GROUP}")
    except KubeError as exc:
        if exc.status == 404:
            return []
        raise
    return [str(v.get("version")) for v in group.get("versions") or ()]


def dra_message(versions: list[str]) -> str:
    if not versions:
        return (
            f"DRA is off: the API server serves no {GROUP} (Kubernetes 1.34 and later "
            f"serve {GROUP}/v1); GPUs are read from node allocatable and HAMi's register "
            "annotation, Elastic GPU objects from elasticgpu.io"
        )
    return (
        f"the API server serves {GROUP} ({', '.join(versions)}); gpupool does not read "
        "ResourceSlices or ResourceClaims yet: devices of DRA drivers are not counted, "
        "and pods that claim them are not gpupool's to place"
    )


async def announce_dra(kube: Kube) -> list[str]:
    """Logs whether DRA is served; the versions served."""
    try:
        versions = await dra_versions(kube)
    except KubeError as exc:
        log.warning("could not tell whether %s is served: %s", GROUP, exc)
        return []
    log.info("%s", dra_message(versions))
    return versions
