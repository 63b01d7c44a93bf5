"""The simulator adapter: a deterministic event loop and trace loaders driving the core."""
