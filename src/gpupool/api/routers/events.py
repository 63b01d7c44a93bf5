"""``/api/v1/events``: recent events, or those after a sequence number; a tenant's own
namespaces only."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from gpupool.api.deps import Plane, Who
from gpupool.api.models.jobs import EventList
from gpupool.control import views

router = APIRouter(prefix="/api/v1/events", tags=["events"])


@router.get("", response_model=EventList)
def events(
    who: Who,
    plane: Plane,
    since: Annotated[int, Query(ge=0)] = 0,
    limit: Annotated[int, Query(ge=1, le=5000)] = 200,
    namespace: Annotated[str | None, Query(max_length=63)] = None,
) -> dict[str, Any]:
    spaces: list[str] | None = None if who.is_admin else sorted(who.namespaces)
    if namespace is not None:
        if not who.sees(namespace):
            return {"items": []}
        spaces = [namespace]
    rows = (
        plane.store.events(since, limit, spaces)
        if since
        else plane.store.last_events(limit, spaces)
    )
    return {"items": [views.event_view(e) for e in rows]}
