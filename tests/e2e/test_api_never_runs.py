"""A job that no flavor of its queue could ever run is refused at submission (422, naming
each flavor and why), not left to wait forever; the same request in a queue that has such a
flavor is accepted and runs. Example queues: llm has h100, a100 and cpu flavors (no MIG);
notebooks has a100-mig and a6000; serving has t4 and a6000."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.e2e.serve_kit import ADMIN, Wall, auth, client, dump, job_doc, make_plane


@pytest.fixture
def svc(tmp_path: Path) -> Any:
    state = tmp_path / "state.db"
    plane = make_plane(state, Wall())
    http = client(plane)

    def post(doc: dict[str, Any], code: int) -> dict[str, Any]:
        before = dump(state)
        r = http.post("/api/v1/jobs", json=doc, headers=auth(ADMIN))
        assert r.status_code == code, r.text
        if code != 201:
            assert dump(state) == before
        out: dict[str, Any] = r.json()
        return out

    post.plane = plane  # type: ignore[attr-defined]
    return post


def test_a_mig_request_in_a_queue_with_no_mig_flavor_is_refused(svc: Any) -> None:
    err = svc(job_doc("mig-in-llm", mig="1g.5gb"), 422)
    assert err["error"] == "InvalidJobError" and err["details"]["field"] == "spec.podSets"
    rule = err["details"]["rule"]
    assert "can never be admitted by ClusterQueue llm" in rule
    for flavor in ("h100", "a100", "cpu"):
        assert f"flavor {flavor}: " in rule, rule
    assert "MIG 1g.5gb" in rule
    # where a flavor has MIG cards, the same request runs
    assert svc(job_doc("mig-ok", "notebooks", "notebooks", mig="1g.5gb"), 201)
    svc.plane.tick()
    assert svc.plane.job("notebooks/mig-ok").phase == "Running"


def test_a_model_none_of_the_queues_flavors_has_is_refused(svc: Any) -> None:
    # T4 cards exist (serving's flavor), but none in llm's flavors
    err = svc(job_doc("t4-in-llm", gpus=1, models=["T4"]), 422)
    rule = err["details"]["rule"]
    assert "flavor h100: " in rule and "1 GPU, 4 CPUs, 16Gi" in rule
    assert svc(job_doc("t4-ok", "serving", "serving", gpus=1, models=["T4"]), 201)


def test_a_node_selector_no_flavor_node_has_is_refused(svc: Any) -> None:
    doc = job_doc("pinned", gpus=1)
    doc["spec"]["podSets"][0]["nodeSelector"] = {"gpupool.io/flavor": "t4"}
    err = svc(doc, 422)
    assert "contradicts the flavor's node labels" in err["details"]["rule"]


def test_a_job_some_flavor_could_run_is_accepted(svc: Any) -> None:
    assert svc(job_doc("fine", gpus=8, models=["H100-80GB"]), 201)
    assert svc(job_doc("cpu-only", gpus=None, cpu=4), 201)
