"""Realistic Nodes and Pods for the replayed cluster of ``gpupool k8s bench --scale``.

The objects are shaped as a kubelet, kube-controller-manager and ``kubectl apply`` leave them
(``managedFields`` of several managers, a ``last-applied-configuration`` annotation, two
containers with env, mounts, probes and ports, projected volumes, container statuses): a
Pod is about 29 KB of JSON, a Node about 19 KB (images, addresses, nodeInfo, HAMi's
register annotation). The replay server builds them from one template per kind
(:class:`JsonTemplate`), with the name, namespace, UID, node and placement put in.
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

__all__ = [
    "CARD_MIB",
    "GPU_MODEL",
    "SENTINEL",
    "SENTINEL_UID",
    "JsonTemplate",
    "realistic_node",
    "realistic_pod",
]

GPU_MODEL = "NVIDIA-A100-SXM4-80GB"
CARD_MIB = 81920


def _managed(manager: str, operation: str, fields: dict[str, Any]) -> dict[str, Any]:
    return {
        "manager": manager,
        "operation": operation,
        "apiVersion": "v1",
        "time": "2026-11-20T10:00:00Z",
        "fieldsType": "FieldsV1",
        "fieldsV1": fields,
    }


def _pod_fields(n_env: int) -> dict[str, Any]:
    env: dict[str, Any] = {
        f'k:{{"name":"ENV_VAR_NUMBER_{i:03d}"}}': {".": {}, "f:name": {}, "f:value": {}}
        for i in range(n_env)
    }
    return {
        "f:metadata": {
            "f:labels": {f"f:label-{i}": {} for i in range(10)},
            "f:ownerReferences": {".": {}},
        },
        "f:spec": {
            "f:containers": {
                'k:{"name":"main"}': {
                    ".": {},
                    "f:env": env,
                    "f:image": {},
                    "f:imagePullPolicy": {},
                    "f:resources": {"f:limits": {}, "f:requests": {}},
                    "f:volumeMounts": {f'k:{{"mountPath":"/mnt/v{i}"}}': {} for i in range(8)},
                }
            }
        },
    }


def realistic_pod(
    i: int, *, node: str, scheduler: str, namespace: str = "", gpu: bool = True, placement: str = ""
) -> dict[str, Any]:
    """Pod ``i``, about 32 KB of JSON; bound to ``node`` (Running) or pending (``""``)."""
    ns = namespace or f"team-{i % 50:02d}"
    name = f"pod-{i:06d}"
    labels = {f"label-{k}": f"value-{k}" for k in range(10)}
    labels["app"] = f"app-{name}"
    annotations = {
        "example.com/owner": f"user-{ns}",
        "kubectl.kubernetes.io/last-applied-configuration": json.dumps(
            {
                "spec": {
                    "containers": [
                        {
                            "name": "main",
                            "env": [
                                {"name": f"ENV_VAR_NUMBER_{k:03d}", "value": "v" * 40}
                                for k in range(80)
                            ],
                        }
                    ]
                }
            }
        ),
    }
    if placement:
        annotations["gpupool.io/placement"] = placement
    limits: dict[str, Any] = {"cpu": "2", "memory": "8Gi"}
    if gpu:
        limits["nvidia.com/gpu"] = "1"
    env = [
        {"name": f"ENV_VAR_NUMBER_{k:03d}", "value": f"value-{k}-" + "x" * 60} for k in range(80)
    ]
    main: dict[str, Any] = {
        "name": "main",
        "image": "registry.example.com/team/trainer:2026.11.1",
        "imagePullPolicy": "IfNotPresent",
        "command": ["python", "-m", "trainer"],
        "args": ["--config", "/etc/trainer/config.yaml", "--epochs", "100"],
        "env": env,
        "ports": [
            {"containerPort": 8080 + k, "protocol": "TCP", "name": f"p{k}"} for k in range(3)
        ],
        "resources": {"requests": {"cpu": "1", "memory": "4Gi"}, "limits": limits},
        "volumeMounts": [{"name": f"v{k}", "mountPath": f"/mnt/v{k}"} for k in range(8)],
        "livenessProbe": {
            "httpGet": {"path": "/healthz", "port": 8080},
            "periodSeconds": 10,
            "timeoutSeconds": 1,
        },
        "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080}},
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
    }
    side = {
        "name": "sidecar",
        "image": "registry.example.com/infra/logger:1.4",
        "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}},
        "env": env[:20],
        "volumeMounts": main["volumeMounts"][:3],
    }
    status: dict[str, Any] = {"phase": "Pending", "qosClass": "Burstable"}
    if node:
        status = {
            "phase": "Running",
            "hostIP": "10.0.0.1",
            "podIP": "10.1.0.1",
            "startTime": "2026-11-20T10:00:00Z",
            "qosClass": "Burstable",
            "conditions": [
                {"type": t, "status": "True", "lastTransitionTime": "2026-11-20T10:00:00Z"}
                for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled")
            ],
            "containerStatuses": [
                {
                    "name": c,
                    "ready": True,
                    "restartCount": 0,
                    "image": "registry.example.com/x:1",
                    "imageID": "docker-pullable://x@sha256:" + "a" * 64,
                    "containerID": "containerd://" + "b" * 64,
                    "state": {"running": {"startedAt": "2026-11-20T10:00:01Z"}},
                }
                for c in ("main", "sidecar")
            ],
        }
    spec: dict[str, Any] = {
        "schedulerName": scheduler,
        "containers": [main, side],
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 30,
        "dnsPolicy": "ClusterFirst",
        "serviceAccountName": "default",
        "priority": 0,
        "tolerations": [
            {
                "key": "node.kubernetes.io/not-ready",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            }
        ],
        "volumes": [
            {
                "name": f"v{k}",
                "projected": {
                    "sources": [
                        {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}}
                    ]
                },
            }
            for k in range(8)
        ],
    }
    if node:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": ns,
            "uid": str(uuid.UUID(int=i + 1)),
            "resourceVersion": "1",
            "creationTimestamp": "2026-11-20T10:00:00Z",
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": f"job-{name}",
                    "uid": str(uuid.UUID(int=i + 1)),
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
            "managedFields": [
                _managed("kubectl-client-side-apply", "Update", _pod_fields(40)),
                _managed("kube-controller-manager", "Update", _pod_fields(20)),
                _managed("kubelet", "Update", {"f:status": {f"f:c{k}": {} for k in range(60)}}),
            ],
        },
        "spec": spec,
        "status": status,
    }


def realistic_node(i: int, *, gpus: int = 8) -> dict[str, Any]:
    """Node ``i`` with ``gpus`` A100s in HAMi's register annotation, about 20 KB of JSON."""
    name = f"node-{i:05d}"
    reg = json.dumps(
        [
            {
                "id": f"GPU-{uuid.UUID(int=i * 64 + g)}",
                "index": g,
                "count": 10,
                "devmem": CARD_MIB,
                "devcore": 100,
                "type": GPU_MODEL,
                "mode": "hami-core",
                "health": True,
            }
            for g in range(gpus)
        ]
    )
    labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "topology.kubernetes.io/zone": f"zone-{i % 3}",
        "nvidia.com/gpu.product": GPU_MODEL,
        "nvidia.com/gpu.count": str(gpus),
        "nvidia.com/gpu.memory": str(CARD_MIB),
        "node.kubernetes.io/instance-type": "p4de.24xlarge",
        **{f"feature.node.kubernetes.io/cpu-{k}": "true" for k in range(30)},
    }
    alloc = {
        "cpu": "96",
        "memory": "1100Gi",
        "pods": "250",
        "ephemeral-storage": "900Gi",
        "nvidia.com/gpu": str(gpus * 10),
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "uid": str(uuid.UUID(int=2 * 10**9 + i)),
            "resourceVersion": "1",
            "creationTimestamp": "2026-11-01T00:00:00Z",
            "labels": labels,
            "annotations": {
                "hami.io/node-nvidia-register": reg,
                "hami.io/node-handshake": "Requesting_2026-11-20 10:00:00",
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
            },
            "managedFields": [
                _managed("kubelet", "Update", {"f:status": {f"f:image{k}": {} for k in range(80)}}),
                _managed(
                    "nfd-master",
                    "Update",
                    {
                        "f:metadata": {
                            "f:labels": {
                                f"f:feature.node.kubernetes.io/cpu-{k}": {} for k in range(30)
                            }
                        }
                    },
                ),
            ],
        },
        "spec": {"providerID": f"aws:///us-east-1a/i-{i:017x}", "podCIDR": "10.2.0.0/24"},
        "status": {
            "capacity": alloc,
            "allocatable": alloc,
            "conditions": [
                {
                    "type": t,
                    "status": "False" if t != "Ready" else "True",
                    "reason": f"Kubelet{t}",
                    "message": f"kubelet says {t} " * 3,
                    "lastHeartbeatTime": "2026-11-20T10:00:00Z",
                    "lastTransitionTime": "2026-11-01T00:00:00Z",
                }
                for t in ("MemoryPressure", "DiskPressure", "PIDPressure", "Ready")
            ],
            "addresses": [
                {"type": "InternalIP", "address": f"10.0.{i // 250}.{i % 250}"},
                {"type": "Hostname", "address": name},
            ],
            "nodeInfo": {
                "kubeletVersion": "v1.30.4",
                "osImage": "Ubuntu 22.04.4 LTS",
                "containerRuntimeVersion": "containerd://1.7.20",
                "kernelVersion": "5.15.0-1063-aws",
                "machineID": "c" * 32,
            },
            "images": [
                {
                    "names": [
                        f"registry.example.com/team/image-{k}@sha256:" + "d" * 64,
                        f"registry.example.com/team/image-{k}:v{k}",
                    ],
                    "sizeBytes": 10**9 + k,
                }
                for k in range(60)
            ],
        },
    }


SENTINEL = 999999
SENTINEL_UID = str(uuid.UUID(int=SENTINEL + 1))


class JsonTemplate:
    """A JSON text cut at its placeholders once, filled by one join per object."""

    def __init__(self, text: str) -> None:
        self.parts = re.split(r"(pod-999999|team-49|@NODE@|@PLACE@|" + SENTINEL_UID + ")", text)

    def fill(self, values: dict[str, str]) -> str:
        return "".join(values.get(p, p) if k % 2 else p for k, p in enumerate(self.parts))
