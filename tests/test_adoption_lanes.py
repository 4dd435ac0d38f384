"""New SCHEDULED jobs are adopted in claim lanes (docs/explanation/nodes.md, "Claim lanes"):
with two live nodes each takes ownership of its own lane's new cron jobs, and another lane's
only once that lane's node has had its wait. Before, every node tried to adopt every new row,
and all but one lost each compare-and-set (on Cassandra a wasted LWT per node and row)."""

from __future__ import annotations

import pytest

from fabricjobs.model import JobKey
from fabricjobs.node.lanes import Lanes
from harness import free_port, wait_for

PORT = free_port()
ALIVE = ["a", "b"]


def test_unowned_rows_are_adopted_in_lanes_the_others_after_the_wait():
    from datetime import datetime, timezone

    from fabricjobs.model import Job, Status

    rows = [Job(JobKey("USER_JOB", "A.b", f"r{i}"), Status.SCHEDULED, datetime(2026, 1, 1, tzinfo=timezone.utc))
            for i in range(20)]
    mine = [r for r in rows if r.key.lane(2) == 0]
    theirs = [r for r in rows if r.key.lane(2) == 1]
    a = Lanes("a", 0.2)
    assert a.adoptable(rows, ALIVE, now=10.0) == mine and a.adopt_wake == 10.2
    assert a.adoptable(theirs, ALIVE, now=10.1) == [] and a.adopt_wake == 10.2  # first seen at 10.0
    assert a.adoptable(theirs, ALIVE, now=10.3) == theirs and a.adopt_wake is None
    assert Lanes("b", 0.2).adoptable(rows, ALIVE, now=10.0) == theirs
    assert Lanes("a", 0.2).adoptable(rows, ["a"], now=10.0) == rows  # alone: every row
    a.takeover([], ALIVE, now=10.0)  # the takeover's sightings are apart from these
    assert a.adoptable(theirs, ALIVE, now=10.5) == theirs


@pytest.mark.slow
@pytest.mark.parametrize("cluster", [{"metrics": {"PORT": PORT}, "jobs": {"LANE_PATIENCE_MS": 10000}}], indirect=True)
def test_two_nodes_adopt_a_scripts_new_cron_jobs_each_its_own_lane(cluster):
    """A patience of 10 s leaves each node's lane to it well past a loaded machine's stalls, so
    who owns each job says whether the nodes adopted in lanes or raced for every row."""
    cluster.start_pair(PORT)
    uids = [f"y{i:02d}" for i in range(40)]
    cluster.fetch("".join(f"startjob user_job name='Probe.noop' uid='{u}' exec_interval='0 0 0 1 1 *';" for u in uids))
    wait_for(lambda: all(cluster.job("USER_JOB", "Probe.noop", u).worker_id for u in uids), 10, "every job to be owned")
    owners = {u: cluster.job("USER_JOB", "Probe.noop", u).worker_id for u in uids}
    wrong = {u: o for u, o in owners.items() if o != ALIVE[JobKey("USER_JOB", "Probe.noop", u).lane(2)]}
    assert not wrong, wrong
    assert set(owners.values()) == {"a", "b"}
