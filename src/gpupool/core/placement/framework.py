"""The placement framework: plugin Protocols, Status, CycleState and Profile.

The shape is kube-scheduler's (filter, score, a reserve-time card choice) with one change of
granularity: a plugin sees the candidate nodes as an array of table rows and answers for all of
them at once (a boolean mask, a score vector). Calling a Python method per node would cost
10,000 calls per decision at 10,000 nodes; one numpy expression over a column costs a few
microseconds. Filters run in profile order on the survivors of the previous filter, so the
count each filter removed is the "first failing filter" count of kube-scheduler's FitError.

A plugin may say of itself, by an optional method ``neutral(cs, task)``, that for a task it
has nothing to say: a filter keeps every row, a score is 0 on every row. Placement then does
not call it; the rows kept, the sums and the failure counts are those it would have given.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, ClassVar, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from gpupool.core.errors import ConfigError
from gpupool.core.model import GpuShare, Task
from gpupool.core.podindex import PodIndex
from gpupool.core.reasons import Reason, sentence
from gpupool.core.table import NodeTable
from gpupool.core.usage import CardLoad

Rows = npt.NDArray[np.int64]
Mask = npt.NDArray[np.bool_]
Scores = npt.NDArray[np.float64]


class Code(IntEnum):
    OK = 0
    UNSCHEDULABLE = 1  # nothing fits now; preemption or completions may help
    UNRESOLVABLE = 2  # nothing fits and removing pods would not help (selector, model, taint)
    WAIT = 3
    ERROR = 4


@dataclass(frozen=True, slots=True)
class Status:
    """A code and every reason behind it, as data (``core.reasons``); ``message`` is the one
    sentence users read, rendered from them."""

    code: Code = Code.OK
    reasons: tuple[Reason, ...] = ()

    @staticmethod
    def ok() -> Status:
        return _OK

    @staticmethod
    def unschedulable(*reasons: Reason) -> Status:
        return Status(Code.UNSCHEDULABLE, reasons)

    @staticmethod
    def unresolvable(*reasons: Reason) -> Status:
        return Status(Code.UNRESOLVABLE, reasons)

    @property
    def is_ok(self) -> bool:
        return self.code is Code.OK

    @property
    def message(self) -> str:
        return sentence(self.reasons)


_OK = Status()


@dataclass(slots=True)
class CycleState:
    """Scratch space for one task's placement, plus the long-lived snapshot cache."""

    table: NodeTable
    cache: dict[Hashable, Any]
    data: dict[str, Any] = field(default_factory=dict)
    pods: PodIndex = field(default_factory=PodIndex)
    """The pods on each node, for pod affinity and topology spread."""
    load: CardLoad | None = None
    """Each card's measured load this cycle (``core.usage``); None: placement by requests."""


@runtime_checkable
class FilterPlugin(Protocol):
    name: ClassVar[str]
    resolvable: ClassVar[bool]  # can freeing capacity (preemption) make a rejected node fit?

    def filter(self, cs: CycleState, task: Task, rows: Rows) -> Mask:
        """True for each row that can hold ``task``."""
        ...

    def reason(self, task: Task) -> str:
        """Why a rejected row cannot hold ``task``, with numbers: 'no GPU with 500 milli free'."""
        ...


@runtime_checkable
class ScorePlugin(Protocol):
    name: ClassVar[str]

    def score(self, cs: CycleState, task: Task, rows: Rows) -> Scores:
        """0..100 for each feasible row; higher wins."""
        ...


@runtime_checkable
class CardPlugin(Protocol):
    name: ClassVar[str]

    def choose_cards(self, cs: CycleState, task: Task, row: int) -> tuple[GpuShare, ...] | None:
        """The cards of node ``row`` the task takes (empty for a task without GPUs)."""
        ...


NeutralCheck = Callable[[CycleState, Task], bool]
"""A plugin's ``neutral``: whether it keeps every row (a filter) or scores 0 on every row (a
score) for a task."""

PluginFactory = Any  # a plugin class; called with the plugin's args as keywords


class Registry:
    """Plugins by name; explicit, instance-based, no import-time side effects."""

    def __init__(self, factories: Sequence[PluginFactory] = ()) -> None:
        self._factories: dict[str, PluginFactory] = {}
        for f in factories:
            self.register(f)

    def register(self, factory: PluginFactory) -> None:
        name = getattr(factory, "name", None)
        if not isinstance(name, str) or not name:
            raise ConfigError(f"plugin {factory!r} has no name")
        if name in self._factories:
            raise ConfigError(f"plugin {name!r} is registered twice")
        self._factories[name] = factory

    def names(self) -> list[str]:
        return sorted(self._factories)

    def create(self, name: str, args: Mapping[str, Any] | None = None) -> Any:
        factory = self._factories.get(name)
        if factory is None:
            raise ConfigError(f"unknown plugin {name!r}; known plugins: {', '.join(self.names())}")
        try:
            return factory(**dict(args or {}))
        except TypeError as exc:
            raise ConfigError(f"plugin {name!r}: bad arguments {dict(args or {})}: {exc}") from exc


@dataclass(frozen=True, slots=True)
class Profile:
    """Which plugins run at each point, with score weights."""

    name: str
    filters: tuple[FilterPlugin, ...]
    scores: tuple[tuple[ScorePlugin, float], ...]
    cards: CardPlugin
    filter_checks: tuple[tuple[FilterPlugin, NeutralCheck | None], ...] = field(
        init=False, default=()
    )
    """Each filter with its ``neutral`` method (None without one), in profile order."""
    score_checks: tuple[tuple[ScorePlugin, float, NeutralCheck | None], ...] = field(
        init=False, default=()
    )
    """Each score with its weight and its ``neutral`` method, in profile order."""

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "filter_checks", tuple((f, getattr(f, "neutral", None)) for f in self.filters)
        )
        object.__setattr__(
            self,
            "score_checks",
            tuple((s, w, getattr(s, "neutral", None)) for s, w in self.scores),
        )

    @staticmethod
    def build(
        registry: Registry,
        *,
        filters: Sequence[str],
        scores: Mapping[str, float],
        cards: str,
        args: Mapping[str, Mapping[str, Any]] | None = None,
        name: str = "default",
    ) -> Profile:
        """Fails fast on an unknown name, a duplicate, a plugin lacking its method or a
        score without a positive weight. Plugins named at several points share one instance."""
        args = args or {}
        unknown_args = set(args) - set(filters) - set(scores) - {cards}
        if unknown_args:
            raise ConfigError(
                f"profile {name}: arguments for plugins not in the profile: "
                f"{', '.join(sorted(unknown_args))}"
            )
        instances: dict[str, Any] = {}

        def get(plugin: str, proto: type, point: str) -> Any:
            if plugin not in instances:
                instances[plugin] = registry.create(plugin, args.get(plugin))
            inst = instances[plugin]
            if not isinstance(inst, proto):
                raise ConfigError(
                    f"profile {name}: plugin {plugin!r} cannot be used as a {point} plugin"
                )
            return inst

        if len(set(filters)) != len(filters):
            raise ConfigError(f"profile {name}: a filter is listed twice in {list(filters)}")
        built_filters = tuple(get(f, FilterPlugin, "filter") for f in filters)
        built_scores = []
        for s, w in scores.items():
            if not w > 0:
                raise ConfigError(f"profile {name}: score {s!r} needs a positive weight, got {w}")
            built_scores.append((get(s, ScorePlugin, "score"), float(w)))
        built_cards = get(cards, CardPlugin, "cards")
        return Profile(name, built_filters, tuple(built_scores), built_cards)
