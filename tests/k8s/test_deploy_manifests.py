"""deploy/ as files: the Deployment's arguments are ones ``gpupool`` accepts, the
kustomization lists every manifest, each CRD serves v1alpha1 (gpupool.io, elasticgpu.io)
with status; the ClusterRole grants only what the code asks of the API server; the webhook
covers every kind gpupool admits; the kube-scheduler examples call routes gpupool serves;
the extender reads a 5,000-node NodeList."""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpupool.k8s.cli import add_parsers
from gpupool.k8s.extender import MAX_BODY_BYTES, make_app
from gpupool.k8s.translate import ResourceNames

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def docs(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((DEPLOY / name).read_text()) if d]


def test_deployment_arguments_parse() -> None:
    (deployment,) = docs("deployment.yaml")
    assert deployment["spec"]["replicas"] == 2
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    args = [a.replace("$(POD_NAME)", "gpupool-0") for a in container["args"]]
    parser = argparse.ArgumentParser()
    add_parsers(parser.add_subparsers(dest="command", required=True))
    parsed = parser.parse_args(args)
    assert parsed.identity == "gpupool-0" and parsed.extender_port == 8443
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"https": parsed.extender_port, "metrics": parsed.metrics_port}


def test_kustomization_lists_every_manifest() -> None:
    """Every manifest but the examples for other programs (kube-scheduler's configuration,
    cert-manager's objects, Grafana's dashboard) and the PodDisruptionBudget (policy/v1, not
    served by the 1.20 test server; applied on its own)."""
    listed = set(yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())["resources"])
    apart = {"grafana", "kube-scheduler", "optional"}
    present = {
        str(p.relative_to(DEPLOY))
        for p in DEPLOY.rglob("*.yaml")
        if p.name not in ("kustomization.yaml", "pdb.yaml") and not apart & set(p.parts)
    }
    assert listed == present


def test_crds_serve_v1alpha1_with_status() -> None:
    kinds = set()
    for path in sorted((DEPLOY / "crds").glob("*.yaml")):
        (crd,) = docs(f"crds/{path.name}")
        group = crd["spec"]["group"]
        assert group in ("gpupool.io", "elasticgpu.io")
        assert crd["metadata"]["name"] == f"{crd['spec']['names']['plural']}.{group}"
        (version,) = crd["spec"]["versions"]
        assert version["name"] == "v1alpha1" and version["served"] and version["storage"]
        assert version["subresources"] == {"status": {}}
        kinds.add((group, crd["spec"]["names"]["kind"]))
    assert kinds == {
        ("gpupool.io", k) for k in ("ResourceFlavor", "Cohort", "ClusterQueue", "LocalQueue")
    } | {("elasticgpu.io", k) for k in ("ElasticGPUClass", "ElasticGPUClaim", "ElasticGPU")}


SRC = DEPLOY.parent / "src" / "gpupool"


def _rules() -> list[dict[str, Any]]:
    out = []
    for d in docs("rbac.yaml"):
        if d["kind"] in ("ClusterRole", "Role"):
            out.extend(d["rules"])
    return out


def test_rbac_grants_what_the_scheduler_writes() -> None:
    granted = {
        (g, r, v)
        for rule in _rules()
        for g in rule["apiGroups"]
        for r in rule["resources"]
        for v in rule["verbs"]
    }
    for need in [
        ("gpupool.io", "cohorts/status", "patch"),
        ("gpupool.io", "resourceflavors/status", "patch"),
        ("gpupool.io", "clusterqueues/status", "patch"),
        ("gpupool.io", "localqueues/status", "patch"),
        ("autoscaling.x-k8s.io", "provisioningrequests", "patch"),
        ("", "podtemplates", "create"),
        ("", "pods/binding", "create"),
        ("coordination.k8s.io", "leases", "update"),
        ("", "secrets", "create"),
        ("admissionregistration.k8s.io", "mutatingwebhookconfigurations", "update"),
    ]:
        assert need in granted, need


def test_every_granted_resource_is_one_the_code_calls() -> None:
    """Nothing more: each resource a rule names appears in a request path of the code (the
    live test runs the code as the service account, so each path used is also granted)."""
    code = "\n".join(p.read_text() for p in (SRC / "k8s").rglob("*.py"))
    for rule in _rules():
        for res in rule["resources"]:
            plural, _, sub = res.partition("/")
            assert plural in code, f"{res}: no request of the code names {plural}"
            if sub:
                assert f"/{sub}" in code, f"{res}: no request of the code names /{sub}"
    # no wildcard, and no write to what gpupool only reads
    for rule in _rules():
        assert "*" not in rule["verbs"] and "*" not in rule["resources"]
    reads = {
        r
        for rule in _rules()
        for r in rule["resources"]
        if set(rule["verbs"]) <= {"get", "list", "watch"}
    }
    assert {"clusterqueues", "elasticgpuclasses"} <= reads
    # nodes: read, and patched only for HAMi's node lock annotation (k8s/nodelock.py)
    (nodes,) = [rule for rule in _rules() if "nodes" in rule["resources"]]
    assert set(nodes["verbs"]) == {"get", "list", "watch", "patch"}
    assert "hami.io/mutex.lock" in (SRC / "k8s" / "nodelock.py").read_text()


def test_webhook_rules_cover_every_kind_admitted() -> None:
    """The webhook admits pods and ElasticGPUClaims (``Endpoints.admit``); a kind without a
    rule is never sent to it."""
    (hook,) = docs("webhook.yaml")
    covered = {
        (g, r)
        for w in hook["webhooks"]
        for rule in w["rules"]
        for g in rule["apiGroups"]
        for r in rule["resources"]
    }
    assert covered == {("", "pods"), ("elasticgpu.io", "elasticgpuclaims")}
    for w in hook["webhooks"]:
        assert w["clientConfig"]["service"]["path"] == "/mutate"
        assert w["failurePolicy"] == "Ignore" and w["sideEffects"] == "None"
    source = (SRC / "k8s" / "extender.py").read_text()
    assert '"ElasticGPUClaim"' in source


def test_init_container_bootstraps_the_certificate() -> None:
    (deployment,) = docs("deployment.yaml")
    spec = deployment["spec"]["template"]["spec"]
    (init,) = spec["initContainers"]
    parser = argparse.ArgumentParser()
    add_parsers(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(init["args"])
    (main,) = spec["containers"]
    run = parser.parse_args([a.replace("$(POD_NAME)", "x") for a in main["args"]])
    assert args.secret == "gpupool-webhook-tls" and args.webhook == "gpupool"
    assert args.out == run.tls_dir
    mounts = {m["name"]: m["mountPath"] for m in init["volumeMounts"]}
    assert mounts["tls"] == args.out
    (tls,) = [v for v in spec["volumes"] if v["name"] == "tls"]
    assert "emptyDir" in tls  # written by the init container: no Secret volume to wait for
    (hook,) = docs("webhook.yaml")
    assert hook["metadata"]["name"] == args.webhook
    for c in (init, main):
        assert c["resources"]["requests"]["cpu"] and c["resources"]["requests"]["memory"]
        assert c["resources"]["limits"]["memory"]


def test_pod_disruption_budget_keeps_one_replica() -> None:
    (pdb,) = docs("pdb.yaml")
    (deployment,) = docs("deployment.yaml")
    assert pdb["spec"]["selector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
    assert pdb["spec"]["maxUnavailable"] == deployment["spec"]["replicas"] - 1


@pytest.mark.parametrize("name", ["config-v1.yaml", "config-v1beta1.yaml"])
def test_kube_scheduler_examples_call_what_gpupool_serves(name: str) -> None:
    (cfg,) = docs(f"kube-scheduler/{name}")
    version = name.removeprefix("config-").removesuffix(".yaml")
    assert cfg["apiVersion"] == f"kubescheduler.config.k8s.io/{version}"
    assert cfg["kind"] == "KubeSchedulerConfiguration"
    (ext,) = cfg["extenders"]
    routes = {
        r.resource.canonical
        for r in make_app(None).router.routes()  # type: ignore[arg-type]
        if r.resource is not None
    }
    prefix = "/" + ext["urlPrefix"].split("/", 3)[3]
    for verb in ("filterVerb", "prioritizeVerb", "bindVerb"):
        assert f"{prefix}/{ext[verb]}" in routes
    assert ext["enableHTTPS"] and ext["nodeCacheCapable"] is True
    assert {m["name"] for m in ext["managedResources"]} == set(ResourceNames().all())
    assert all(m["ignoredByScheduler"] for m in ext["managedResources"])
    (svc,) = docs("service.yaml")
    assert (
        ext["tlsConfig"]["serverName"]
        == f"{svc['metadata']['name']}.{svc['metadata']['namespace']}.svc"
    )
    # the same extender in both
    (other,) = docs("kube-scheduler/config-v1.yaml")
    assert other["extenders"] == cfg["extenders"]


def _gpu_node(i: int) -> dict[str, Any]:
    """A GPU node as the API server serves it to kube-scheduler: kubelet's status with 50
    images, GPU feature discovery's labels, HAMi's register annotation, managedFields."""
    labels = {f"nvidia.com/gpu.{k}": "value-of-typical-length" for k in range(24)}
    labels.update(
        {
            "kubernetes.io/hostname": f"gpu-node-{i:05d}",
            "node.kubernetes.io/instance-type": "p5.48xlarge",
            "topology.kubernetes.io/zone": "us-east-1a",
        }
    )
    register = [
        {
            "id": f"GPU-{i:08d}-{k:04d}-0000-0000-000000000000",
            "count": 10,
            "devmem": 81559,
            "devcore": 100,
            "type": "NVIDIA-H100-80GB-HBM3",
            "numa": k // 4,
            "health": True,
        }
        for k in range(8)
    ]
    images = [
        {
            "names": [
                f"registry.example.com/team/image-{k}@sha256:{'a' * 64}",
                f"registry.example.com/team/image-{k}:v1.2.{k}",
            ],
            "sizeBytes": 1234567890,
        }
        for k in range(50)
    ]
    managed = [
        {
            "manager": m,
            "operation": "Update",
            "apiVersion": "v1",
            "time": "2026-01-01T00:00:00Z",
            "fieldsType": "FieldsV1",
            "fieldsV1": {f"f:{k}": {} for k in labels},
        }
        for m in ("kubelet", "nvidia-gfd", "hami-device-plugin")
    ]
    return {
        "metadata": {
            "name": f"gpu-node-{i:05d}",
            "labels": labels,
            "annotations": {
                "hami.io/node-nvidia-register": json.dumps(register),
                "node.alpha.kubernetes.io/ttl": "0",
            },
            "managedFields": managed,
        },
        "spec": {"podCIDR": "10.1.0.0/24", "providerID": f"aws:///us-east-1a/i-{i:017d}"},
        "status": {
            "capacity": {
                "cpu": "192",
                "memory": "2097152Mi",
                "nvidia.com/gpu": "80",
                "pods": "110",
            },
            "allocatable": {
                "cpu": "191",
                "memory": "2000000Mi",
                "nvidia.com/gpu": "80",
                "pods": "110",
            },
            "conditions": [
                {
                    "type": t,
                    "status": "False",
                    "reason": f"Kubelet{t}",
                    "message": "kubelet has sufficient resources",
                    "lastHeartbeatTime": "2026-01-01T00:00:00Z",
                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                }
                for t in ("MemoryPressure", "DiskPressure", "PIDPressure", "Ready")
            ],
            "images": images,
        },
    }


def test_extender_reads_a_5000_node_node_list() -> None:
    one = len(json.dumps(_gpu_node(0)))
    assert 5000 * one > 64 << 20  # more than the 64 MiB a body was once limited to
    assert 5000 * one * 3 < MAX_BODY_BYTES  # and room for nodes three times as large


def test_a_body_over_the_limit_is_refused_with_413() -> None:
    from aiohttp.test_utils import TestClient, TestServer

    async def post(size: int) -> tuple[int, str]:
        app = make_app(None, max_body=1 << 20)  # type: ignore[arg-type]
        async with TestClient(TestServer(app)) as client:
            resp = await client.post(
                "/extender/filter", data=b" " * size, headers={"Content-Type": "application/json"}
            )
            return resp.status, await resp.text()

    status, text = asyncio.run(post(2 << 20))
    assert status == 413 and "Maximum request body size 1048576 exceeded" in text
    status, _ = asyncio.run(post(1000))
    assert status == 400  # read (not JSON): under the limit
