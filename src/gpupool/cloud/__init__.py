"""The simulated cloud: node pools that scale from zero for ProvisioningRequests (``spec``:
its description; ``region``: its run; ``pools``: which pool holds a request and the nodes it
makes; ``stockouts``: the seeded outages; ``run``: its seams and records), used by
``gpupool sim`` and ``gpupool serve --cloud``."""
