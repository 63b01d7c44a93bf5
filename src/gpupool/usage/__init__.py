"""Measured GPU use from outside the core: the Prometheus reader, the DCGM-format exporter
of the virtual cluster, actual-use profiles, and the study behind ``gpupool bench
measured-use``. The load model itself is pure and lives in ``gpupool.core.usage``."""
