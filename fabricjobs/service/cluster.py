"""The commands about nodes rather than jobs: PS, KILL and NODES.

PS and KILL are routed to the node layer through the store: nodes publish their tasks in
their ``nodes`` row, and a KILL is a request row that the target node carries out.
"""

from __future__ import annotations

from typing import Iterable

from ..cluster import NodeView, progress_text, read_cluster
from ..commands import statements
from ..errors import NodeNotFound, TaskNotFound
from ..result import Result
from ..store.base import KillRequest
from .core import ServiceCore
from .session import Session, requester

PS_COLUMNS = ("dc", "node", "task", "thread", "type", "description", "duration (ms)", "progress")
NODES_COLUMNS = ("node", "dc", "host", "pid", "state", "last beat (s)", "running", "capacity", "version", "started")
NODES_DETAIL_COLUMNS = NODES_COLUMNS + ("incarnation", "beat", "heartbeat", "time zone", "addresses", "priorities",
                                        "tasks", "isolation")


class ClusterCommands(ServiceCore):
    """PS, KILL and NODES."""

    # -- PS / KILL -----------------------------------------------------------------------------

    def ps(self, cmd: statements.Ps, session: Session) -> Result:
        nodes = [n for n in read_cluster(self.store) if n.is_live]
        if not cmd.all:
            current = session.node or _only_local_node(nodes)
            if current is not None:
                nodes = [n for n in nodes if n.name == current]
                if not nodes:
                    raise NodeNotFound(f"node {current!r} is not alive")
        rows = []
        for n in nodes:
            for t in n.tasks():
                elapsed = int(t.get("elapsed_ms", 0)) + int(n.age * 1000)
                rows.append((n.row.dc, n.name, t.get("task"), t.get("thread"), t.get("type", "JOB"),
                             t.get("description", ""), elapsed, progress_text(t)))
        rows.sort(key=lambda r: (r[1], r[2]))
        return Result(PS_COLUMNS, tuple(rows))

    def kill(self, cmd: statements.Kill, session: Session) -> Result:
        nodes = {n.name: n for n in read_cluster(self.store)}
        node = nodes.get(cmd.node)
        if node is None or not node.is_live:
            known = ", ".join(n for n, v in nodes.items() if v.is_live) or "none"
            raise NodeNotFound(f"no live node {cmd.node!r} (live nodes: {known})")
        task = next((t for t in node.tasks() if t.get("task") == cmd.task), None)
        if task is None:
            raise TaskNotFound(f"node {cmd.node!r} has no task {cmd.task} (see PS)")
        self.store.add_kill_request(KillRequest(cmd.node, cmd.task, self.clock.now(), requester(session)))
        self._ring()
        return Result(status=f"KILL sent to node {cmd.node} for task {cmd.task} ({task.get('description', '')})")

    # -- NODES -----------------------------------------------------------------------------------

    def nodes(self, cmd: statements.Nodes, session: Session) -> Result:
        if cmd.details:
            return self._node_details()
        rows = []
        for n in read_cluster(self.store):
            running = n.running_by_affinity()
            parts = []
            for name, lim in sorted(n.affinity.limits.items()):
                cap = f"{lim.recommended}" if lim.recommended == lim.absolute else f"{lim.recommended} (max {lim.absolute})"
                parts.append(f"{name} {running.get(name, 0)}/{cap}")
            rows.append((
                n.name, n.row.dc, n.row.host, n.row.pid, n.state, round(n.age, 1), n.running,
                ", ".join(parts), n.row.version, n.row.started,
            ))
        return Result(NODES_COLUMNS, tuple(rows))

    def _node_details(self) -> Result:
        rows = []
        base = self.nodes(statements.Nodes(), Session())
        for n, row in zip(read_cluster(self.store), base.rows):
            hb = f"{n.info.get('heartbeat_ms', '?')} ms x {n.info.get('miss', '?')}"
            tasks = "; ".join(f"{t.get('task')} {t.get('description', '')}" for t in n.tasks())
            addresses = ", ".join(sorted(n.affinity.addresses)) or "-"  # what a job's AFFINITY may name
            rows.append(row + (n.row.incarnation, n.row.beat, hb, n.info.get("zone", ""), addresses,
                               n.affinity.priorities_text, tasks or "-", n.info.get("isolation") or "-"))
        return Result(NODES_DETAIL_COLUMNS, tuple(rows), vertical=True)


def _only_local_node(nodes: Iterable[NodeView]) -> str | None:
    import socket

    host = socket.gethostname()
    local = [n.name for n in nodes if n.row.host == host]
    return local[0] if len(local) == 1 else None

