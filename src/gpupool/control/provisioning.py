"""The provisioning check's state in the state file (every request, each job's check record
or booking), the events of the requests' conditions, and the requests' API."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from gpupool.control.codec import request_to_json
from gpupool.control.journal import Changes
from gpupool.control.records import (
    CHECK_KIND,
    CLOUD_KIND,
    CLOUD_REQUESTS_KEPT,
    REQUEST_KIND,
    EventReason,
)
from gpupool.core.errors import NotFoundError
from gpupool.core.provisioning import ProvisioningRequest

if TYPE_CHECKING:
    from gpupool.control.plane import ControlPlane


def provisioning_rows(plane: ControlPlane) -> dict[tuple[str, str], dict[str, Any]]:
    """The admission checks' state as state-file rows: every ProvisioningRequest, and per
    job its check record or the booking it runs on."""
    state = plane.scheduler.provisioning_state()
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for req in state.requests:
        rows[(REQUEST_KIND, req.key)] = request_to_json(req)
    for rec in state.records:
        jid = rec.job.id
        rows[(CHECK_KIND, str(jid))] = {
            "state": rec.state.value,
            "request": rec.request,
            "flavor": rec.flavor,
            "attempts": rec.attempts,
            "made": state.made.get(jid, 0),
            "retryAt": rec.retry_at_s,
            "message": rec.message,
        }
    for jid, key in state.bookings.items():
        rows[(CHECK_KIND, str(jid))] = {"booking": key, "made": state.made.get(jid, 0)}
    return rows


def save_provisioning(plane: ControlPlane, changes: Changes) -> None:
    """What changed in the checks' state and the cloud since the last write, into
    ``changes`` (written in the same transaction as the decisions)."""
    rows = provisioning_rows(plane)
    now = plane.clock.now()
    for key, body in rows.items():
        old = plane._saved.get(key)
        if old == body:
            continue
        changes.objects[key] = body
        if key[0] == REQUEST_KIND:
            request_events(key[1], old, body, now, changes)
    for key in plane._saved.keys() - rows.keys():
        changes.objects[key] = None
    plane._saved = rows
    if plane.cloud is not None:
        plane.cloud.prune(CLOUD_REQUESTS_KEPT)
        snap = plane.cloud.snapshot()
        if snap != plane._cloud_saved:
            changes.objects[(CLOUD_KIND, plane.cloud.spec.name)] = snap
            plane._cloud_saved = snap


def request_events(
    key: str, old: Mapping[str, Any] | None, new: Mapping[str, Any], now: float, changes: Changes
) -> None:
    """An event per condition a request gained (and one when it is made)."""
    ns = str(new["namespace"])
    if old is None:
        who = f" for job {new['job']}" if new["job"] else ""
        count = new["pod_sets"][0]["count"]
        changes.event(
            now,
            EventReason.CREATED,
            "ProvisioningRequest",
            key,
            f"asks the cloud for {count} pod(s) at once{who}",
            ns,
        )
    before = {(c["type"], c["status"]) for c in (old or {}).get("conditions", ())}
    for c in new["conditions"]:
        if (c["type"], c["status"]) in before or not c["status"]:
            continue
        bad = c["type"] in ("Failed", "BookingExpired", "CapacityRevoked")
        changes.event(
            now,
            c["type"],
            "ProvisioningRequest",
            key,
            f"{c['reason']}: {c['message']}",
            ns,
            warning=bad,
        )


def provisioning_requests(plane: ControlPlane) -> list[ProvisioningRequest]:
    with plane.lock:
        return plane.scheduler.provisioning_requests()


def provisioning_request(plane: ControlPlane, key: str) -> ProvisioningRequest:
    with plane.lock:
        req = plane.scheduler.provisioning_request(key)
        if req is None:
            raise NotFoundError(f"ProvisioningRequest {key} not found")
        return req


def delete_provisioning_request(plane: ControlPlane, key: str) -> ProvisioningRequest:
    """Cancel a request: the cloud stops provisioning it (or lets its nodes go once
    idle); a job waiting for it backs off and retries."""
    with plane.lock:
        req = plane.provisioning_request(key)
        now = plane.clock.now()
        plane.scheduler.delete_provisioning_request(key, now)
        changes = Changes()
        changes.event(
            now,
            EventReason.DELETED,
            "ProvisioningRequest",
            key,
            "deleted (cancelled)",
            req.namespace,
        )
        save_provisioning(plane, changes)
        plane.journal.commit(changes)
        return req
