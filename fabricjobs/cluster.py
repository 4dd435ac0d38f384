"""The cluster as a shell or client sees it: node rows judged by the store's clock.

Nodes themselves decide who is dead by watching beat counters on their own monotonic clock
(:mod:`fabricjobs.node.liveness`); that takes a full dead threshold of watching, which a shell
that just started does not have. A shell therefore uses the age of each node's last beat by
the *store's* clock (the same clock stamped the beat), which needs no comparison with the
clock of the node that wrote it. The result is for display and for counting ownership
candidates; it never moves a job.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum
from typing import Iterable

from .affinity import Affinity, NodeAffinity
from .model import NodeState
from .store.base import JobStore, NodeRow



class Health(StrEnum):
    """A node as a shell judges it by the age of its last beat (the NODES state column)."""

    ALIVE = "alive"
    SUSPECT = "suspect"  # beats late, not yet past its dead threshold
    DEAD = "dead"
    STOPPED = "stopped"  # shut down cleanly


ALIVE, SUSPECT, DEAD, STOPPED = Health.ALIVE, Health.SUSPECT, Health.DEAD, Health.STOPPED


@dataclass(frozen=True)
class NodeView:
    row: NodeRow
    age: float  # seconds since the last beat, by the store's clock
    state: Health
    info: dict
    affinity: NodeAffinity

    @property
    def name(self) -> str:
        return self.row.name

    @property
    def is_live(self) -> bool:
        return self.state in (ALIVE, SUSPECT)

    @property
    def running(self) -> int:
        """Runs the node is running now: none once it is not live (what it last published
        is what it ran before it stopped or died; its runs are another node's business)."""
        return self.row.running if self.is_live else 0

    def running_by_affinity(self) -> dict:
        """:attr:`running` per affinity pool."""
        running = self.info.get("running") if self.is_live else None
        return running if isinstance(running, dict) else {}

    def tasks(self) -> list[dict]:
        """What the node runs now (PS): nothing once it is not live (see :attr:`running`)."""
        if not self.is_live:
            return []
        try:
            tasks = json.loads(self.row.tasks or "[]")
        except json.JSONDecodeError:
            return []
        return tasks if isinstance(tasks, list) else []


def progress_text(task: dict) -> str:
    """A task's reported progress as a percentage ("42%"), or "" when it reported none."""
    reported = task.get("progress")
    try:
        done, total = float(reported[0]), float(reported[1])  # type: ignore[index]
    except (TypeError, ValueError, IndexError):
        return ""
    return f"{min(max(done / total, 0.0), 1.0) * 100:.0f}%" if total > 0 else ""


def job_progress(key: str, epoch: int, node: "NodeView | None") -> str:
    """The progress the run ``(key, epoch)`` reported through ``node``'s published tasks."""
    if node is None:
        return ""
    task = next((t for t in node.tasks() if t.get("key") == key and t.get("epoch") == epoch), None)
    return progress_text(task) if task is not None else ""


def judge(row: NodeRow, age: float) -> Health:
    """alive within two beat intervals, suspect until the dead threshold, then dead."""
    if row.state == NodeState.STOPPED:
        return STOPPED
    info = _info(row)
    interval = float(info.get("heartbeat_ms", 5000)) / 1000.0
    miss = int(info.get("miss", 12))
    if age <= 2 * interval:
        return ALIVE
    if age < interval * miss:
        return SUSPECT
    return DEAD


def _info(row: NodeRow) -> dict:
    try:
        info = json.loads(row.info or "{}")
    except json.JSONDecodeError:
        return {}
    return info if isinstance(info, dict) else {}


def read_cluster(store: JobStore) -> list[NodeView]:
    rows = store.nodes()
    if not rows:
        return []
    now = store.store_time()
    out = []
    for row in rows:
        age = max(0.0, (now - row.beat_time).total_seconds()) if row.beat_time else float("inf")
        info = _info(row)
        out.append(NodeView(row, age, judge(row, age), info, NodeAffinity.from_info(row.name, row.dc, info)))
    return out


def candidates(nodes: Iterable[NodeView], affinity: Affinity, priority: int | None = None) -> int:
    """Live nodes allowed to run a job with this affinity (and PRIORITY, when given: node.id's
    PRIORITIES) (JOBSTATUS 'Ownership Candidates Num')."""
    return sum(1 for n in nodes if n.is_live and n.affinity.can_run(affinity)
               and (priority is None or n.affinity.serves(priority)))
