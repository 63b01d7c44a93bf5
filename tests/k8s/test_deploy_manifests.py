"""deploy/ as files: the Deployment's arguments are ones ``gpupool`` accepts, the
kustomization lists every manifest, each CRD serves v1alpha1 (gpupool.io, elasticgpu.io)
with status."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import yaml

from gpupool.k8s.cli import add_parsers

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
    listed = set(yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())["resources"])
    present = {str(p.relative_to(DEPLOY)) for p in DEPLOY.rglob("*.yaml")
               if p.name != "kustomization.yaml" and "grafana" not in p.parts}
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
    assert kinds == {("gpupool.io", k) for k in ("ResourceFlavor", "Cohort", "ClusterQueue",
                                                 "LocalQueue")} | \
        {("elasticgpu.io", k) for k in ("ElasticGPUClass", "ElasticGPUClaim", "ElasticGPU")}
