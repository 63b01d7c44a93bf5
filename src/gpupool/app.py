"""The composition root: builds the control plane, its cluster and the API, and runs them."""
