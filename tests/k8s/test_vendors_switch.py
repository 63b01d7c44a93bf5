"""What the controller makes again when a waiting pod switches form (``k8s/vendors/switch.py``):
the pod as written comes back from the recorded containers, the new body keeps name, labels,
annotations and spec but nothing the API server set, and only bare, unbound pods with
alternatives are switched, a bounded number of times."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gpupool.k8s.vendors.overlay import ALTERNATIVE, ORIGINAL, pod_alternatives, pod_in_form
from gpupool.k8s.vendors.switch import (
    MAX_SWITCHES,
    SWITCHES,
    current_form,
    may_switch,
    original_pod,
    remade,
)
from tests.k8s.hami_examples import HYGON_DEFAULT
from tests.k8s.test_vendors import alt_pod


def as_stored(pod: dict[str, Any]) -> dict[str, Any]:
    """The pod as the API server answers it: a UID, a status, bound or not."""
    out = copy.deepcopy(pod)
    out["metadata"].update(uid="u-1", resourceVersion="7", creationTimestamp="t")
    out["status"] = {"phase": "Pending"}
    return out


def test_the_pod_as_written_comes_back_from_any_form() -> None:
    pod = alt_pod()
    (alt,) = pod_alternatives(pod)
    dcu = pod_in_form(pod, alt)
    assert current_form(dcu) == "dcu" and current_form(pod) == ""
    assert original_pod(dcu) == pod
    assert original_pod(pod) == pod  # a pod in its own form is its own original
    again = pod_in_form(dcu, alt)  # an alternative of an alternative keeps the first record
    assert again["metadata"]["annotations"][ORIGINAL] == dcu["metadata"]["annotations"][ORIGINAL]


def test_a_pod_made_again_keeps_what_its_user_wrote_and_nothing_the_server_set() -> None:
    pod = alt_pod()
    pod["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "jobs"}
    (alt,) = pod_alternatives(pod)
    body = remade(as_stored(pod), alt)
    assert set(body) == {"apiVersion", "kind", "metadata", "spec"}
    assert set(body["metadata"]) == {"name", "namespace", "labels", "annotations"}
    assert body["metadata"]["labels"] == pod["metadata"]["labels"]
    notes = body["metadata"]["annotations"]
    assert (notes[ALTERNATIVE], notes[SWITCHES]) == ("dcu", "1")
    assert body["spec"]["containers"][1]["image"] == HYGON_DEFAULT["image"]
    back = remade(as_stored(body), None)  # and back to its own form, counted again
    assert back["spec"] == pod["spec"]
    assert ALTERNATIVE not in back["metadata"]["annotations"]
    assert ORIGINAL not in back["metadata"]["annotations"]
    assert back["metadata"]["annotations"][SWITCHES] == "2"


def test_a_bound_pod_is_made_again_unbound() -> None:
    stored = as_stored(alt_pod())
    stored["spec"]["nodeName"] = "n1"
    assert "nodeName" not in remade(stored, None)["spec"]


@pytest.mark.parametrize(
    ("change", "allowed"),
    [
        (lambda p: None, True),
        (lambda p: p["metadata"]["annotations"].pop("gpupool.io/alternatives"), False),
        (lambda p: p["metadata"].update(ownerReferences=[{"kind": "Job", "name": "j"}]), False),
        (lambda p: p["spec"].update(nodeName="n1"), False),
        (lambda p: p["metadata"].update(deletionTimestamp="t"), False),
        (lambda p: p["metadata"]["annotations"].update({SWITCHES: str(MAX_SWITCHES - 1)}), True),
        (lambda p: p["metadata"]["annotations"].update({SWITCHES: str(MAX_SWITCHES)}), False),
    ],
)
def test_which_pods_may_switch(change: Any, allowed: bool) -> None:
    pod = as_stored(alt_pod())
    change(pod)
    assert may_switch(pod) is allowed


def _state() -> Any:
    from gpupool.core import ClusterState
    from gpupool.core.model import Gpu, Node, NodeName

    return ClusterState(
        [
            Node(NodeName(f"n{i}"), 8000, 64_000, tuple(Gpu(g, "H100", 81920) for g in range(2)))
            for i in range(2)
        ]
    )


def _placed(state: Any, name: str, milli: int = 1000) -> Any:
    from gpupool.core import default_profile, place_task
    from gpupool.core.model import GpuRequest, Job, JobId, PodSet

    gpu = GpuRequest(count=1) if milli >= 1000 else GpuRequest(gpu_milli=milli, memory_mib=1000)
    job = Job(JobId(f"team/{name}"), (PodSet("p", cpu_milli=100, memory_mib=100, gpu=gpu),))
    p, status = place_task(next(job.tasks()), state.snapshot(), default_profile())
    assert p is not None, status.message
    state.assume(p)
    return p


def test_the_freed_epoch_moves_only_when_something_is_freed_or_a_node_changes() -> None:
    from dataclasses import replace as dc_replace

    from gpupool.k8s.vendors.freed import FreedEpochs

    state = _state()
    epochs = FreedEpochs()
    e0 = epochs.look(state.table)
    assert epochs.look(state.table) == e0  # nothing happened
    a = _placed(state, "a")
    _placed(state, "b", 300)
    assert epochs.look(state.table) == e0  # only taken
    state.forget(a.task)
    e1 = epochs.look(state.table)
    assert e1 > e0  # a card freed
    _placed(state, "c")  # the same card taken again before the next look: no more free
    assert epochs.look(state.table) == e1
    node = state.table.nodes[0]
    state.update_node(dc_replace(node, cpu_milli=node.cpu_milli + 1000))
    assert epochs.look(state.table) > e1  # a node changed


def test_a_parked_pod_is_checked_again_only_after_something_was_freed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Parked pods are tried again on every pod event; the what-if admission of their other
    forms is made once per freeing, not once per cycle."""
    from types import SimpleNamespace

    from gpupool.core.decisions import Park
    from gpupool.core.model import JobId
    from gpupool.core.placement.framework import Status
    from gpupool.k8s.vendors import switch

    calls: list[str] = []

    def admissible(ctl: Any, pod: Any, alternatives: Any) -> tuple[bool, None]:
        calls.append(pod["metadata"]["name"])
        return False, None

    monkeypatch.setattr(switch, "admissible", admissible)
    state = _state()
    pods = {"team/p": as_stored(alt_pod())}
    ctl = SimpleNamespace(
        jobs={JobId("team/p"): SimpleNamespace(pods=["team/p"])},
        own_pod=pods.get,
        sched=SimpleNamespace(node_table=lambda: state.table),
    )
    parks = [Park(JobId("team/p"), Status.unschedulable("no card"))]
    switcher = switch.FormSwitcher()
    a = _placed(state, "a")
    for _ in range(5):  # five cycles, cards only taken meanwhile
        assert switcher.due(ctl, parks) == []  # type: ignore[arg-type]
        _placed(state, f"x{len(calls)}{_}", 100)
    assert calls == ["p"] and switcher.checks == 1
    state.forget(a.task)  # a card freed: checked again, once
    switcher.due(ctl, parks)  # type: ignore[arg-type]
    switcher.due(ctl, parks)  # type: ignore[arg-type]
    assert calls == ["p", "p"]
    del pods["team/p"]  # gone: forgotten
    switcher.due(ctl, [])  # type: ignore[arg-type]
    assert switcher.checked == {}
