"""The dashboard's Elastic GPU views, in Debian's chromium against a real ``gpupool serve
--demo`` (the helpers and fixtures of test_dashboard.py): a bound claim is listed with the
ElasticGPUs it holds, each ElasticGPU with its node, card, capacity and claim, the classes
too, and the cards held by ElasticGPUs are drawn as theirs on the node view."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_dashboard import (  # noqa: F401 - fixtures
    CHROMIUM,
    Browser,
    Served,
    browser,
    served,
    wait_for,
    wait_js,
)

pytestmark = [
    pytest.mark.real_component("chromium"),
    pytest.mark.skipif(
        not CHROMIUM.exists(),
        reason=f"{CHROMIUM} is absent: the dashboard test needs Debian's chromium "
        "(`make browser`, or `apt-get install chromium`)",
    ),
]

CLASS = {
    "apiVersion": "elasticgpu.io/v1alpha1",
    "kind": "ElasticGPUClass",
    "metadata": {"name": "cards"},
    "provisioner": "physical",
    "parameters": {"models": "H100-80GB"},
    "reclaimPolicy": "Retain",
}
CLAIM = {
    "apiVersion": "elasticgpu.io/v1alpha1",
    "kind": "ElasticGPUClaim",
    "metadata": {"name": "dash-claim", "namespace": "research"},
    "spec": {"requests": {"cards": 2}, "className": "cards"},
}


@pytest.fixture(scope="module")
def bound(served: Served) -> dict[str, Any]:  # noqa: F811 - the imported fixture
    with served.client() as c:
        r = c.post("/api/v1/elasticgpuclasses", json=CLASS)
        assert r.status_code == 201, r.text
        r = c.post("/api/v1/elasticgpuclaims", json=CLAIM)
        assert r.status_code == 201, r.text

        def claim() -> dict[str, Any] | None:
            view: dict[str, Any] = c.get("/api/v1/elasticgpuclaims/research/dash-claim").json()
            return view if view["phase"] == "Bound" else None

        view = wait_for("the claim bound", claim)
        gpus = [c.get(f"/api/v1/elasticgpus/{n}").json() for n in view["elasticGPUs"]]
    return {"claim": view, "gpus": gpus}


def test_dashboard_shows_claims_elastic_gpus_and_their_cards(
    served: Served,  # noqa: F811
    bound: dict[str, Any],
    browser: Browser,  # noqa: F811
    tmp_path: Path,
) -> None:
    page = browser.page
    page.goto(served.link)
    row = page.locator('tr.claim[data-claim="research/dash-claim"]')
    row.wait_for()
    assert row.get_attribute("data-phase") == "Bound"
    text = row.inner_text()
    assert "cards" in text and "2 cards" in text and "Bound" in text
    for g in bound["gpus"]:
        assert g["name"] in text and f"{g['node']} GPU {g['card']}" in text

        # Each ElasticGPU: source, node and card, capacity, phase, claim.
        er = page.locator(f'tr.egpu[data-egpu="{g["name"]}"]')
        assert er.count() == 1
        etext = er.inner_text()
        for expected in (
            "physical",
            f"{g['node']} GPU {g['card']}",
            "1000 milli",
            "Bound",
            "research/dash-claim",
        ):
            assert expected in etext, etext

        # Its card on the node view is drawn as held by it.
        seg = page.locator(
            f'.card[data-node="{g["node"]}"][data-index="{g["card"]}"] '
            f'.bar:not(.mem) .seg.egpu[data-egpu="{g["name"]}"]'
        )
        assert seg.count() == 1
        assert seg.get_attribute("data-claim") == "research/dash-claim"

    # The class is listed.
    cls = page.locator('tr.class[data-class="cards"]')
    assert "physical" in cls.inner_text() and "Retain" in cls.inner_text()

    # Hovering a held card names the ElasticGPU and its claim; clicking adds the claim.
    g = bound["gpus"][0]
    seg = page.locator(
        f'.card[data-node="{g["node"]}"][data-index="{g["card"]}"] .bar:not(.mem) .seg.egpu'
    )
    seg.scroll_into_view_if_needed()
    seg.hover()
    tip = page.locator("#tip")
    tip.wait_for(state="visible")
    for expected in (g["name"], "research/dash-claim", "the whole card"):
        assert expected in tip.inner_text(), tip.inner_text()
    seg.click()
    wait_js(page, "document.querySelector('#tip').innerText.includes('Bound')")
    assert "2 cards" in tip.inner_text()
    page.keyboard.press("Escape")
    page.locator("#elastic").screenshot(path=str(tmp_path / "elastic.png"))
    assert browser.errors == []
