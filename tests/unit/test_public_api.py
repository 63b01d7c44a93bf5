"""``gpupool.core.__all__`` lists exactly what the package exports."""

from __future__ import annotations

import types

import gpupool.core as core


def test_all_is_honest() -> None:
    exported = {
        name for name, value in vars(core).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    assert set(core.__all__) == exported
    assert len(core.__all__) == len(set(core.__all__))
