"""gpupool's HTTP endpoints: scheduler extender, admission webhook, health and metrics.

Scheduler extender (for clusters that keep kube-scheduler). kube-scheduler posts its
extender JSON (``ExtenderArgs``: ``Pod`` and ``Nodes`` or ``NodeNames``; v1.20 writes the Go
field names, newer ones lower-case tags; both are read) and gpupool answers from its own card
view:

- ``/filter``: the candidate nodes where the pod's GPU request fits on some card (the core's
  filters), the others in ``FailedNodes`` with the core's reason;
- ``/prioritize``: the core's weighted score per node, scaled to kube-scheduler's 0..10;
- ``/bind``: cards chosen on the node kube-scheduler picked (the profile's card plugin), the
  pod's cards taken in the core (``Scheduler.restore``: the decision is kube-scheduler's, so
  queue quotas are accounted but not enforced), then the Binding with gpupool's and HAMi's
  annotations, as the scheduler binds its own pods.

Mutating admission webhook (``/mutate``, ``admission.k8s.io/v1``): a pod asking for GPUs and
left to the default scheduler is routed to gpupool (``spec.schedulerName``); a pod without a
queue gets the default queue label; a pod that can never run (a request HAMi's resource
names cannot express, a slice larger than any card, more GPUs than any node has, an unknown
queue) is refused with the reason, so it is never created. With Elastic GPU objects attached
(``k8s/elastic.py``), a pod's ``elasticgpu.io/egpuc-<container>`` annotations are resolved
into the containers' resources and the claims' node (a missing or unbound claim refuses the
pod), and a new ElasticGPUClaim that no class can serve is refused with the reason. A pod with
alternatives (``gpupool.io/alternatives``, ``k8s/vendors/overlay.py``) is made in the form its
queue would admit now: its accelerator resources, image and environment patched.
"""

from __future__ import annotations

import base64
import json
import logging
import ssl
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from aiohttp import web

from gpupool.core.errors import ConflictError, InvalidJobError, NotFoundError
from gpupool.core.model import Alternative, JobId, NodeName, Placement, Task, TaskId
from gpupool.core.scheduler import Scheduler
from gpupool.k8s.controller import Controller, job_for_pods
from gpupool.k8s.elastic import pod_claims
from gpupool.k8s.translate import (
    QUEUE_LABEL,
    QUEUE_LABELS,
    TranslateError,
    pod_job_id,
)
from gpupool.k8s.vendors.overlay import (
    PodAlternative,
    overlay_patch,
    pod_alternatives,
    pod_in_form,
)

__all__ = ["MAX_BODY_BYTES", "Endpoints", "make_app", "serve_http", "serve_metrics"]

log = logging.getLogger("gpupool.k8s.extender")
MAX_PRIORITY = 10
MAX_BODY_BYTES = 512 << 20
"""The largest request body read: kube-scheduler without ``nodeCacheCapable`` posts the whole
NodeList of the pod's candidate nodes, and a GPU node as the API server serves it (about 50
images in its status, GPU feature discovery's labels, HAMi's register annotation,
managedFields) is some 30-60 KB: 5,000 of them at 64 KiB each is 312 MiB. With
``nodeCacheCapable: true`` (deploy/kube-scheduler/) only the names come, a few hundred KB."""


def _get(d: dict[str, Any], name: str) -> Any:
    """A field of kube-scheduler's extender JSON, whichever case it was written in."""
    if name in d:
        return d[name]
    low = name[0].lower() + name[1:]
    if low in d:
        return d[low]
    return d.get(name.lower())


class Endpoints:
    def __init__(self, controller: Controller) -> None:
        self.c = controller

    # -- extender --------------------------------------------------------------------------

    def _candidates(self, args: dict[str, Any]) -> tuple[list[str], list[dict[str, Any]] | None]:
        nodes = _get(args, "Nodes")
        if nodes and nodes.get("items") is not None:
            items = list(nodes["items"])
            return [n["metadata"]["name"] for n in items], items
        return list(_get(args, "NodeNames") or ()), None

    def _task(self, pod: dict[str, Any]) -> tuple[Scheduler, Task]:
        sched = self.c.sched
        if sched is None:
            raise NotFoundError("gpupool is not leading: no card view to answer from")
        req = self.c.read_request(pod)
        job, _ = job_for_pods(pod_job_id(pod), self.c.opt.default_queue, [("pod", req)], gang=False)
        return sched, next(job.tasks())

    def filter(self, args: dict[str, Any]) -> dict[str, Any]:
        pod = _get(args, "Pod") or {}
        names, items = self._candidates(args)
        try:
            sched, task = self._task(pod)
            fit, status = sched.feasible_nodes(task)
        except (InvalidJobError, TranslateError, NotFoundError) as exc:
            return {"Nodes": None, "NodeNames": None, "FailedNodes": {}, "Error": str(exc)}
        ok = {str(n) for n in fit}
        why = status.message or "the pod's GPU request does not fit on this node"
        failed = {
            n: (why if n in self.c.nodes_by_name else "not a node gpupool knows")
            for n in names
            if n not in ok
        }
        passed = [n for n in names if n in ok]
        if items is not None:
            return {
                "Nodes": {
                    "metadata": {},
                    "items": [i for i in items if i["metadata"]["name"] in ok],
                },
                "NodeNames": None,
                "FailedNodes": failed,
                "Error": "",
            }
        return {"Nodes": None, "NodeNames": passed, "FailedNodes": failed, "Error": ""}

    def prioritize(self, args: dict[str, Any]) -> list[dict[str, Any]]:
        pod = _get(args, "Pod") or {}
        names, _ = self._candidates(args)
        try:
            sched, task = self._task(pod)
            scores = {
                str(n): round(MAX_PRIORITY * s / 100.0) for n, s in sched.node_scores(task).items()
            }
        except (InvalidJobError, TranslateError, NotFoundError):
            return [{"Host": n, "Score": 0} for n in names]
        return [{"Host": n, "Score": scores.get(n, 0)} for n in names]

    async def bind(self, args: dict[str, Any]) -> dict[str, Any]:
        ns = str(_get(args, "PodNamespace"))
        name = str(_get(args, "PodName"))
        node = NodeName(str(_get(args, "Node")))
        try:
            pod = await self.c.kube.request("GET", f"/api/v1/namespaces/{ns}/pods/{name}")
            placement = self._choose(pod, node)
            await self.c.bind_foreign(pod, placement)
        except Exception as exc:  # the error goes back to kube-scheduler, which retries
            log.warning("extender bind %s/%s -> %s: %s", ns, name, node, exc)
            return {"Error": str(exc)}
        return {"Error": ""}

    def _choose(self, pod: dict[str, Any], node: NodeName) -> Placement:
        sched, task = self._task(pod)
        return replace(
            sched.place_on(task, node),
            task=TaskId(f"{pod_job_id(pod)}/ps0-0"),
            job=JobId(pod_job_id(pod)),
        )

    # -- webhook ---------------------------------------------------------------------------

    def admit(self, review: dict[str, Any]) -> dict[str, Any]:
        req = review.get("request") or {}
        uid = req.get("uid", "")
        pod = req.get("object") or {}
        patch: list[dict[str, Any]] = []
        names = self.c.opt.names
        spec = pod.get("spec") or {}
        containers = list(spec.get("initContainers") or ()) + list(spec.get("containers") or ())
        wants_gpu = any(
            n in ((c.get("resources") or {}).get("limits") or {})
            or n in ((c.get("resources") or {}).get("requests") or {})
            for c in containers
            for n in names.all()
        )
        answer: dict[str, Any] = {"uid": uid, "allowed": True}
        elastic = self.c.elastic
        try:
            if elastic is not None and (req.get("kind") or {}).get("kind") == "ElasticGPUClaim":
                if req.get("operation", "CREATE") == "CREATE" and self.c.sched is not None:
                    elastic.admit_claim(pod)
                return {
                    "apiVersion": "admission.k8s.io/v1",
                    "kind": "AdmissionReview",
                    "response": answer,
                }
            if elastic is not None and self.c.sched is not None and pod_claims(pod):
                patch.extend(elastic.admit_pod(pod, names))  # claims into resources
                wants_gpu = True
            alternatives = pod_alternatives(pod)
            if (
                alternatives
                and self.c.sched is not None
                and req.get("operation", "CREATE") == "CREATE"
            ):
                chosen = self._choose_form(pod, alternatives)
                if chosen is not None:  # the pod is made in the form its queue admits now
                    patch.extend(overlay_patch(pod, chosen, names))
                    pod = pod_in_form(pod, chosen, names)
        except (InvalidJobError, NotFoundError, ConflictError) as exc:
            return {
                "apiVersion": "admission.k8s.io/v1",
                "kind": "AdmissionReview",
                "response": {
                    "uid": uid,
                    "allowed": False,
                    "status": {"code": 422, "reason": "Invalid", "message": f"gpupool: {exc}"},
                },
            }
        if wants_gpu:
            try:
                self._check(pod)
            except (InvalidJobError, TranslateError, NotFoundError) as exc:
                answer = {
                    "uid": uid,
                    "allowed": False,
                    "status": {"code": 422, "reason": "Invalid", "message": f"gpupool: {exc}"},
                }
                return {
                    "apiVersion": "admission.k8s.io/v1",
                    "kind": "AdmissionReview",
                    "response": answer,
                }
            if spec.get("schedulerName") in (None, "", "default-scheduler"):
                op = "replace" if "schedulerName" in spec else "add"
                patch.append(
                    {"op": op, "path": "/spec/schedulerName", "value": self.c.opt.scheduler_name}
                )
            labels = (pod.get("metadata") or {}).get("labels")
            if not any((labels or {}).get(k) for k in QUEUE_LABELS):
                if labels is None:
                    patch.append(
                        {
                            "op": "add",
                            "path": "/metadata/labels",
                            "value": {QUEUE_LABEL: self.c.opt.default_queue},
                        }
                    )
                else:
                    patch.append(
                        {
                            "op": "add",
                            "path": "/metadata/labels/" + QUEUE_LABEL.replace("/", "~1"),
                            "value": self.c.opt.default_queue,
                        }
                    )
        if patch:
            answer["patchType"] = "JSONPatch"
            answer["patch"] = base64.b64encode(json.dumps(patch).encode()).decode()
        return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": answer}

    def _choose_form(
        self, pod: dict[str, Any], alternatives: list[PodAlternative]
    ) -> PodAlternative | None:
        """The alternative the pod's queue would admit now (flavors in the queue's order,
        the pod's own form first in each); None for its own form, or when no form fits."""
        sched = self.c.sched
        assert sched is not None
        meta = pod.setdefault("metadata", {})
        meta.setdefault("name", meta.get("generateName", "pod"))
        own = self.c.read_request(pod)
        forms = [
            (a, self.c.read_request(pod_in_form(pod, a, self.c.opt.names))) for a in alternatives
        ]
        job, _ = job_for_pods(
            pod_job_id(pod), self.c.resolve_queue(pod), [("pod", own)], gang=False
        )
        job = replace(job, alternatives=tuple(Alternative(a.name, r.gpu) for a, r in forms))
        form = sched.admissible_form(job)
        if not form:
            return None
        return next(a for a in alternatives if a.name == form)

    def _check(self, pod: dict[str, Any]) -> None:
        """Raises when the pod can never run here; quiet when it can (or when there is no
        card view yet to tell)."""
        sched = self.c.sched
        req = self.c.read_request(pod)
        if sched is None:
            return
        meta = pod.setdefault("metadata", {})
        meta.setdefault("name", meta.get("generateName", "pod"))
        self.c.resolve_queue(pod)
        job, _ = job_for_pods(pod_job_id(pod), self.c.opt.default_queue, [("pod", req)], gang=False)
        sched.validate(job)


def _json_handler(fn: Any) -> Any:
    async def handle(request: web.Request) -> web.Response:
        try:
            body = await request.json()
        except json.JSONDecodeError:
            return web.json_response({"Error": "request body is not JSON"}, status=400)
        result = fn(body)
        if hasattr(result, "__await__"):
            result = await result
        return web.json_response(result)

    return handle


def make_app(controller: Controller, max_body: int = MAX_BODY_BYTES) -> web.Application:
    ep = Endpoints(controller)
    app = web.Application(client_max_size=max_body)
    for prefix in ("", "/extender", "/scheduler"):
        app.router.add_post(f"{prefix}/filter", _json_handler(ep.filter))
        app.router.add_post(f"{prefix}/prioritize", _json_handler(ep.prioritize))
        app.router.add_post(f"{prefix}/bind", _json_handler(ep.bind))
    app.router.add_post("/mutate", _json_handler(ep.admit))

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def readyz(_: web.Request) -> web.Response:
        # only the leader is ready, so a Service for the extender and webhook reaches it
        ready = controller.ready()
        return web.Response(text="ok" if ready else "not leading", status=200 if ready else 503)

    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", _metrics_handler(controller))
    return app


async def serve_http(
    controller: Controller, port: int, *, host: str = "0.0.0.0", tls_dir: str | None = None
) -> web.AppRunner:
    """Serves the extender, the webhook and health (HTTPS when ``tls_dir`` is given)."""
    runner = web.AppRunner(make_app(controller), access_log=None)
    await runner.setup()
    ctx = None
    if tls_dir:
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(Path(tls_dir) / "tls.crt", Path(tls_dir) / "tls.key")
    await web.TCPSite(runner, host, port, ssl_context=ctx).start()
    return runner


def metrics_text(controller: Controller) -> str:
    s = controller.stats
    sched = controller.sched
    pending = len(sched.pending()) if sched else 0
    running = len(sched.running()) if sched else 0
    lines = [
        "# HELP gpupool_k8s_binds_total Pods bound through the API server.",
        "# TYPE gpupool_k8s_binds_total counter",
        f"gpupool_k8s_binds_total {s.binds}",
        "# HELP gpupool_k8s_bind_failures_total Binds that failed for good.",
        "# TYPE gpupool_k8s_bind_failures_total counter",
        f"gpupool_k8s_bind_failures_total {s.bind_failures}",
        "# HELP gpupool_k8s_pods_rejected_total Pods rejected as never able to run.",
        "# TYPE gpupool_k8s_pods_rejected_total counter",
        f"gpupool_k8s_pods_rejected_total {s.rejected}",
        "# HELP gpupool_k8s_cycles_total Scheduling cycles run.",
        "# TYPE gpupool_k8s_cycles_total counter",
        f"gpupool_k8s_cycles_total {s.cycles}",
        "# HELP gpupool_k8s_relists_total Watches re-listed after 410 Gone.",
        "# TYPE gpupool_k8s_relists_total counter",
        f"gpupool_k8s_relists_total {controller.pod_informer.relists}",
        "# HELP gpupool_jobs_pending Jobs waiting in gpupool's queues.",
        "# TYPE gpupool_jobs_pending gauge",
        f"gpupool_jobs_pending {pending}",
        "# HELP gpupool_jobs_running Jobs holding cards.",
        "# TYPE gpupool_jobs_running gauge",
        f"gpupool_jobs_running {running}",
        "# HELP gpupool_k8s_leader 1 while this replica holds the lease.",
        "# TYPE gpupool_k8s_leader gauge",
        f"gpupool_k8s_leader {int(controller.is_leader())}",
        f"# generated {time.time():.0f}",
    ]
    lines[-1:-1] = _pending_reasons(sched.pending_reasons() if sched else {})
    text = "\n".join(lines) + "\n"
    if controller.measured is not None:
        from gpupool.k8s.measured import metrics_text as measured_text

        text += measured_text(controller, controller.measured)
    return text


def _pending_reasons(by_plugin: dict[str, int]) -> list[str]:
    """``gpupool_pending_reasons{plugin}``, as ``gpupool serve`` reports it."""
    return [
        "# HELP gpupool_pending_reasons Pending jobs by the plugin (a filter, or a step "
        "of the core such as quota) that holds them back; a job held back by two counts "
        "under both.",
        "# TYPE gpupool_pending_reasons gauge",
        *(f'gpupool_pending_reasons{{plugin="{p}"}} {n}' for p, n in sorted(by_plugin.items())),
    ]


def _metrics_handler(controller: Controller) -> Any:
    async def handle(_: web.Request) -> web.Response:
        return web.Response(
            text=metrics_text(controller), content_type="text/plain", charset="utf-8"
        )

    return handle


async def serve_metrics(controller: Controller, port: int, host: str = "0.0.0.0") -> web.AppRunner:
    app = web.Application()
    app.router.add_get("/metrics", _metrics_handler(controller))
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner
