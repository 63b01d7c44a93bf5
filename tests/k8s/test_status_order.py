"""The status writer never lets an older reason land after a newer one for the same pod."""

from __future__ import annotations

import asyncio
from typing import Any

from gpupool.k8s.status import StatusWriter

POD = {"metadata": {"namespace": "ns", "name": "p", "uid": "u1"}}


class SlowFirstKube:
    """Answers the first status PATCH slowly and later ones at once, as an API server under
    load may; keeps the message each PATCH wrote, in the order the writes landed."""

    def __init__(self) -> None:
        self.landed: list[str] = []
        self.calls = 0

    async def request(self, method: str, path: str, body: Any = None, **_: Any) -> dict[str, Any]:
        if method == "PATCH" and path.endswith("/status"):
            self.calls += 1
            await asyncio.sleep(0.3 if self.calls == 1 else 0.0)
            self.landed.append(body["status"]["conditions"][0]["message"])
        return {}


def test_a_newer_reason_is_not_overtaken_by_an_older_write_in_flight() -> None:
    async def body() -> list[str]:
        kube = SlowFirstKube()
        writer = StatusWriter(
            kube,  # type: ignore[arg-type]
            component="gpupool",
            identity="test",
            pod=lambda k: POD,
            is_leader=lambda: True,
            still_waiting=lambda k: True,
            writes_per_s=1000,
            concurrency=2,
        )
        try:
            writer.park("ns/p", "0/3 nodes fit: first")
            await asyncio.sleep(0.05)  # the first PATCH is in flight
            writer.park("ns/p", "0/3 nodes fit: second")
            for _ in range(200):
                await asyncio.sleep(0.01)
                if writer.queued() == 0:
                    break
            return kube.landed
        finally:
            await writer.close()

    landed = asyncio.run(body())
    assert landed == ["0/3 nodes fit: first", "0/3 nodes fit: second"], landed
