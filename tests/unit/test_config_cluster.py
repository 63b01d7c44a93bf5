"""Cluster specs: node pools become core nodes; every mistake names file, document and field."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from gpupool.config import load_cluster
from gpupool.core import ConfigError, Node, Taint, TaintEffect

SPEC = """\
kind: Cluster
nodePools:
- name: a100
  count: 4
  cpu: 128
  memory: 1Ti
  labels: {gpupool.io/flavor: a100}
  taints: [{key: nvidia.com/gpu, value: present, effect: NoSchedule}]
  gpus: {model: A100-80GB, count: 8, memory: 80Gi, nvlink: mesh}
- name: mig
  cpu: 64
  memory: 512Gi
  gpus:
    model: A100-80GB
    count: 2
    memory: 80Gi
    mig: {profile: 1g.10gb, instances: 7, computeMilli: 140, memory: 10Gi}
- name: cpu
  count: 2
  cpu: "96500m"
  memory: 256Gi
"""


def load(tmp_path: Path, text: str, name: str = "cluster.yaml") -> list[Node]:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return load_cluster(path)


def failure(tmp_path: Path, text: str) -> str:
    with pytest.raises(ConfigError) as info:
        load(tmp_path, text)
    return str(info.value)


def pool(extra: str = "", gpus: str = "") -> str:
    """A one-pool cluster; ``extra`` adds pool fields, ``gpus`` the gpus mapping."""
    text = "nodePools:\n- name: p\n  cpu: 8\n  memory: 32Gi\n"
    if extra:
        text += textwrap.indent(textwrap.dedent(extra), "  ")
    if gpus:
        text += "  gpus:\n" + textwrap.indent(textwrap.dedent(gpus), "    ")
    return text


def test_node_pools_become_nodes(tmp_path: Path) -> None:
    nodes = load(tmp_path, SPEC)
    assert [n.name for n in nodes] == [
        "a100-0",
        "a100-1",
        "a100-2",
        "a100-3",
        "mig-0",
        "cpu-0",
        "cpu-1",
    ]
    a = nodes[0]
    assert (a.cpu_milli, a.memory_mib, a.gpu_count) == (128_000, 1024 * 1024, 8)
    assert a.taints == (Taint("nvidia.com/gpu", "present", TaintEffect.NO_SCHEDULE),)
    assert a.schedulable
    card = a.gpus[3]
    assert (card.index, card.model, card.memory_mib) == (3, "A100-80GB", 80 * 1024)
    assert card.uuid == "GPU-a100-0-3"
    assert card.nvlink_peers == (0, 1, 2, 4, 5, 6, 7)
    assert not card.is_mig
    assert nodes[1].gpus[0].uuid == "GPU-a100-1-0"
    cpu = nodes[5]
    assert (cpu.cpu_milli, cpu.memory_mib, cpu.gpus, cpu.taints) == (96_500, 256 * 1024, (), ())


def test_labels_are_the_pools_plus_hostname_pool_and_gpu_discovery(tmp_path: Path) -> None:
    nodes = load(tmp_path, SPEC)
    assert nodes[1].labels == {
        "kubernetes.io/hostname": "a100-1",
        "gpupool.io/node-pool": "a100",
        "gpupool.io/flavor": "a100",
        "nvidia.com/gpu.product": "A100-80GB",
        "nvidia.com/gpu.count": "8",
        "nvidia.com/gpu.memory": "81920",
    }
    assert nodes[6].labels == {"kubernetes.io/hostname": "cpu-1", "gpupool.io/node-pool": "cpu"}
    mine = load(
        tmp_path,
        pool("labels: {nvidia.com/gpu.product: custom}\n", "{model: T4, count: 1, memory: 16Gi}\n"),
    )
    assert mine[0].labels["nvidia.com/gpu.product"] == "custom"  # the pool's label wins


def test_mig_cards(tmp_path: Path) -> None:
    mig = load(tmp_path, SPEC)[4]
    assert mig.gpu_count == 2
    for card in mig.gpus:
        assert card.is_mig
        (inst,) = card.mig
        assert (inst.profile, inst.count, inst.gpu_milli, inst.memory_mib) == (
            "1g.10gb",
            7,
            140,
            10 * 1024,
        )


def test_mig_compute_defaults_from_the_profile_and_lists_mix_profiles(tmp_path: Path) -> None:
    (node,) = load(
        tmp_path,
        pool(
            gpus="""\
        model: A100-40GB
        count: 1
        memory: 40960
        mig:
        - {profile: 3g.20gb, instances: 1, memory: 20Gi}
        - {profile: 2g.10gb, instances: 2, memory: 10Gi}
        """
        ),
    )
    assert [(m.profile, m.count, m.gpu_milli, m.memory_mib) for m in node.gpus[0].mig] == [
        ("3g.20gb", 1, 428, 20 * 1024),
        ("2g.10gb", 2, 285, 10 * 1024),
    ]


@pytest.mark.parametrize(
    ("nvlink", "count", "peers"),
    [
        ("none", 4, [(), (), (), ()]),
        ("pairs", 4, [(1,), (0,), (3,), (2,)]),
        ("mesh", 3, [(1, 2), (0, 2), (0, 1)]),
    ],
)
def test_nvlink(tmp_path: Path, nvlink: str, count: int, peers: list[tuple[int, ...]]) -> None:
    (node,) = load(
        tmp_path, pool(gpus=f"{{model: X, count: {count}, memory: 1Gi, nvlink: {nvlink}}}\n")
    )
    assert [g.nvlink_peers for g in node.gpus] == peers


def test_kind_is_optional_and_count_defaults_to_one(tmp_path: Path) -> None:
    nodes = load(tmp_path, pool("schedulable: false\n"))
    assert [(n.name, n.schedulable) for n in nodes] == [("p-0", False)]
    assert load(tmp_path, pool("count: 0\n")) == []


def test_documents_may_be_given_as_dicts() -> None:
    docs = [{"nodePools": [{"name": "x", "count": 2, "cpu": 4, "memory": "8Gi"}]}]
    assert [n.name for n in load_cluster(docs)] == ["x-0", "x-1"]
    with pytest.raises(ConfigError, match=r"^mine: document 1: nodePools\[0\]\.cpu=0 must"):
        load_cluster([{"nodePools": [{"name": "x", "cpu": 0, "memory": 1}]}], source="mine")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            pool(gpus="{model: A100, count: 8, memory: 0}\n"),
            "nodePools[0].gpus.memory=0 must be positive",
        ),
        (
            pool(gpus="{model: A100, count: 8}\n"),
            "nodePools[0].gpus.memory: required field is missing",
        ),
        (
            pool(gpus="{model: A100, count: 0, memory: 1Gi}\n"),
            "nodePools[0].gpus.count=0 should be greater than or equal to 1",
        ),
        (pool(gpus="{model: '', count: 1, memory: 1Gi}\n"), 'nodePools[0].gpus.model=""'),
        (
            pool("gpu: {model: A100}\n"),
            "nodePools[0].gpu: unknown field; known fields here: name, count, cpu, memory, "
            "labels, taints, gpus, schedulable",
        ),
        (pool("count: four\n"), 'nodePools[0].count="four" should be a valid integer'),
        (pool("count: -1\n"), "nodePools[0].count=-1 should be greater than or equal to 0"),
        (pool("labels: {zone: 1}\n"), "nodePools[0].labels.zone=1 should be a valid string"),
        (
            pool(gpus="{model: X, count: 2, memory: 1Gi, nvlink: ring}\n"),
            "nodePools[0].gpus.nvlink=\"ring\" should be 'none', 'mesh' or 'pairs'",
        ),
        (
            pool(gpus="{model: X, count: 3, memory: 1Gi, nvlink: pairs}\n"),
            'nodePools[0].gpus.nvlink="pairs" needs an even number of cards (count is 3)',
        ),
        (
            pool("taints: [{key: a, effect: NoRun}]\n"),
            "nodePools[0].taints[0].effect=\"NoRun\" should be 'NoSchedule', 'PreferNoSchedule' "
            "or 'NoExecute'",
        ),
        (
            "nodePools:\n- {name: p, cpu: -2, memory: 1Gi}\n",
            "nodePools[0].cpu=-2 must be zero or more",
        ),
        (
            "nodePools:\n- {name: p, cpu: 2, memory: 64Gx}\n",
            'nodePools[0].memory="64Gx" is not a quantity',
        ),
        (
            "nodePools:\n- {name: p, cpu: true, memory: 1Gi}\n",
            "nodePools[0].cpu=true should be a quantity",
        ),
        (
            "nodePools:\n- {name: P_1, cpu: 2, memory: 1Gi}\n",
            'nodePools[0].name="P_1" must be a lowercase RFC 1123 name',
        ),
        (
            "nodePools:\n- {name: p, cpu: 2, memory: 1Gi}\n- {name: p, cpu: 2, memory: 1Gi}\n",
            'nodePools[1].name="p" is used twice (first by nodePools[0])',
        ),
        ("nodePools: []\n", "nodePools=[] should have at least 1 item"),
        (
            "apiVersion: gpupool.io/v2\nnodePools:\n- {name: p, cpu: 2, memory: 1Gi}\n",
            'apiVersion="gpupool.io/v2" is not one Cluster is read under; use gpupool.io/v1alpha1',
        ),
        (
            pool(
                gpus="{model: X, count: 1, memory: 80Gi, "
                "mig: {profile: 1g.10gb, instances: 8, memory: 10Gi}}\n"
            ),
            'nodePools[0].gpus.mig=["8 x 1g.10gb"] take 1136 milli of compute, more than a '
            "card's 1000",
        ),
        (
            pool(
                gpus="{model: X, count: 1, memory: 40Gi, "
                "mig: {profile: 1g.10gb, instances: 7, memory: 10Gi}}\n"
            ),
            "take 71680 MiB, more than the card's 40960 MiB",
        ),
        (
            pool(
                gpus="{model: X, count: 1, memory: 40Gi, "
                "mig: {profile: small, instances: 2, memory: 1Gi}}\n"
            ),
            'nodePools[0].gpus.mig[0].profile="small" does not say its compute',
        ),
        (
            pool(
                gpus="{model: X, count: 1, memory: 40Gi, "
                "mig: {profile: 1g.5gb, instances: 2, memory: 0}}\n"
            ),
            "nodePools[0].gpus.mig[0].memory=0 must be positive",
        ),
    ],
)
def test_mistakes_name_file_document_field_and_value(
    tmp_path: Path, text: str, expected: str
) -> None:
    message = failure(tmp_path, text)
    assert message.startswith(f"{tmp_path / 'cluster.yaml'}: document 1 ")
    assert expected in message
    assert "\n" not in message


def test_the_document_is_named_by_kind_name_and_line(tmp_path: Path) -> None:
    message = failure(
        tmp_path,
        """\
        # the lab
        apiVersion: gpupool.io/v1alpha1
        kind: Cluster
        metadata: {name: lab}
        nodePools:
        - {name: p, cpu: 0, memory: 1Gi}
        """,
    )
    assert message == (
        f"{tmp_path / 'cluster.yaml'}: document 1 (Cluster lab, line 2): "
        "nodePools[0].cpu=0 must be positive"
    )


def test_one_cluster_per_configuration(tmp_path: Path) -> None:
    one = "kind: Cluster\nnodePools:\n- {name: p, cpu: 2, memory: 1Gi}\n"
    assert (
        "document 2 (Cluster, line 5): a second Cluster document (the first is document 1)"
        in failure(tmp_path, one + "---\n" + one)
    )
    flavor = "apiVersion: kueue.x-k8s.io/v1beta1\nkind: ResourceFlavor\nmetadata: {name: a}\n"
    assert failure(tmp_path, flavor) == (
        f"{tmp_path / 'cluster.yaml'}: no Cluster document (a document with kind: Cluster, "
        "or with nodePools)"
    )


def test_more_problems_are_counted(tmp_path: Path) -> None:
    message = failure(tmp_path, "nodePools:\n- {name: p, cpu: 2, memory: 1Gi, a: 1, b: 2}\n")
    assert message.endswith(
        "nodePools[0].a: unknown field; known fields here: name, count, "
        "cpu, memory, labels, taints, gpus, schedulable (and 1 more problem)"
    )
