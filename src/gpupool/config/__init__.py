"""Configuration files in, core objects out: clusters, flavors, queues, cohorts (YAML)."""
