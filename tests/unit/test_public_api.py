"""``gpupool.core.__all__`` lists exactly what the package exports, and its names load on first
use: importing ``gpupool.core.errors`` alone does not load the scheduler or numpy."""

from __future__ import annotations

import subprocess
import sys
import types

import gpupool.core as core


def test_all_is_honest() -> None:
    for name in core.__all__:  # every listed name resolves (they load on first use)
        assert not isinstance(getattr(core, name), types.ModuleType), name
    exported = {
        name
        for name, value in vars(core).items()
        if not name.startswith("_")
        and not isinstance(value, types.ModuleType)
        and name not in ("annotations", "import_module", "TYPE_CHECKING", "Any")
    }
    assert set(core.__all__) == exported
    assert len(core.__all__) == len(set(core.__all__))
    assert set(core.__all__) <= set(dir(core))


def test_the_errors_load_without_the_scheduler() -> None:
    code = (
        "import sys, gpupool.core.errors; "
        "print(sorted(m for m in ('numpy', 'gpupool.core.cycle', 'gpupool.core.model') "
        "if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "[]"
