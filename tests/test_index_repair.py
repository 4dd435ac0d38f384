"""The index repair pass on Apache Cassandra: live rows whose k2_jobs_index entry was deleted
behind the nodes' backs (raw CQL) are found by the pass, given their entry again, and run; the
metric counts them (docs/explanation/cassandra-queue.md, "Repair")."""

from __future__ import annotations

import json

import pytest

import backends
from backends import BACKENDS
from harness import free_port, read_records, scrape_metrics, wait_for
from fabricjobs.config import load_config
from fabricjobs.model import JobKey, Status

pytestmark = [pytest.mark.real_cassandra,
              pytest.mark.skipif("cassandra-real" not in BACKENDS, reason="the index is Apache Cassandra's (real tier)")]

PORT = free_port()


@pytest.fixture
def node_backend():
    return "cassandra-real"


def _keyspace(cluster) -> str:
    return load_config(cluster.config_path).get("cassandra", "KEYSPACE")


def _count_entries(cluster, uid: str) -> int:
    ks = _keyspace(cluster)
    return sum(1 for r in backends._admin_session().execute(f"SELECT uid FROM {ks}.k2_jobs_index") if r.uid == uid)


def _drop_entries(cluster, uids: list[str]) -> int:
    """Delete the index entries of these jobs with plain CQL, as an operator (or a bug) might."""
    session, ks = backends._admin_session(), _keyspace(cluster)
    entries = [r for r in session.execute(f"SELECT bucket, shard, next_run, type, name, uid, revision FROM {ks}.k2_jobs_index")
               if r.uid in uids]
    for r in entries:
        session.execute(f"DELETE FROM {ks}.k2_jobs_index WHERE bucket = %s AND shard = %s AND next_run = %s AND type = %s"
                        " AND name = %s AND uid = %s AND revision = %s",
                        (r.bucket, r.shard, r.next_run, r.type, r.name, r.uid, r.revision))
    return len(entries)


@pytest.mark.parametrize("cluster", [{"metrics": {"PORT": PORT},
                                      "cassandra": {"INDEX_REPAIR_PAUSE_SEC": 1, "INDEX_REPAIR_ROWS_PER_SEC": 2000}}],
                         indirect=True)
def test_jobs_whose_index_entries_were_deleted_are_found_by_the_repair_pass_and_run(cluster, tmp_path):
    log = tmp_path / "runs.jsonl"
    client = cluster.client()
    args = json.dumps({"log": str(log)})
    uids = [f"lost{i:02d}" for i in range(30)]
    # Submitted while no node runs: they wait, and their entries are taken away.
    client.fetch("".join(f"startjob user_job name='Probe.record' uid='{u}' args='{args}';" for u in uids))
    assert _drop_entries(cluster, uids) == 30
    assert client.store.waiting(100) == []  # no node can see them now
    cluster.start_node("n1")
    rows = lambda: client.store.get_many([JobKey("USER_JOB", "Probe.record", u) for u in uids])  # noqa: E731
    wait_for(lambda: all(r is not None and r.status is Status.PROCESSED for r in rows()), 30,
             "every job whose entry was lost to run")
    assert sorted(r["key"].rsplit(".", 1)[1] for r in read_records(log)) == uids  # each once
    metrics = scrape_metrics(PORT)
    assert metrics["fabricjobs_store_index_restored_total"] == 30
    assert metrics["fabricjobs_store_repair_rows_total"] >= 30
    assert "had lost their index entry" in cluster.nodes["n1"].log()
    # And while a node runs: a job scheduled a year ahead, owned by the node, loses its entry;
    # the next pass gives it back.
    client.fetch("startjob user_job name='Probe.record' uid='later' exec_interval='2027-12-01 00:00:00';")
    cluster.wait_job("USER_JOB", "Probe.record", "later", lambda j: j.status is Status.SCHEDULED and j.worker_id, 15)
    # Its entry, and maybe the one of its row as it was before the adoption: that one is deleted
    # after the adoption's LWT has answered, which the row read above may come before.
    assert _drop_entries(cluster, ["later"]) in (1, 2)
    # (at least: a repair pass may restore it between the read and the delete above, and again)
    wait_for(lambda: scrape_metrics(PORT)["fabricjobs_store_index_restored_total"] >= 31, 20,
             "the scheduled job's entry to be restored")
    assert _count_entries(cluster, "later") == 1
