"""``/api/v1/jobs``: submit, list (paged), read, cancel and delete jobs. A tenant works in its
namespaces only; another tenant's jobs do not exist for it."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query
from starlette.concurrency import run_in_threadpool

from gpupool.api.body import body_schema, model_schema, object_body
from gpupool.api.deps import Plane, VisibleJob, Who, writable_namespace
from gpupool.api.models.jobs import JobList, JobView
from gpupool.config.jobs import JobDocument
from gpupool.control import views
from gpupool.control.plane import JobRecord
from gpupool.control.wire import times

router = APIRouter(prefix="/api/v1/jobs", tags=["jobs"])
Body = Annotated[dict[str, Any], Depends(object_body)]
PHASES = ("Pending", "Running", "Succeeded", "Failed", "Cancelled")
_ONE_PHASE = "(" + "|".join(PHASES) + ")"

COMPONENTS: dict[str, Any] = {}
"""Request models the job document refers to, for the OpenAPI document's components."""
_JOB_BODY = body_schema(model_schema(JobDocument, COMPONENTS))


@router.post("", status_code=201, response_model=JobView, openapi_extra=_JOB_BODY)
async def submit(doc: Body, who: Who, plane: Plane) -> dict[str, Any]:
    ns = writable_namespace(who, doc, "submit to")

    def run() -> dict[str, Any]:
        with plane.lock:  # the view in the same hold: no second wait behind a cycle
            rec = plane.submit(doc, namespace=ns, sync=False)
            view = views.job_view(plane, rec, {})
        plane.sync()  # on disk before the 201, outside the lock (one fsync for many)
        return view

    return await run_in_threadpool(run)


@router.get("", response_model=JobList)
def list_jobs(
    who: Who,
    plane: Plane,
    namespace: Annotated[str | None, Query(max_length=63)] = None,
    queue: Annotated[str | None, Query(max_length=127)] = None,
    phase: Annotated[str | None, Query(pattern=f"^{_ONE_PHASE}(,{_ONE_PHASE})*$")] = None,
    limit: Annotated[int, Query(ge=1, le=5000)] = 500,
    after: Annotated[int, Query(ge=0, description="uid to continue after")] = 0,
) -> dict[str, Any]:
    phases = set(phase.split(",")) if phase else None
    with plane.lock:
        recs: list[JobRecord] = []
        matched = 0  # all of them, for remainingItemCount (Kubernetes' ListMeta field)
        for rec in plane.jobs.values():
            ns = rec.request.namespace
            if rec.uid <= after or not who.sees(ns) or (namespace and ns != namespace):
                continue
            if queue and queue not in (
                rec.request.queue,
                rec.cluster_queue,
                rec.request.queue.split("/", 1)[-1],
            ):
                continue
            if phases and rec.phase not in phases:
                continue
            matched += 1
            if len(recs) <= limit:
                recs.append(rec)
        more = len(recs) > limit
        recs = recs[:limit]
        return {
            "items": views.jobs_view(plane, recs),
            "continue": recs[-1].uid if more and recs else None,
            "remainingItemCount": matched - len(recs),
            **times("time", plane.clock.now(), plane.clock.wall_of),
        }


@router.get("/{namespace}/{name}", response_model=JobView)
def get_job(job: VisibleJob, plane: Plane) -> dict[str, Any]:
    return views.job_view(plane, job)


@router.post("/{namespace}/{name}/cancel", response_model=JobView)
def cancel_job(job: VisibleJob, plane: Plane) -> dict[str, Any]:
    """Cancel a pending or running job; a job that has ended is answered as it is."""
    return views.job_view(plane, plane.cancel(job.key), {})


@router.delete("/{namespace}/{name}", response_model=JobView)
def delete_job(job: VisibleJob, plane: Plane) -> dict[str, Any]:
    """Delete a job (cancelled first if it has not ended): its record goes, its name may be
    used again. Answers the job as it was last."""
    return views.job_view(plane, plane.delete(job.key), {})
