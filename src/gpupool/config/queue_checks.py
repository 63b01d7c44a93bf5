"""AdmissionCheck and ProvisioningRequestConfig objects: the checks a ClusterQueue names in
``admissionChecks`` and the configuration of the one gpupool runs, queued provisioning.
"""

from __future__ import annotations

from gpupool.config.documents import Document, parse
from gpupool.config.queue_assembly import QueueObject
from gpupool.config.queue_kinds import attribute, object_name
from gpupool.config.queue_shapes import AdmissionCheckDoc, ProvisioningRequestConfigDoc
from gpupool.core.errors import ConfigError
from gpupool.core.provisioning import (
    PROVISIONING_CONTROLLER,
    AdmissionCheck,
    ProvisioningRequestConfig,
    RetryStrategy,
)

__all__ = ["admission_check", "provisioning_config"]


def admission_check(doc: Document) -> QueueObject:
    d = parse(AdmissionCheckDoc, doc)
    name = object_name(doc, d.metadata)
    spec = d.spec
    ref: str | None = None
    out = QueueObject(
        doc, AdmissionCheck(name), [], "spec.parameters.name", None, controller=spec.controller_name
    )
    if spec.retry_delay_minutes not in (None, 15):  # 15: v1beta1's default
        out.ignored.append(
            (
                "spec.retryDelayMinutes",
                "not acted on: retries follow the ProvisioningRequestConfig's retryStrategy",
            )
        )
    if spec.controller_name != PROVISIONING_CONTROLLER:
        out.ignored.append(
            (
                "spec.controllerName",
                f"{spec.controller_name} is not run by "
                f"gpupool (it runs {PROVISIONING_CONTROLLER}); queues naming "
                "this check admit without it",
            )
        )
        return out
    if spec.parameters is not None:
        if spec.parameters.kind != "ProvisioningRequestConfig":
            raise doc.error(
                "spec.parameters.kind", spec.parameters.kind, "must be ProvisioningRequestConfig"
            )
        ref = spec.parameters.name
    out.ref = ref
    return out


def provisioning_config(doc: Document) -> QueueObject:
    d = parse(ProvisioningRequestConfigDoc, doc)
    name = object_name(doc, d.metadata)
    spec = d.spec
    retry = RetryStrategy()
    rs = spec.retry_strategy
    if rs is not None:
        for path, value in (
            ("backoffLimitCount", rs.backoff_limit_count),
            ("backoffBaseSeconds", rs.backoff_base_seconds),
            ("backoffMaxSeconds", rs.backoff_max_seconds),
        ):
            if value is not None and value < (0 if path == "backoffLimitCount" else 1):
                raise doc.error(
                    f"spec.retryStrategy.{path}",
                    value,
                    "must be zero or more" if path == "backoffLimitCount" else "must be positive",
                )
        retry = RetryStrategy(
            rs.backoff_limit_count
            if rs.backoff_limit_count is not None
            else retry.backoff_limit_count,
            float(rs.backoff_base_seconds)
            if rs.backoff_base_seconds is not None
            else retry.backoff_base_s,
            float(rs.backoff_max_seconds)
            if rs.backoff_max_seconds is not None
            else retry.backoff_max_s,
        )
    if not spec.provisioning_class_name:
        raise doc.error("spec.provisioningClassName", "", "must not be empty")
    try:
        config = ProvisioningRequestConfig(
            name, spec.provisioning_class_name, dict(spec.parameters), retry
        )
    except ConfigError as exc:
        raise doc.problem(str(exc), exc) from exc
    out = QueueObject(doc, config)
    for key, reason in (
        ("managedResources", "not acted on: every resource of the pod set is managed"),
        ("podSetUpdates", "not acted on by the queue configuration"),
        ("podSetMergePolicy", "not acted on: a request holds one pod set"),
    ):
        if getattr(spec, attribute(key)) is not None:
            out.ignored.append((f"spec.{key}", reason))
    return out
