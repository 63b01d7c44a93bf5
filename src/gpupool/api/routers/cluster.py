"""``/api/v1/cluster`` (totals, allocation, fragmentation) and its history."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from gpupool.api.deps import Plane, Who
from gpupool.api.models.cluster import Cluster, History
from gpupool.control import views

router = APIRouter(prefix="/api/v1/cluster", tags=["cluster"])


@router.get("", response_model=Cluster)
def cluster(who: Who, plane: Plane) -> dict[str, Any]:
    return views.cluster_view(plane)


@router.get("/history", response_model=History)
def history(who: Who, plane: Plane) -> dict[str, Any]:
    return views.history_view(plane)
