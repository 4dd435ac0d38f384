"""The parts a reconcile pass works with, handed over as one value: the reconciler and its
claims step are built from them (node.py builds them first), never from the Node."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..affinity import NodeAffinity
    from ..clock import Clock
    from ..store.base import JobStore
    from ..wakeup import Doorbell
    from ..worker.board import Board
    from .executor import Executor
    from .liveness import Liveness
    from .metrics import Metrics
    from .scheduler import Scheduler
    from .settings import NodeSettings
    from .signals import Signals


@dataclass
class ReconcileParts:
    store: JobStore
    executor: Executor
    scheduler: Scheduler
    liveness: Liveness
    affinity: NodeAffinity
    board: Board
    clock: Clock
    metrics: Metrics
    signals: Signals
    doorbell: Doorbell


class UsesParts(ReconcileParts):
    """A step of the pass: the parts (attributes of their names), who it is, its settings."""

    def __init__(self, me: str, settings: NodeSettings, parts: ReconcileParts) -> None:
        super().__init__(**{field.name: getattr(parts, field.name) for field in fields(parts)})
        self.me = me
        self.s = settings
