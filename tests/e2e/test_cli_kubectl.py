"""The CLI's kubectl conventions against a real ``gpupool serve`` (the server and helpers of
test_cli_client): cordon, uncordon and drain; apply -f for queue objects; describe queue;
label selectors, --sort-by, -o jsonpath and custom-columns, --no-headers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from gpupool.client import output
from gpupool.core.errors import ConfigError
from tests.e2e.test_cli_client import (  # noqa: F401 - fixtures
    Run,
    job_file,
    phases,
    rows,
    run,
    server,
    wait_for,
)


def node_of(go: Run, key: str) -> str:
    job = json.loads(go("get", "job", key, "-o", "json")[1])
    return str(job["status"]["placements"][0]["node"])


def test_cordon_uncordon_and_drain(run: Run, tmp_path: Path, server: str) -> None:  # noqa: F811
    assert run("cordon", "t4-0") == (0, "node/t4-0 cordoned\n", "")
    assert rows(run("get", "node", "t4-0")[1])[0]["STATE"] == "cordoned"
    assert run("uncordon", "node/t4-0")[1] == "node/t4-0 uncordoned\n"

    assert (
        run("submit", "-f", str(job_file(tmp_path, "drained", queue="vision", duration="10h")))[0]
        == 0
    )
    wait_for(lambda: phases(server).get("research/drained") == "Running")
    node = node_of(run, "research/drained")
    code, out, _ = run("drain", node)
    assert code == 0 and out.startswith(f"node/{node} drained (") and "back in their queues" in out
    assert rows(run("get", "node", node)[1])[0]["STATE"] == "cordoned"
    # back in its queue, whole, then placed again elsewhere (its node takes nothing new)
    wait_for(lambda: phases(server).get("research/drained") == "Running")
    assert node_of(run, "research/drained") != node
    events = run("get", "events", "research/drained")[1]
    assert "Drained" in events
    run("uncordon", node)
    code, _, err = run("cordon", "no-such-node")
    assert code == 2 and "node no-such-node not found" in err


QUEUES = """\
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: t4-spare}
spec: {nodeLabels: {gpupool.io/flavor: t4}}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: batch}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: t4-spare
      resources: [{name: nvidia.com/gpu, nominalQuota: 2}]
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: batch, namespace: research}
spec: {clusterQueue: batch}
"""


def test_apply_creates_then_configures_queue_objects(run: Run, tmp_path: Path) -> None:  # noqa: F811
    path = tmp_path / "batch.yaml"
    path.write_text(QUEUES)
    code, out, err = run("apply", "-f", str(path))
    assert code == 0, err
    assert out.splitlines() == [
        "resourceflavor/t4-spare created",
        "clusterqueue/batch created",
        "localqueue/research/batch created",
    ]
    docs = list(yaml.safe_load_all(QUEUES))
    docs[1]["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = 3
    path.write_text(yaml.safe_dump_all(docs))
    code, out, _ = run("apply", "-f", str(path))
    assert out.splitlines()[1] == "clusterqueue/batch configured"
    got = json.loads(run("get", "clusterqueue", "batch", "-o", "json")[1])
    assert got["status"]["nominal"]["t4-spare"]["gpuMilli"] == 3000
    job = tmp_path / "job.yaml"
    job.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "gpupool.io/v1alpha1",
                "kind": "Job",
                "metadata": {"name": "x"},
                "spec": {},
            }
        )
    )
    code, _, err = run("apply", "-f", str(job))
    assert code == 2 and "kind='Job': apply takes" in err


def test_describe_queue(run: Run) -> None:  # noqa: F811
    code, out, _ = run("describe", "queue", "llm")
    assert code == 0, out
    assert out.startswith("Name:             llm\n")
    assert "Quota:" in out and "LocalQueues:\n  research/llm" in out
    entitled = next(ln for ln in out.splitlines() if ln.startswith("Entitlement:"))
    assert " GPUs (entitlement: nominal quota first" in entitled, entitled
    assert float(entitled.split()[1]) > 0, entitled  # the queue's GPUs, as the scheduler acts
    quota = out.split("Quota:\n", 1)[1].split("LocalQueues:", 1)[0]
    assert "FLAVOR" in quota and "h100" in quota and "GPUs" in quota and "gpu_milli" not in quota
    assert "Pending jobs:" in out


def test_selectors_sorting_and_templates(run: Run) -> None:  # noqa: F811
    code, out, _ = run("get", "nodes", "-l", "gpupool.io/flavor=t4", "-o", "name")
    assert out.splitlines() == ["node/t4-0", "node/t4-1"]
    code, out, _ = run(
        "get",
        "nodes",
        "-l",
        "gpupool.io/flavor in (t4,a6000),kubernetes.io/hostname!=t4-0",
        "-o",
        "name",
    )
    assert sorted(out.splitlines()) == ["node/a6000-0", "node/a6000-1", "node/t4-1"]
    code, out, _ = run(
        "get",
        "nodes",
        "-o",
        "custom-columns=NAME:.name,CARDS:.gpus[*].index",
        "--sort-by",
        "{.name}",
        "--no-headers",
        "-l",
        "gpupool.io/flavor=t4",
    )
    assert [ln.split() for ln in out.splitlines()] == [["t4-0", "0,1,2,3"], ["t4-1", "0,1,2,3"]]
    code, out, _ = run(
        "get",
        "nodes",
        "-l",
        "gpupool.io/flavor=a6000",
        "-o",
        'jsonpath={range .items[*]}{.name}{"\\n"}{end}',
    )
    assert out == "a6000-0\na6000-1\n"
    code, out, _ = run(
        "get", "nodes", "-l", "gpupool.io/flavor=a6000", "-o", "jsonpath={.items[*].name}"
    )
    assert out == "a6000-0 a6000-1\n"
    code, out, _ = run("get", "jobs", "-A", "--sort-by", ".metadata.name", "--no-headers")
    names = [ln.split()[1] for ln in out.splitlines()]
    assert names == sorted(names) and names
    code, _, err = run("get", "nodes", "-l", "a=b c")
    assert code == 2 and ("cannot read the selector" in err or "expected ','" in err)


@pytest.mark.parametrize(
    ("text", "labels", "want"),
    [
        ("a=b", {"a": "b"}, True),
        ("a==b", {"a": "c"}, False),
        ("a!=b", {}, True),
        ("a", {"a": ""}, True),
        ("!a", {"a": "x"}, False),
        ("a in (x, y)", {"a": "y"}, True),
        ("a notin (x)", {"a": "x"}, False),
        ("a=b,c", {"a": "b"}, False),
    ],
)
def test_label_selectors(text: str, labels: dict[str, str], want: bool) -> None:
    assert output.selector(text)(labels) is want


def test_jsonpath_and_bad_input() -> None:
    obj = {"items": [{"m": {"n": "a", "x.y": 1}}, {"m": {"n": "b"}}]}
    assert output.jsonpath(obj, ".items[*].m.n") == ["a", "b"]
    assert output.jsonpath(obj, "{.items[0].m['x.y']}".strip("{}")) == [1]
    assert output.jsonpath(obj, ".items[5].m") == []
    assert output.template(obj, "{range .items[*]}[{.m.n}]{end}") == "[a][b]"
    with pytest.raises(ConfigError, match="without"):
        output.template(obj, "{range .items[*]}x")
    with pytest.raises(ConfigError, match="HEADER:JSONPATH"):
        output.custom_columns("NAME")
    with pytest.raises(ConfigError, match="'!' goes with a key alone"):
        output.selector("!a=b")
