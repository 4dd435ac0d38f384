"""Outcomes written together (the node's group commit, cas_each with whole rows) when one of
their lightweight transactions fails: the others have applied on Cassandra before the batch
raised, and cas_each then sends each pair again. Those are the same changes sent again: they
must be reported applied and keep their runs' history lines, not be taken for writes another
node's change beat (which deletes the line a fenced run wrote)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from fabricjobs.model import Status
from fabricjobs.store.base import RunRecord
from test_cassandra_resend import OUTCOME_LWT, T0, _claimed


def test_outcomes_of_a_group_whose_other_write_failed_keep_their_runs_history(store, request):
    if request.node.callspec.params.get("store_config") != "cassandra":
        pytest.skip("needs the CQL test server's faults: one LWT of a group refused")
    server = request.getfixturevalue("cql_server")
    claimed = [_claimed(store, f"g{i}") for i in range(4)]
    end = T0 + timedelta(seconds=1)
    pairs = [(row, row.replace(status=Status.PROCESSED, archived=True, end_time=end)) for row in claimed]
    lines = [RunRecord(row.key, row.epoch, "n1", T0, T0, end, "OK", "PROCESSED", 0, output=f"out {row.key.uid}")
             for row in claimed]
    # One of the four outcome LWTs finds too few replicas for its Paxos round (nothing proposed).
    server.faults.unavailable(OUTCOME_LWT, at_serial=True, times=1, statements="lwt")
    try:
        results = store.cas_each(pairs, lines, whole=True)
    finally:
        server.faults.clear()
    assert [store.get(row.key).status for row in claimed] == [Status.PROCESSED] * 4
    assert [store.run(row.key, row.epoch) is not None for row in claimed] == [True] * 4, "a run's history line was deleted"
    assert [r is not None and r.applied for r in results] == [True] * 4, results
