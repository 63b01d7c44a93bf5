"""gpupool: the default placement policy (work in progress: FGD's score for now)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from gpupool.core.placement.plugins.fgd import FgdScore


@dataclass(frozen=True, eq=False)
class GpupoolScore(FgdScore):
    name: ClassVar[str] = "gpupool"
