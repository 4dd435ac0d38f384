"""The nodes table and KILL requests: plain writes, no LWT (a node's row is written by that
node only; ``beat_time`` is set by the coordinator's clock, ``toTimestamp(now())``).

A node that is forgotten leaves with its KILL requests and its place in the index's owner
registry (k2_jobs_owners), which is why this part sits on the index.
"""

from __future__ import annotations

from datetime import datetime

from ...errors import StoreError
from ...model import NodeState
from ..base import KillRequest, NodeRow
from .index import Index
from .topology import LIVE_WITHIN_SEC, Peer, Placement, check_placement
from .rows import _aware, _when
from .session import log


#: Seconds between a node's registrations of its name in the owners registry (k2_jobs_owners),
#: made with its heartbeat: another node that forgets a dead node of the same name deletes the
#: name there, and may do so just after a new node of that name registered it.
OWNER_RENEW_SEC = 60.0


class Nodes(Index):
    """Node rows and the KILL requests addressed to them."""

    _placement: Placement
    _placement_checked: float | None  # (store.py: None once this process checks itself as a node)
    _owner_renewed: dict[str, float] = {}  # node name -> monotonic time this process last registered it

    def write_node(self, node: NodeRow, timeout: float | None = None) -> None:
        """(With where this process writes from: its DC and levels, for topology.py's rules.)
        Every OWNER_RENEW_SEC the node's name is written to the owners registry again, so that
        its buckets are listed even where a peer's delete of the name (for a node of the same
        name judged gone) covers its first registration: the old node's clock was ahead."""
        now = self._monotonic()
        if node.state != NodeState.STOPPED and now - self._owner_renewed.get(node.name, float("-inf")) >= OWNER_RENEW_SEC:
            # Before the beat: a peer that forgets this node deletes the name stamped with the
            # last beat it read, which then covers every registration of this node.
            try:
                self._register("owner", node.name, timeout)
            except StoreError as exc:  # the beat matters more (the lease): registered at a later one
                log.warning("could not register node %s in the owners registry (%s); trying again with its next "
                            "heartbeat", node.name, exc)
            else:
                self._owner_renewed = {**self._owner_renewed, node.name: now}
        stmt = self._stmt(("node",),
            "INSERT INTO nodes (name, incarnation, dc, host, pid, started, version, beat, beat_time, state, running,"
            " info, tasks, store_dc, store_serial, store_consistency)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, toTimestamp(now()), ?, ?, ?, ?, ?, ?, ?)")
        p = self._placement
        self._run(stmt, (node.name, node.incarnation, node.dc, node.host, node.pid, node.started,
                         node.version, node.beat, node.state, node.running, node.info, node.tasks,
                         p.dc, p.serial, p.consistency), timeout)

    def check_placement(self, me: str, started: datetime) -> None:
        """PlacementError if this node, started at ``started``, writes beside an older live
        node in a way topology.py refuses (two nodes started together both passed the check
        at open: the younger stops)."""
        self._placement_checked = None  # a node: judged by this rule, not by the one of a shell's writes
        older = [p for p in self._peers() if p.name != me and p.started is not None
                 and (p.started, p.name) < (started, me)]
        check_placement(self._placement, older)

    def _peers(self, timeout: float | None = None) -> list[Peer]:
        """The live nodes (beaten within LIVE_WITHIN_SEC, not stopped) and where they write from."""
        rows = self._run(self._stmt(("peers",), "SELECT name, state, beat_time, started, store_dc, store_serial,"
                                                " store_consistency FROM nodes"), (), timeout)
        now = self.store_time()
        return [Peer(r["name"], Placement(r["store_dc"] or "", r["store_consistency"] or "", r["store_serial"] or ""),
                     _aware(r["started"]))
                for r in rows if r["state"] != NodeState.STOPPED and r["beat_time"] is not None
                and (now - _when(r["beat_time"])).total_seconds() < LIVE_WITHIN_SEC]

    _NODE_COLUMNS = ("SELECT name, incarnation, dc, host, pid, started, version, beat, beat_time, state, running,"
                     " info, tasks, WRITETIME(beat) AS stamp FROM nodes")

    def nodes(self, timeout: float | None = None) -> list[NodeRow]:
        rows = self._run(self._stmt(("nodes",), self._NODE_COLUMNS), (), timeout)
        return sorted((_node_row(r) for r in rows), key=lambda n: n.name)

    def node(self, name: str, timeout: float | None = None) -> NodeRow | None:
        rows = list(self._run(self._stmt(("node1",), f"{self._NODE_COLUMNS} WHERE name = ?"), (name,), timeout))
        return _node_row(rows[0]) if rows else None

    def delete_node(self, row: NodeRow) -> None:
        """A delete stamped with the read beat's own write time: it hides that beat and older
        cells, never a beat written after it (a later client timestamp), whatever the clock of
        the host that deletes. No LWT: the row only ever gets plain writes."""
        if row.stamp is None:
            return
        self._run(self._stmt(("ndel",), "DELETE FROM nodes USING TIMESTAMP ? WHERE name = ?"), (row.stamp, row.name))
        # Its KILL requests go whatever their age: none can reach a node gone this long, and
        # a node that starts under this name clears its own anyway.
        self._run(self._stmt(("kdelall",), "DELETE FROM kill_requests WHERE node = ?"), (row.name,))
        # And its place in the owners registry: the node layer forgets a node only once it
        # owns nothing, so no bucket of its name is left to list (a node that comes back
        # under this name registers again with its first entry). The registry stays as small
        # as the set of nodes alive within the retention.
        # Stamped like the row's delete, never by this host's clock: a node started under the
        # name since keeps its registration (made after that beat), unless the old node's clock
        # was ahead of its own; then its heartbeat registers it again (write_node).
        self._run(self._stmt(("odel",), "DELETE FROM k2_jobs_owners USING TIMESTAMP ? WHERE kind = 'owner' AND owner = ?"),
                  (row.stamp, row.name))
        self._owners_known.discard(("owner", row.name))
        self._registry_read.pop("owner", None)

    def add_kill_request(self, request: KillRequest) -> None:
        stmt = self._stmt(("kput",), "INSERT INTO kill_requests (node, task, requested_at, requested_by) VALUES (?, ?, ?, ?)")
        self._run(stmt, (request.node, request.task, request.requested_at, request.requested_by))

    def kill_requests(self, node: str) -> list[KillRequest]:
        rows = self._run(self._stmt(("ksel",), "SELECT * FROM kill_requests WHERE node = ?"), (node,))
        return [KillRequest(r["node"], r["task"], _when(r["requested_at"]), r["requested_by"]) for r in rows]

    def delete_kill_request(self, node: str, task: int) -> None:
        self._run(self._stmt(("kdel",), "DELETE FROM kill_requests WHERE node = ? AND task = ?"), (node, task))


def _node_row(r) -> NodeRow:
    return NodeRow(r["name"], r["incarnation"], r["dc"], r["host"], r["pid"], _when(r["started"]), r["version"],
                   r["beat"], r["state"], r["running"], r["info"], r["tasks"], _aware(r["beat_time"]), r["stamp"])
