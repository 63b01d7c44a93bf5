"""deploy/optional/measured-use: the kustomize Component that turns on placement by measured
use adds arguments ``gpupool k8s run`` accepts, with the settings the docs state, and
kustomize itself renders it onto the base deployment."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpupool.k8s.cli import add_parsers

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
COMPONENT = DEPLOY / "optional" / "measured-use"


def _parse(args: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_parsers(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args([a.replace("$(POD_NAME)", "gpupool-0") for a in args])


def _container(deployment: dict[str, Any]) -> dict[str, Any]:
    (container,) = [
        c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "gpupool"
    ]
    return container


def test_the_component_adds_measured_arguments_that_parse() -> None:
    comp = yaml.safe_load((COMPONENT / "kustomization.yaml").read_text())
    assert comp["kind"] == "Component"
    (patch,) = comp["patches"]
    assert patch["target"]["kind"] == "Deployment" and patch["target"]["name"] == "gpupool"
    ops = yaml.safe_load((COMPONENT / patch["path"]).read_text())
    deployment = yaml.safe_load((DEPLOY / "deployment.yaml").read_text())
    args = list(_container(deployment)["args"])
    base = _parse(args)
    assert base.prometheus == ""  # the base deployment places by requests
    for op in ops:
        assert op["op"] == "add" and op["path"] == "/spec/template/spec/containers/0/args/-"
        args.append(op["value"])
    parsed = _parse(args)
    assert parsed.prometheus.startswith("http://")
    assert (
        parsed.measured_interval,
        parsed.measured_window,
        parsed.measured_stale_after,
        parsed.measured_hot_pct,
    ) == (15.0, 300.0, 120.0, 80.0)
    assert deployment["spec"]["template"]["spec"]["containers"][0]["name"] == "gpupool"


def test_kustomize_renders_the_component_onto_the_base(tmp_path: Path) -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl (with its kustomize) is not on PATH")
    (tmp_path / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "resources": [os.path.relpath(DEPLOY, tmp_path)],
                "components": [os.path.relpath(COMPONENT, tmp_path)],
            }
        )
    )
    out = subprocess.run(
        [kubectl, "kustomize", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if out.returncode and "unknown command" in out.stderr:
        pytest.skip(f"this kubectl has no kustomize: {out.stderr.strip()}")
    assert out.returncode == 0, out.stderr
    [deployment] = [
        d
        for d in yaml.safe_load_all(out.stdout)
        if d and d["kind"] == "Deployment" and d["metadata"]["name"] == "gpupool"
    ]
    parsed = _parse(_container(deployment)["args"])
    assert parsed.prometheus and parsed.measured_hot_pct == 80.0
    assert parsed.identity == "gpupool-0"  # the base's arguments are kept
