"""What the API's answers cost the server: CPU time per request of ``GET /api/v1/jobs`` (a page
of 500 jobs), ``/api/v1/nodes`` and ``/api/v1/cluster``, in process through the ASGI client.

The example cluster and queues, 500 jobs of three shapes submitted and two cycles run, then 40
requests of each route after 5 to warm up; prints the median and p90 CPU time and the size.

    PYTHONPATH=src python scripts/bench-api-answers.py [TREE]

``TREE`` (default: this checkout) is the checkout whose ``tests/e2e/serve_kit.py`` builds the
plane, so that two builds can be compared with the same script.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path


def main() -> None:
    tree = sys.argv[1] if len(sys.argv) > 1 else str(Path(__file__).resolve().parents[1])
    sys.path.insert(0, tree)
    from tests.e2e.serve_kit import ADMIN, Wall, auth, client, job_doc, make_plane

    plane = make_plane(":memory:", Wall(), speed=60.0)
    c = client(plane)
    h = auth(ADMIN)
    shapes = [{"gpus": 1}, {"gpus": None, "milli": 250, "gpu_memory": "10Gi"}, {"gpus": 2}]
    queues = [("research", "llm"), ("serving", "serving"), ("research", "vision")]
    for i in range(500):
        ns, q = queues[i % 3]
        c.post(
            "/api/v1/jobs", json=job_doc(f"j{i}", ns, q, duration="10h", **shapes[i % 3]), headers=h
        )
    plane.tick()
    plane.tick()
    for path in ("/api/v1/jobs?limit=500", "/api/v1/nodes", "/api/v1/cluster"):
        for _ in range(5):
            c.get(path, headers=h)
        spent = []
        for _ in range(40):
            t0 = time.process_time()
            r = c.get(path, headers=h)
            spent.append(time.process_time() - t0)
            assert r.status_code == 200, r.text
        print(
            f"{path}: CPU per request median {1000 * statistics.median(spent):.1f} ms, "
            f"p90 {1000 * sorted(spent)[35]:.1f} ms, {len(r.content)} bytes"
        )


if __name__ == "__main__":
    main()
