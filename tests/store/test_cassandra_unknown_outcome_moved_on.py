"""An outcome whose LWT applied but whose answer was lost, and whose row another change moved on
before the SERIAL read that settles it (a STARTJOB of the archived key, a moment later): the
read cannot tell "applied, then moved on" from "beaten by another change", so the run's history
line, written before the LWT, must stay (a fenced run's line is the lesser wrong), not be deleted
as a fenced run's (docs/explanation/cassandra-data-model.md, "Unknown LWT outcomes")."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest

from fabricjobs.model import Status
from fabricjobs.store.base import RunRecord
from fabricjobs.store.cassandra.rows import as_stored
from harness import wait_for
from test_cassandra_resend import OUTCOME_LWT, T0, _claimed


def test_an_applied_outcome_whose_row_moved_on_before_it_was_settled_keeps_its_history_line(store, request):
    if request.node.callspec.params.get("store_config") != "cassandra":
        pytest.skip("needs the CQL test server's faults: an LWT that applies and whose answer is lost")
    server = request.getfixturevalue("cql_server")
    claimed = _claimed(store, "moved")
    end = T0 + timedelta(seconds=1)
    done = claimed.replace(status=Status.PROCESSED, archived=True, end_time=end)
    line = RunRecord(claimed.key, claimed.epoch, "n1", T0, T0, end, "OK", "PROCESSED", 0, output="the run's output")
    applied = server.faults.write_timeout(OUTCOME_LWT, applied=True, times=1)
    # The settling reads go unanswered for a while (about 0.75 s), long enough for the next change.
    server.faults.add("read_timeout", r"SELECT .* FROM \w+\.k2_jobs WHERE", times=4, statements="read")

    def start_again() -> None:
        """A STARTJOB of the key as soon as the outcome archived it (a new life of the row)."""
        wait_for(lambda: applied.fired, 10, "the outcome's LWT")
        archived = as_stored(done.replace(revision=claimed.revision + 1))
        store.cas(archived, archived.replace(status=Status.WAITING, archived=False, creation_time=end,
                                             next_run=end, end_time=None, worker_id=None))

    other = threading.Thread(target=start_again)
    other.start()
    try:
        result = store.cas_many([(claimed, done)], [line], whole=True)[0]
    finally:
        other.join()
        server.faults.clear()
    assert store.get(claimed.key).revision == claimed.revision + 2  # the outcome applied, then the STARTJOB
    assert not result.applied  # (what the settling read can say)
    assert store.run(claimed.key, claimed.epoch) is not None, "the run's history line was deleted"
