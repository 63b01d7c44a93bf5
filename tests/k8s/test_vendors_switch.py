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
    assert body["spec"]["containers"][1]["image"] == "app:dtk24"
    back = remade(as_stored(body), None)  # and back to its own form, counted again
    assert back["spec"] == pod["spec"]
    assert ALTERNATIVE not in back["metadata"]["annotations"]
    assert ORIGINAL not in back["metadata"]["annotations"]
    assert back["metadata"]["annotations"][SWITCHES] == "2"


def test_a_bound_pod_is_made_again_unbound() -> None:
    stored = as_stored(alt_pod())
    stored["spec"]["nodeName"] = "n1"
    assert "nodeName" not in remade(stored, None)["spec"]


@pytest.mark.parametrize(("change", "allowed"), [
    (lambda p: None, True),
    (lambda p: p["metadata"]["annotations"].pop("gpupool.io/alternatives"), False),
    (lambda p: p["metadata"].update(ownerReferences=[{"kind": "Job", "name": "j"}]), False),
    (lambda p: p["spec"].update(nodeName="n1"), False),
    (lambda p: p["metadata"].update(deletionTimestamp="t"), False),
    (lambda p: p["metadata"]["annotations"].update({SWITCHES: str(MAX_SWITCHES - 1)}), True),
    (lambda p: p["metadata"]["annotations"].update({SWITCHES: str(MAX_SWITCHES)}), False),
])
def test_which_pods_may_switch(change: Any, allowed: bool) -> None:
    pod = as_stored(alt_pod())
    change(pod)
    assert may_switch(pod) is allowed
