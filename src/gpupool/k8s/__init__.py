"""The Kubernetes adapter: gpupool as a real cluster's GPU scheduler.

- ``translate``: Nodes and Pods (HAMi's and GPU feature discovery's conventions) to core
  objects, and placements back to HAMi's pod annotations;
- ``hami``: HAMi's NVIDIA protocol, pure (register and node health, requests, annotations);
- ``kube``: a small JSON client (credentials from ``kubernetes_asyncio``'s loaders);
- ``informer``: list + watch with bookmarks, re-list and diff on ``410 Gone``;
- ``controller``: the scheduler for pods with ``schedulerName: gpupool``;
- ``lease``: leader election on a ``coordination.k8s.io/v1`` Lease;
- ``crd``: gpupool's queue CRDs in, their status out;
- ``extender``: scheduler extender, admission webhook, health and metrics over HTTP(S);
- ``tls``: the webhook's CA and certificate; ``bench``: ``gpupool k8s bench``.

Modules load on demand (``from gpupool.k8s.controller import Controller``); importing the
package itself costs nothing.
"""

__all__: list[str] = []
