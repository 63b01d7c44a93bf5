"""The dashboard as a person sees it: a real ``gpupool serve --demo`` process, the page loaded in
Debian's chromium (headless, driven by playwright) from the link that ``serve`` prints.

The example job stream keeps jobs flowing; the test adds two of its own so that what it looks
for is certain: a T4 slice that runs for days (a known holder of a known card) and a job
asking for all of its queue's A6000 quota while another holds one (pending, with the reason as
a sentence with numbers). A screenshot is saved under the test's tmp dir and copied to
``test-artifacts/dashboard.png`` (git-ignored).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest

if TYPE_CHECKING:
    from playwright.sync_api import Page

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
ARTIFACT = REPO / "test-artifacts" / "dashboard.png"
CHROMIUM_ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

pytestmark = [
    pytest.mark.real_component("chromium"),
    pytest.mark.skipif(
        not CHROMIUM.exists(),
        reason=f"{CHROMIUM} is absent: the dashboard test needs Debian's chromium "
        "(`make browser`, or `apt-get install chromium`)",
    ),
]

SLICE = {
    "apiVersion": "gpupool.io/v1alpha1",
    "kind": "Job",
    "metadata": {"name": "t4-slice", "namespace": "serving"},
    "spec": {
        "queue": "serving",
        "priorityClassName": "production",
        "duration": "100h",
        "podSets": [
            {
                "name": "main",
                "count": 1,
                "cpu": 1,
                "memory": "4Gi",
                "gpu": {"milli": 300, "memory": "4Gi", "models": ["T4"]},
            }
        ],
    },
}
# serving may use 4 A6000s and never borrows: while HOLDER keeps one for days, a job asking
# for all 4 waits at quota (one asking for more than 4 would be refused at submission).
HOLDER = {
    "apiVersion": "gpupool.io/v1alpha1",
    "kind": "Job",
    "metadata": {"name": "a6000-holder", "namespace": "serving"},
    "spec": {
        "queue": "serving",
        "priorityClassName": "production",
        "duration": "100h",
        "podSets": [
            {
                "name": "main",
                "count": 1,
                "cpu": 1,
                "memory": "4Gi",
                "gpu": {"count": 1, "models": ["RTX-A6000"]},
            }
        ],
    },
}
TOO_BIG = {
    "apiVersion": "gpupool.io/v1alpha1",
    "kind": "Job",
    "metadata": {"name": "too-big", "namespace": "serving"},
    "spec": {
        "queue": "serving",
        "duration": "1h",
        "podSets": [
            {
                "name": "workers",
                "count": 1,
                "cpu": 2,
                "memory": "8Gi",
                "gpu": {"count": 4, "models": ["RTX-A6000"]},
            }
        ],
    },
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Served:
    url: str
    link: str  # the dashboard link that serve prints, with #token=...
    token: str
    log: Path

    def client(self) -> httpx.Client:
        return httpx.Client(
            base_url=self.url, timeout=10.0, headers={"Authorization": f"Bearer {self.token}"}
        )


def wait_for(what: str, check: Any, timeout: float = 30.0, log: Path | None = None) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(
        f"{what}: not after {timeout} s" + (f"\n{log.read_text()}" if log is not None else "")
    )


def wait_js(page: Page, expression: str, timeout: float = 30000) -> None:
    """Waits until ``expression`` is truthy in the page. Polled from here with
    ``page.evaluate`` (which the page's Content-Security-Policy does not govern), where
    ``wait_for_function`` would evaluate a string inside the page, which the policy forbids
    (no 'unsafe-eval'), as it should."""
    deadline = time.monotonic() + timeout / 1000
    while not page.evaluate(expression):
        if time.monotonic() > deadline:
            raise AssertionError(f"not after {timeout / 1000:g} s: {expression}")
        time.sleep(0.1)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """``gpupool serve --demo`` on a free port, with tokens generated next to its state."""
    tmp = tmp_path_factory.mktemp("serve")
    port = free_port()
    log = tmp / "serve.log"
    env = {k: v for k, v in os.environ.items() if k != "GPUPOOL_TOKENS"}
    cmd = [
        sys.executable,
        "-m",
        "gpupool.cli",
        "serve",
        "--demo",
        "--demo-rate",
        "4",
        "--speed",
        "120",
        "--interval",
        "0.05",
        "--state",
        str(tmp / "state.db"),
        "--port",
        str(port),
        "--cluster",
        str(REPO / "examples" / "cluster.yaml"),
        "--queues",
        str(REPO / "examples" / "queues.yaml"),
        "--cloud",
        str(REPO / "examples" / "cloud.yaml"),
    ]
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, cwd=tmp, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:

        def link() -> str | None:
            if proc.poll() is not None:
                raise AssertionError(
                    f"gpupool serve exited with {proc.returncode}:\n{log.read_text()}"
                )
            m = re.search(r"dashboard: (http://\S+#token=(\S+))", log.read_text())
            return m.group(1) if m else None

        url = wait_for("the dashboard link", link, log=log)

        def healthy() -> bool:
            with contextlib.suppress(httpx.HTTPError):
                return httpx.get(f"http://127.0.0.1:{port}/healthz").status_code == 200
            return False

        wait_for("/healthz", healthy, log=log)
        yield Served(f"http://127.0.0.1:{port}", url, url.split("#token=", 1)[1], log)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@pytest.fixture(scope="module")
def jobs(served: Served) -> dict[str, dict[str, Any]]:
    """The test's two jobs, once the slice runs and the gang waits with a reason."""
    with served.client() as c:

        def job(name: str, phase: str) -> dict[str, Any] | None:
            view: dict[str, Any] = c.get(f"/api/v1/jobs/serving/{name}").json()
            return view if view["status"]["phase"] == phase else None

        for doc in (SLICE, HOLDER):
            r = c.post("/api/v1/jobs", json=doc)
            assert r.status_code == 201, r.text
        wait_for("a6000-holder running", lambda: job("a6000-holder", "Running"))
        r = c.post("/api/v1/jobs", json=TOO_BIG)
        assert r.status_code == 201, r.text

        running = wait_for("t4-slice running", lambda: job("t4-slice", "Running"))
        pending = wait_for(
            "too-big parked with a reason",
            lambda: (
                (v := job("too-big", "Pending"))
                and "at quota" in v["status"]["pendingReason"]
                and v
            ),
        )
    return {"slice": running, "pending": pending}


@dataclass
class Browser:
    page: Page
    errors: list[str]  # errors the page raised or logged


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Browser]:
    """Debian's chromium, headless, with a fresh profile; never playwright's own browsers."""
    from playwright.sync_api import sync_playwright

    errors: list[str] = []
    with sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            str(tmp_path / "chromium-profile"),
            executable_path=str(CHROMIUM),
            args=CHROMIUM_ARGS,
            viewport={"width": 1400, "height": 900},
        )
        try:
            page = context.pages[0] if context.pages else context.new_page()
            page.on("pageerror", lambda e: errors.append(f"page error: {e}"))
            page.on(
                "console",
                lambda m: (
                    errors.append(f"console {m.type}: {m.text}") if m.type == "error" else None
                ),
            )
            yield Browser(page, errors)
        finally:
            context.close()


def test_dashboard_shows_cards_holders_queues_and_pending_reasons(
    served: Served, jobs: dict[str, dict[str, Any]], browser: Browser, tmp_path: Path
) -> None:
    page = browser.page
    with served.client() as c:
        cluster = c.get("/api/v1/cluster").json()
        nodes = c.get("/api/v1/nodes").json()["items"]
        queues = [q["metadata"]["name"] for q in c.get("/api/v1/clusterqueues").json()["items"]]

    page.goto(served.link)
    page.wait_for_selector(".card")

    # The token came from the link: kept for the next visit, gone from the address bar.
    assert "token=" not in page.url
    assert page.evaluate("localStorage.getItem('gpupool.token')") == served.token
    assert page.locator("#login").is_hidden()

    # What the page is: gpupool, the server, cluster time and speed.
    assert "gpupool" in page.title()
    assert page.locator(".wordmark").first.inner_text() == "gpupool"
    assert page.locator("#speed").inner_text() == "×120"
    assert re.fullmatch(
        r"\d\d:\d\d:\d\d|day \d+, \d\d:\d\d:\d\d", page.locator("#clock").inner_text()
    )

    # Summary: GPUs allocated of the total, fragmentation, job counts.
    # (the cloud may add nodes meanwhile: the page's figure is the API's of the moment)
    def same_total() -> bool:
        with served.client() as c:
            total = c.get("/api/v1/cluster").json()["gpus"]["total"]
        return page.locator("#gpu-total").inner_text() == str(total)

    assert cluster["gpus"]["total"] >= 56
    wait_for("the page's GPU total is the API's", same_total, timeout=10)
    assert re.fullmatch(r"\d+(\.\d+)?%", page.locator("#gpu-pct").inner_text())
    assert re.fullmatch(r"\d+(\.\d+)?%", page.locator("#frag").inner_text())
    assert int(page.locator('#job-counts [data-phase="Pending"] b').inner_text()) >= 1
    assert int(page.locator('#job-counts [data-phase="Running"] b').inner_text()) >= 1

    # Every node, and every card of every node, drawn.
    for n in nodes:
        row = page.locator(f'.node[data-node="{n["name"]}"]')
        assert row.count() == 1, n["name"]
        assert row.locator(".node-name").inner_text() == n["name"]
        assert row.locator(".card").count() == len(n["gpus"])
    assert page.locator(".card").count() >= sum(len(n["gpus"]) for n in nodes)  # + the cloud's
    assert page.locator(".card.mig").count() == 4

    # The slice held by the known job, on the card the API says, 30% of its compute.
    where = jobs["slice"]["status"]["placements"][0]
    card = page.locator(
        f'.card[data-node="{where["node"]}"][data-index="{where["gpus"][0]["index"]}"]'
    )
    seg = card.locator('.bar:not(.mem) .seg[data-job="serving/t4-slice"]')
    assert seg.count() == 1
    box, bar = seg.bounding_box(), card.locator(".bar").first.bounding_box()
    assert box is not None and bar is not None
    assert abs(box["width"] / bar["width"] - 0.3) < 0.05

    # Hovering the slice tells job, namespace, milli and MiB.
    seg.hover()
    tip = page.locator("#tip")
    tip.wait_for(state="visible")
    text = tip.inner_text()
    for expected in ("serving/t4-slice", "serving", "300 milli", "4096 MiB", "a slice of the card"):
        assert expected in text, text

    # Clicking pins it and adds the job's status.
    seg.click()
    wait_js(page, "document.querySelector('#tip').innerText.includes('Running')")
    assert "serving → serving (t4)" in tip.inner_text()
    page.keyboard.press("Escape")
    tip.wait_for(state="hidden")

    # MIG instances are drawn as slots held by their jobs.
    held = [
        (n["name"], g["index"], h["job"])
        for n in nodes
        for g in n["gpus"]
        for h in g["holders"]
        if h["migProfile"]
    ]
    if held:
        name, index, job = held[0]
        assert (
            page.locator(
                f'.card[data-node="{name}"][data-index="{index}"] .slot.seg[data-job="{job}"]'
            ).count()
            >= 1
        )

    # The pending job, its reason with numbers, its position.
    row = page.locator('tr.job[data-job="serving/too-big"]')
    row.wait_for()
    assert "4 GPU RTX-A6000" in row.inner_text()
    assert re.fullmatch(r"\d+", row.locator("td.pos").inner_text())
    reason = page.locator('tr.why[data-job="serving/too-big"] .reason').inner_text()
    # the API's sentence; its numbers move as the example jobs come and go between the two
    # reads, so the page's is compared with them left out
    said = jobs["pending"]["status"]["pendingReason"]
    assert re.sub(r"[\d.]+", "N", reason) == re.sub(r"[\d.]+", "N", said), (reason, said)
    assert re.search(
        r"queue serving at quota for a6000 GPUs \([\d.]+/4 GPUs used, 4 asked", reason
    ), reason

    # Queues with usage against nominal quota, and their shares over time.
    for q in queues:
        assert page.locator(f'.queue[data-queue="{q}"] .qname').inner_text() == q
    assert (
        page.locator('.queue[data-queue="serving"] .qflavor[data-flavor="t4"] .fnum')
        .inner_text()
        .endswith("/ 8")
    )
    wait_js(page, "document.querySelectorAll('#chart path.line').length === 5", timeout=15000)
    assert {
        page.locator("#chart path.line").nth(i).get_attribute("data-queue") for i in range(5)
    } == set(queues)

    # Recent events, and the page refreshes by itself.
    assert page.locator("#events li").count() >= 5
    assert {"Submitted", "Admitted"} <= set(page.locator("#events .r").all_inner_texts())
    before = page.locator("#clock").inner_text()
    wait_js(page, f"document.querySelector('#clock').innerText !== '{before}'", timeout=6000)
    assert page.locator("#live").get_attribute("class") == "live ok"

    page.mouse.move(2, 2)
    page.wait_for_timeout(2500)  # a few more refreshes: the history chart fills in
    assert tip.is_hidden()
    shot = tmp_path / "dashboard.png"
    page.screenshot(path=str(shot))
    ARTIFACT.parent.mkdir(exist_ok=True)
    shutil.copyfile(shot, ARTIFACT)
    page.screenshot(path=str(tmp_path / "dashboard-full.png"), full_page=True)
    assert shot.stat().st_size > 20_000
    assert browser.errors == []


def test_dashboard_shows_a_gang_waiting_for_the_cloud_then_provisioned(
    served: Served, browser: Browser
) -> None:
    gang = {
        "apiVersion": "gpupool.io/v1alpha1",
        "kind": "Job",
        "metadata": {"name": "cloud-gang", "namespace": "research"},
        "spec": {
            "queue": "burst",
            "duration": "60m",
            "podSets": [
                {"name": "workers", "count": 2, "cpu": 16, "memory": "64Gi", "gpu": {"count": 8}}
            ],
        },
    }
    with served.client() as c:
        r = c.post("/api/v1/jobs", json=gang)
        assert r.status_code == 201, r.text
    page = browser.page
    page.goto(served.link)
    row = page.locator('#prov tr.prov[data-request="research/research-cloud-gang-1"]')
    row.wait_for()
    assert "research/cloud-gang" in row.inner_text()
    # provisioned within the cloud's 3-8 minutes (4 s of wall time at x120), both nodes
    wait_js(
        page,
        "document.querySelector('#prov tr.prov[data-request=\"research/research-cloud-gang-1"
        "\"]')?.dataset.phase === 'Provisioned'",
        timeout=20000,
    )
    assert row.locator("td").nth(2).inner_text() == "2"
    assert page.locator("#cloud-line").inner_text().startswith("cloud region-1: ")
    assert browser.errors == []


def test_dashboard_asks_for_a_token_without_one(served: Served, browser: Browser) -> None:
    page = browser.page
    page.goto(served.url + "/")
    login = page.locator("#login")
    login.wait_for(state="visible")
    assert "token" in login.inner_text().lower()

    page.fill("#token-input", "not-a-token-of-this-server")
    page.click("#login button[type=submit]")
    wait_js(page, "document.querySelector('#login-error').innerText.length > 0")
    assert "refused" in page.locator("#login-error").inner_text()
    assert login.is_visible()

    page.fill("#token-input", served.token)
    page.click("#login button[type=submit]")
    page.wait_for_selector(".card")
    assert login.is_hidden()
    assert page.locator("#who").inner_text().startswith("admin")
    # Kept: a reload needs no token again.
    page.reload()
    page.wait_for_selector(".card")
    assert login.is_hidden()
    # The one error logged is the browser's note of the refused token's 401.
    assert [e for e in browser.errors if "401" not in e] == []
