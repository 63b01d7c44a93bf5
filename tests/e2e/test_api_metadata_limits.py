"""Kubernetes' limits on a Job's metadata, and gpupool's on ``spec.user``: over them, a 422
naming the field, the value (cut when long) and the rule, and nothing written; at them,
accepted. The API's body limit is raised to 1 MiB here so that the 256 KiB annotation limit
is what refuses."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.serve_kit import ADMIN, Wall, auth, client, dump, job_doc, make_plane


@pytest.fixture
def post(tmp_path: Path) -> Iterator[Any]:
    state = tmp_path / "state.db"
    http = client(make_plane(state, Wall()), max_body_bytes=1 << 20)

    def send(doc: dict[str, Any], code: int) -> dict[str, Any]:
        before = dump(state)
        r = http.post("/api/v1/jobs", json=doc, headers=auth(ADMIN))
        assert r.status_code == code, r.text[:500]
        if code != 201:
            assert dump(state) == before
        out: dict[str, Any] = r.json()
        return out

    yield send


def with_meta(**meta: Any) -> dict[str, Any]:
    doc = job_doc("meta")
    doc["metadata"].update(meta)
    return doc


@pytest.mark.parametrize(
    ("labels", "field", "rule"),
    [
        ({"a" * 64: "x"}, "metadata.labels", "at most 63 characters (it has 64)"),
        ({"bad key": "x"}, "metadata.labels['bad key']", "alphanumeric at both ends"),
        ({"-x": "x"}, "metadata.labels['-x']", "alphanumeric at both ends"),
        ({"/x": "x"}, "metadata.labels['/x']", "prefix before '/' must not be empty"),
        ({"Example.COM/x": "x"}, "metadata.labels['Example.COM/x']", "DNS subdomain"),
        ({"team": "v" * 64}, "metadata.labels['team']", "at most 63 characters (it has 64)"),
        ({"team": "a b"}, "metadata.labels['team']", "empty or alphanumeric"),
    ],
)
def test_labels_over_the_limits_are_refused(
    post: Any, labels: dict[str, str], field: str, rule: str
) -> None:
    err = post(with_meta(labels=labels), 422)
    assert err["error"] == "InvalidJobError"
    assert err["details"]["field"].startswith(field) and rule in err["details"]["rule"], err


def test_labels_at_the_limits_are_accepted(post: Any) -> None:
    labels = {"a" * 63: "v" * 63, "example.com/" + "n" * 63: "", "x.y/z_1": "A-b.c_9"}
    assert post(with_meta(labels=labels), 201)["metadata"]["labels"] == labels


def test_annotations_over_256_kib_are_refused_and_the_value_is_not_echoed(post: Any) -> None:
    big = {"a": "x" * (256 * 1024 - 1)}  # 1 + 262143 = 262144 bytes: exactly the limit
    assert post(with_meta(annotations=big), 201)
    bigger = {"b": "x" * (256 * 1024)}
    err = post(with_meta(name="meta-2", annotations=bigger), 422)
    assert err["details"]["field"] == "metadata.annotations"
    assert "256 KiB" in err["details"]["rule"] and len(err["message"]) < 500
    err = post(with_meta(name="meta-3", annotations={"bad key": "x"}), 422)
    assert "annotation key" in err["details"]["rule"]


def test_spec_user_is_bounded(post: Any) -> None:
    assert post(job_doc("u1", user="u" * 253), 201)
    err = post(job_doc("u2", user="u" * 254), 422)
    assert err["details"]["field"] == "spec.user"
    assert "at most 253 characters (it has 254)" in err["details"]["rule"]
    assert len(err["message"]) < 300  # the value is cut
    err = post(job_doc("u3", user="ali\nce"), 422)
    assert err["details"]["field"] == "spec.user" and "printable" in err["details"]["rule"]
