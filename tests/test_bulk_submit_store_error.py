"""A script's STARTJOBs on Cassandra, where a group's inserts go out together and no
transaction undoes them: a store error at one job must say which jobs were written, since the
script's error is all its user sees (docs/guides/scripts-and-code.md)."""

from __future__ import annotations

import pytest

from fabricjobs.client import Client
from fabricjobs.config import load_config
from fabricjobs.errors import InsertInterrupted, JobAlreadyRunning, StoreError
from fabricjobs.model import JobKey
from fabricjobs.store import open_store
from backends import add_sections
from harness import ROOT


@pytest.fixture
def client(store_config, request):
    if not request.node.callspec.params["store_config"].startswith("cassandra"):
        pytest.skip("SQLite writes a script's group in one transaction: an error keeps none of it")
    add_sections(store_config, {"jobs": {"USER_JOBS_DIR": ROOT / "examples" / "jobs"}})
    cfg = load_config(store_config)
    c = Client(open_store(cfg), cfg, owns_store=True)
    yield c
    c.close()


def _failing_at(client, uid: str) -> None:
    """The store's insert of ``uid`` fails as a timed-out request does: nothing written."""
    real = client.store.insert

    def insert(job):
        if job.key.uid == uid:
            raise StoreError("Cassandra did not answer in time (test)")
        return real(job)

    client.store.insert = insert


def test_a_store_error_mid_script_names_the_job_and_every_job_written_after_it(client):
    uids = [f"j{i}" for i in range(8)]
    _failing_at(client, "j3")
    with pytest.raises(InsertInterrupted) as err:
        client.fetch("".join(f"startjob user_job name='Customer.userJob1' uid='{u}';" for u in uids))
    message = str(err.value)
    assert "STARTJOB of USER_JOB.Customer.userJob1.j3 failed: Cassandra did not answer in time (test)" in message, message
    written = {u for u in uids if client.store.get(JobKey("USER_JOB", "Customer.userJob1", u)) is not None}
    assert written == set(uids) - {"j3"}, "the inserts after the failed one went out with it"
    assert message.endswith("the jobs before it were written, and 4 after it in the same group were written all "
                            "the same: " + ", ".join(f"USER_JOB.Customer.userJob1.j{i}" for i in range(4, 8))), message


def test_the_job_that_failed_can_be_submitted_again_and_the_others_are_refused(client):
    _failing_at(client, "j1")
    with pytest.raises(InsertInterrupted):
        client.fetch("".join(f"startjob user_job name='Customer.userJob1' uid='j{i}';" for i in range(3)))
    del client.store.insert  # the store answers again
    assert client.fetch("startjob user_job name='Customer.userJob1' uid='j1';").first_row()["Status"] == "WAITING"
    with pytest.raises(JobAlreadyRunning, match=r"Job is running \[type: USER_JOB, name: Customer.userJob1, uid: j2\]"):
        client.fetch("startjob user_job name='Customer.userJob1' uid='j2';")
