"""Whether anything was freed since a moment: the form switcher's test before it asks the
scheduler about a parked pod again.

A parked pod whose other forms did not fit at its last check cannot fit now unless some node
has more free since then: capacity only ever shrinks while nothing is freed, and a form that
did not fit on more cannot fit on less. :class:`FreedEpochs` keeps a number, the **epoch**,
that advances when, between two looks at the node table, the inventory changed (a node
added, removed or changed: the table's ``version``) or any node has more of something free:
CPU, memory, a card's milli or MiB, a card's holder slots (HAMi's split count) or a MIG
profile's free instances. A look costs one comparison of the table's columns, whatever the
number of parked pods; a pod is checked again only when the epoch moved past the one of its
last check. Capacity freed and taken again between two looks counts only by what is still
free: a node with no more free than at the last look changes no answer.

Quota is judged the same way: another queue's usage falls only when its work ends, which
frees capacity too. A quota raised by reconfiguration is seen at the next capacity freed.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
import numpy.typing as npt

__all__ = ["FreedEpochs"]

_I64 = npt.NDArray[np.int64]
_Columns = dict[str, _I64]


class FreeColumns(Protocol):
    """The columns of the scheduler's node table read here (``core/table.py``, which
    adapters do not import)."""

    version: int
    n: int
    cpu_free: _I64
    mem_free: _I64
    free_milli: _I64
    free_mib: _I64
    holders: _I64
    holder_cap: _I64
    mig_free: dict[str, _I64]


def _free(t: FreeColumns) -> _Columns:
    """Copies of the table's free columns (rows in use only): larger is more free."""
    n = t.n
    out = {
        "cpu": t.cpu_free[:n].copy(),
        "mem": t.mem_free[:n].copy(),
        "milli": t.free_milli[:n].copy(),
        "mib": t.free_mib[:n].copy(),
        "slots": (t.holder_cap[:n] - t.holders[:n]),
    }
    out.update({f"mig:{p}": a[:n].copy() for p, a in t.mig_free.items()})
    return out


class FreedEpochs:
    """The epoch of freed capacity of one node table (see the module's docstring)."""

    def __init__(self) -> None:
        self.epoch = 0
        self._version = -1
        self._last: _Columns = {}

    def look(self, table: FreeColumns) -> int:
        """The epoch now: advanced when something was freed since the last look."""
        now = _free(table)
        if (
            table.version != self._version
            or now.keys() != self._last.keys()
            or any(
                now[k].shape != self._last[k].shape or bool(np.any(now[k] > self._last[k]))
                for k in now
            )
        ):
            self.epoch += 1
        self._version = table.version
        self._last = now
        return self.epoch
