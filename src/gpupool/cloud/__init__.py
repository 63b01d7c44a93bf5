"""The simulated cloud: node pools that scale from zero for ProvisioningRequests (``spec``:
its description; ``region``: its run), used by ``gpupool sim`` and ``gpupool serve --cloud``."""
