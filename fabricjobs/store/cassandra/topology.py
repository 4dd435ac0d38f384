"""Which settings are safe on which Cassandra topology, checked when a store is opened
(docs/guides/cassandra.md, "Settings per topology").

* Replication: a keyspace created with the default on a cluster of more than one Cassandra
  node would get one replica (SimpleStrategy:1): every node of that cluster would be a single
  point of failure for its share of the jobs. The default is only taken on a one-node cluster;
  a larger one needs ``[cassandra] REPLICATION`` set.
* ``LOCAL_DC``: with several data centres the driver would otherwise pick the one of the first
  contact point that answers, and LOCAL_* levels would mean a different DC on each host.
* ``LOCAL_SERIAL`` / ``LOCAL_QUORUM``: a Paxos round at LOCAL_SERIAL involves only the local
  DC's replicas, so two processes in two DCs can both win a claim of one job; and a read at
  LOCAL_QUORUM does not see what another DC wrote a moment ago. They are safe only while every
  fabricjobs process that writes is in one DC. Each node's row in ``nodes`` says its DC and its
  serial level; a process refuses to open the store when it would mix local levels with a
  live node of another DC, in either direction.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Iterable, Sequence

from ...errors import PlacementError, StoreError

#: A node row beaten within this long counts as a live node for these rules (a crashed node's
#: row stays until its peers forget it; it must not block others for longer than this).
LIVE_WITHIN_SEC = 120.0


@dataclass(frozen=True)
class Placement:
    """Where a process writes from: its Cassandra DC and the levels it writes at."""

    dc: str
    consistency: str
    serial: str

    @property
    def local(self) -> bool:
        return self.serial == "LOCAL_SERIAL" or self.consistency.startswith("LOCAL_")


@dataclass(frozen=True)
class Peer:
    """A live fabricjobs node, and where its row says it writes from."""

    name: str
    at: Placement
    started: datetime | None = None


def local_dc(configured: str, datacenters: Iterable[str]) -> str:
    """The DC this process is in: ``[cassandra] LOCAL_DC``, which must name a DC of the cluster
    and may be left empty only on a cluster of one DC."""
    dcs = sorted({dc for dc in datacenters if dc})
    if configured:
        if dcs and configured not in dcs:
            raise StoreError(f"[cassandra] LOCAL_DC = {configured}: not a data centre of this Cassandra cluster "
                             f"(it has {', '.join(dcs)})")
        return configured
    if len(dcs) > 1:
        raise StoreError(f"[cassandra] LOCAL_DC is required: this Cassandra cluster has data centres {', '.join(dcs)}; "
                         "name the one this host is in")
    return dcs[0] if dcs else ""


def replication_for(configured: str, cassandra_nodes: int) -> str:
    """The replication a new keyspace is created with: ``[cassandra] REPLICATION``, or one
    replica when it is empty and the cluster has one node."""
    if configured:
        return configured
    if cassandra_nodes > 1:
        raise StoreError(f"[cassandra] REPLICATION is required to create the keyspace on a cluster of {cassandra_nodes} "
                         "Cassandra nodes (one replica would make each node a single point of failure): e.g. "
                         "NetworkTopologyStrategy:<DC>=3")
    return "SimpleStrategy:1"


def check_placement(me: Placement, peers: Sequence[Peer]) -> None:
    """StoreError if writing from ``me`` beside the live ``peers`` could let two DCs each win
    a claim of one job (LOCAL_SERIAL / LOCAL_QUORUM across DCs)."""
    others = [p for p in peers if p.at.dc and me.dc and p.at.dc != me.dc]
    if not others:
        return
    if me.local:
        raise PlacementError(
            f"[cassandra] SERIAL_CONSISTENCY = {me.serial}, CONSISTENCY = {me.consistency} are local to data centre "
            f"{me.dc}, but fabricjobs nodes run in {', '.join(sorted({p.at.dc for p in others}))} too "
            f"({', '.join(p.name for p in others[:5])}): two DCs could each claim the same job. Use SERIAL and "
            "QUORUM on every node of a cluster that spans data centres")
    local = [p for p in others if p.at.local]
    if local:
        at = local[0].at
        raise PlacementError(
            f"fabricjobs nodes in data centre {at.dc} ({', '.join(p.name for p in local[:5])}) write at "
            f"{at.serial}/{at.consistency}, which is local to their DC: a node in {me.dc} beside them "
            "could claim the same job. Set SERIAL and QUORUM on every node first")
