"""A waiting pod that another of its forms could run as now is made again in that form.

A pod's resources cannot change once it exists (``k8s/vendors/overlay.py``), so the webhook
chooses a pod's form when the pod is created. When that form then cannot be placed (its cards
were taken first) while another form of the pod could be, the controller does what a user
would do by hand: it deletes the waiting pod and creates it again, same name, labels and
annotations, in the form its queue admits now (chosen as the webhook chooses: the queue's
flavors in order, the pod's own form first in each). The new pod goes through the webhook
like any other and is scheduled as a new pod.

What is switched, and what is not:

- only a **bare pod** (no ``ownerReferences``) that is **not bound**, names
  ``gpupool.io/alternatives`` and is **parked** by the cycle just run. A pod of a Job (or of
  any controller) is left as it is: deleting it would make its owner create a replacement
  from the owner's template, and a Job counts a pod deleted before it finished as failed,
  against its ``backoffLimit``; such pods take their form when each is made;
- at most :data:`MAX_SWITCHES` times per pod (``gpupool.io/form-switches`` counts them), so
  two forms that each look free in turn cannot make a pod flap forever;
- the delete carries the pod's UID as a precondition, so a pod made again by someone else
  meanwhile is never deleted; the new pod is created only once the old one is gone.

To give a pod back its own form (it was made as an alternative, and its own form is what
fits now), the webhook records the accelerator containers as written
(``gpupool.io/original-containers``) whenever it patches a pod into an alternative.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from gpupool.core.errors import InvalidJobError, NotFoundError
from gpupool.core.model import Alternative
from gpupool.k8s.hami.requests import ResourceNames
from gpupool.k8s.jobs import job_for_pods
from gpupool.k8s.kube import Kube, KubeError
from gpupool.k8s.translate import pod_job_id
from gpupool.k8s.vendors.freed import FreedEpochs
from gpupool.k8s.vendors.overlay import (
    ALTERNATIVE,
    ALTERNATIVES,
    NVIDIA_NAMES,
    ORIGINAL,
    PodAlternative,
    pod_alternatives,
    pod_in_form,
)

if TYPE_CHECKING:
    from gpupool.core.decisions import Park
    from gpupool.k8s.parts import ControllerParts

__all__ = ["MAX_SWITCHES", "SWITCHES", "FormSwitcher", "admissible", "original_pod", "remade"]

log = logging.getLogger(__name__)

SWITCHES = "gpupool.io/form-switches"
MAX_SWITCHES = 3
"""How many times one pod is made again in another form, at most."""
CREATE_TRIES = 50
"""Tries (0.1 s apart) to create the pod again while the old one is still being removed."""

# the fields a pod is made again with; the rest is the API server's (status, uid, ...)
_META = ("name", "namespace", "labels", "annotations")


def current_form(pod: Mapping[str, Any]) -> str:
    """The form the pod is in: ``gpupool.io/alternative``, or ``""`` for its own."""
    return str(((pod.get("metadata") or {}).get("annotations") or {}).get(ALTERNATIVE) or "")


def original_pod(pod: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``pod`` in its own form, as its user wrote it."""
    out = copy.deepcopy(dict(pod))
    notes = (out.get("metadata") or {}).get("annotations") or {}
    raw = notes.pop(ORIGINAL, None)
    notes.pop(ALTERNATIVE, None)
    if raw:
        for c in json.loads(raw):
            container = out["spec"][c["kind"]][c["index"]]
            for key in ("resources", "image", "env"):
                if c.get(key) is None:
                    container.pop(key, None)
                else:
                    container[key] = c[key]
    return out


def admissible(
    ctl: ControllerParts, pod: Mapping[str, Any], alternatives: list[PodAlternative]
) -> tuple[bool, PodAlternative | None]:
    """Which form of the pod its queue would admit now: (True, None) for its own form,
    (True, alt) for an alternative, (False, None) when none fits now. ``pod`` is in its own
    form (see :func:`original_pod`). The scheduler's snapshot is read, nothing is changed."""
    sched = ctl.sched
    if sched is None:
        return False, None
    names = ctl.opt.names
    own = ctl.read_request(pod)
    forms = [(a, ctl.read_request(pod_in_form(pod, a, names))) for a in alternatives]
    job, _ = job_for_pods(pod_job_id(pod), ctl.resolve_queue(pod), [("pod", own)], gang=False)
    job = replace(job, alternatives=tuple(Alternative(a.name, r.gpu) for a, r in forms))
    form = sched.admissible_form(job)
    if form is None:
        return False, None
    return True, next((a for a in alternatives if a.name == form), None)


def remade(
    pod: Mapping[str, Any], alt: PodAlternative | None, names: ResourceNames = NVIDIA_NAMES
) -> dict[str, Any]:
    """The body of ``pod`` made again in form ``alt`` (None: its own form): its name,
    labels, annotations and spec, unbound, with its switch count one higher."""
    base = original_pod(pod)
    meta = base.get("metadata") or {}
    out: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {k: copy.deepcopy(meta[k]) for k in _META if k in meta},
        "spec": {k: v for k, v in (base.get("spec") or {}).items() if k != "nodeName"},
    }
    notes = out["metadata"].setdefault("annotations", {})
    notes[SWITCHES] = str(switches(pod) + 1)
    if alt is None:
        return out
    return pod_in_form(out, alt, names)


def switches(pod: Mapping[str, Any]) -> int:
    raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(SWITCHES)
    try:
        return max(0, int(raw or 0))
    except ValueError:
        return 0


def may_switch(pod: Mapping[str, Any]) -> bool:
    """Whether ``pod`` is one the controller may make again (see the module's docstring)."""
    meta = pod.get("metadata") or {}
    return (
        bool((meta.get("annotations") or {}).get(ALTERNATIVES))
        and not meta.get("ownerReferences")
        and not meta.get("deletionTimestamp")
        and not (pod.get("spec") or {}).get("nodeName")
        and switches(pod) < MAX_SWITCHES
    )


class FormSwitcher:
    """The controller's part: after each cycle, the parked pods another form of which fits
    now are made again in it (each at most once at a time).

    The check (a what-if admission of every form over a snapshot) is made for a pod only when
    capacity was freed or a node changed since its last check found nothing to switch to
    (``k8s/vendors/freed.py``): parked pods are tried again on every pod event, and with
    nothing freed their other forms cannot fit now either."""

    def __init__(self) -> None:
        self.in_flight: set[str] = set()
        self.switched = 0
        self.checks = 0  # admission checks made
        self.epochs = FreedEpochs()
        self.checked: dict[str, int] = {}  # pod key -> epoch of its last check

    def due(
        self, ctl: ControllerParts, parks: Iterable[Park]
    ) -> list[tuple[str, PodAlternative | None]]:
        """(pod key, form) for each parked pod to make again, in the order parked."""
        out: list[tuple[str, PodAlternative | None]] = []
        epoch = self.epochs.look(ctl.sched.node_table()) if ctl.sched is not None else 0
        for key in [k for k in self.checked if ctl.own_pod(k) is None]:
            del self.checked[key]
        for park in parks:
            info = ctl.jobs.get(park.job)
            if info is None or len(info.pods) != 1:
                continue
            key = info.pods[0]
            pod = ctl.own_pod(key)
            if (
                key in self.in_flight
                or pod is None
                or not may_switch(pod)
                or self.checked.get(key) == epoch
            ):
                continue
            self.checked[key] = epoch
            self.checks += 1
            try:
                alternatives = pod_alternatives(pod)
                fits, alt = admissible(ctl, original_pod(pod), alternatives)
            except (InvalidJobError, NotFoundError) as exc:
                log.debug("%s: not switched: %s", key, exc)
                continue
            if fits and (alt.name if alt else "") != current_form(pod):
                self.in_flight.add(key)
                del self.checked[key]  # made again: the new pod is checked afresh
                out.append((key, alt))
        return out

    async def switch(
        self, kube: Kube, ctl: ControllerParts, key: str, alt: PodAlternative | None
    ) -> bool:
        """Deletes the pod (its UID as precondition) and creates it again in ``alt``;
        False when it changed meanwhile (bound, deleted, made again by someone else)."""
        try:
            ns, name = key.split("/", 1)
            path = f"/api/v1/namespaces/{ns}/pods"
            pod = await kube.request("GET", f"{path}/{name}")
            if not may_switch(pod) or current_form(pod) == (alt.name if alt else ""):
                return False
            body = remade(pod, alt, ctl.opt.names)
            uid = (pod.get("metadata") or {}).get("uid")
            await kube.request(
                "DELETE",
                f"{path}/{name}",
                {
                    "apiVersion": "v1",
                    "kind": "DeleteOptions",
                    "gracePeriodSeconds": 0,
                    "preconditions": {"uid": uid},
                },
            )
            for attempt in range(CREATE_TRIES):  # until the old one is gone
                try:
                    await kube.request("POST", path, body)
                    break
                except KubeError as exc:
                    if exc.status != 409 or attempt == CREATE_TRIES - 1:
                        log.error(
                            "%s deleted to switch its form, but not made again: %s; "
                            "its body was %s",
                            key,
                            exc,
                            json.dumps(body),
                        )
                        raise
                    await asyncio.sleep(0.1)
            self.switched += 1
            log.info("%s made again as %s", key, alt.name if alt else "its own form")
            return True
        except KubeError as exc:
            if exc.status not in (404, 409):
                log.warning("%s: switching its form failed: %s", key, exc)
            return False
        finally:
            with contextlib.suppress(KeyError):
                self.in_flight.remove(key)
