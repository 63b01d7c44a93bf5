"""The admission check's configuration: Kueue's AdmissionCheck, ProvisioningRequestConfig and
its ``retryStrategy``."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from gpupool.core.errors import ConfigError
from gpupool.core.provisioning.request import (
    DEFAULT_CLASS,
    MAX_RUN_DURATION_S,
    MAX_RUN_PARAMETER,
    PROVISIONING_CONTROLLER,
)


@dataclass(frozen=True, slots=True)
class RetryStrategy:
    """Kueue's ``retryStrategy``: after a failed request the job waits ``delay_s(k)`` before
    its k-th retry; after ``backoff_limit_count`` retries the check is Rejected."""

    backoff_limit_count: int = 3
    backoff_base_s: float = 60.0
    backoff_max_s: float = 1800.0

    def __post_init__(self) -> None:
        if self.backoff_limit_count < 0:
            raise ConfigError(
                f"retryStrategy.backoffLimitCount={self.backoff_limit_count}: must be zero or more"
            )
        if not self.backoff_base_s > 0:
            raise ConfigError(
                f"retryStrategy.backoffBaseSeconds={self.backoff_base_s}: must be positive"
            )
        if self.backoff_max_s < self.backoff_base_s:
            raise ConfigError(
                f"retryStrategy.backoffMaxSeconds={self.backoff_max_s}: must be "
                f"at least backoffBaseSeconds ({self.backoff_base_s})"
            )

    def delay_s(self, retry: int) -> float:
        """Wait before retry number ``retry`` (1-based): base x 2^(retry-1), capped."""
        return min(self.backoff_max_s, self.backoff_base_s * 2.0 ** max(0, retry - 1))


@dataclass(frozen=True, slots=True)
class ProvisioningRequestConfig:
    """Kueue's ProvisioningRequestConfig: the class the requests name, parameters passed to the
    cloud (``maxRunDurationSeconds`` among them, which gpupool also reads), the retries."""

    name: str = "default"
    provisioning_class_name: str = DEFAULT_CLASS
    parameters: Mapping[str, str] = field(default_factory=dict)
    retry: RetryStrategy = RetryStrategy()
    node_selector_details: Mapping[str, str] = field(default_factory=dict)
    """Kueue's ``podSetUpdates.nodeSelector``: node label key -> the key of the request's
    ``status.provisioningClassDetails`` whose value the provisioned nodes carry in that label
    (classes that label their nodes per request, e.g. GKE's ``ResizeRequestName``)."""

    def __post_init__(self) -> None:
        if not self.provisioning_class_name:
            raise ConfigError(
                f"ProvisioningRequestConfig {self.name}: provisioningClassName must not be empty"
            )
        object.__setattr__(self, "parameters", dict(self.parameters))
        object.__setattr__(self, "node_selector_details", dict(self.node_selector_details))
        _ = self.max_run_duration_s  # validated here

    @property
    def max_run_duration_s(self) -> float | None:
        raw = self.parameters.get(MAX_RUN_PARAMETER)
        if raw is None:
            return None
        try:
            value = float(raw)
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and 0 < value <= MAX_RUN_DURATION_S):
            raise ConfigError(
                f"ProvisioningRequestConfig {self.name}: parameters."
                f"{MAX_RUN_PARAMETER}={raw!r}: must be 1..{MAX_RUN_DURATION_S:.0f}"
                " seconds (7 days)"
            )
        return value


@dataclass(frozen=True, slots=True)
class AdmissionCheck:
    """Kueue's AdmissionCheck: a name ClusterQueues list in ``admissionChecks``, the controller
    that decides it, and its parameters. gpupool decides the provisioning-request check."""

    name: str
    controller_name: str = PROVISIONING_CONTROLLER
    config: ProvisioningRequestConfig = ProvisioningRequestConfig()

    def __post_init__(self) -> None:
        if not self.name:
            raise ConfigError("AdmissionCheck: name must not be empty")
        if self.controller_name != PROVISIONING_CONTROLLER:
            raise ConfigError(
                f"AdmissionCheck {self.name}: controllerName="
                f"{self.controller_name!r}: not supported; known: "
                f"{PROVISIONING_CONTROLLER}"
            )
