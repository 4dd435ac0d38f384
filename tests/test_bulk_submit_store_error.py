"""A script's STARTJOBs on Cassandra, where a group's inserts go out together and no
transaction undoes them: a store error at one job must say which jobs were written, since the
script's error is all its user sees (docs/guides/scripts-and-code.md, "Bulk submits")."""

from __future__ import annotations

import json
import logging
import warnings

import pytest

from fabricjobs.client import Client
from fabricjobs.config import load_config
from fabricjobs.errors import InsertInterrupted, JobAlreadyRunning, StoreError
from fabricjobs.model import JobKey
from fabricjobs.store import open_store
from backends import add_sections
from harness import ROOT

NAME = "Customer.userJob1"


@pytest.fixture
def cfg(store_config, request):
    if not request.node.callspec.params["store_config"].startswith("cassandra"):
        pytest.skip("SQLite writes a script's group in one transaction: an error keeps none of it")
    add_sections(store_config, {"jobs": {"USER_JOBS_DIR": ROOT / "examples" / "jobs"}})
    return load_config(store_config)


@pytest.fixture
def client(cfg):
    c = Client(open_store(cfg), cfg, owns_store=True)
    yield c
    c.close()


def _failing(store, uids: dict[str, Exception]) -> None:
    """The store's insert of each of ``uids`` fails with its exception, nothing written (as a
    request the store refused to run: Unavailable, no host)."""
    real = store.insert

    def insert(job):
        if job.key.uid in uids:
            raise uids[job.key.uid]
        return real(job)

    store.insert = insert


def _script(uids) -> str:
    return "".join(f"startjob user_job name='{NAME}' uid='{u}';" for u in uids)


def _written(store, uids) -> set[str]:
    return {u for u in uids if store.get(JobKey("USER_JOB", NAME, u)) is not None}


def _keys(uids) -> str:
    return ", ".join(f"USER_JOB.{NAME}.{u}" for u in uids)


def test_a_store_error_mid_script_names_the_job_and_every_job_written_after_it(client):
    uids = [f"j{i}" for i in range(8)]
    _failing(client.store, {"j3": StoreError("Cassandra did not answer (test)"),
                            "j6": StoreError("Cassandra did not answer (test)")})
    with pytest.raises(InsertInterrupted) as err:
        client.fetch(_script(uids))
    assert _written(client.store, uids) == set(uids) - {"j3", "j6"}, "the inserts after the failed one went out with it"
    assert str(err.value) == (
        f"STARTJOB of USER_JOB.{NAME}.j3 failed (Cassandra did not answer (test)); it may or may not be written. "
        f"The jobs before it in the script were written; 3 after it were written all the same: {_keys(['j4', 'j5', 'j7'])}; "
        f"1 after it failed too: {_keys(['j6'])}. Nothing after this group ran")
    assert (err.value.failed, err.value.written, err.value.also_failed) == (
        f"USER_JOB.{NAME}.j3", tuple(f"USER_JOB.{NAME}.j{i}" for i in (4, 5, 7)), (f"USER_JOB.{NAME}.j6",))


def test_the_failed_job_can_be_submitted_again_and_the_ones_named_are_refused(client):
    _failing(client.store, {"j1": StoreError("Cassandra did not answer (test)")})
    with pytest.raises(InsertInterrupted):
        client.fetch(_script(["j0", "j1", "j2"]))
    del client.store.insert  # the store answers again
    assert client.fetch(f"startjob user_job name='{NAME}' uid='j1';").first_row()["Status"] == "WAITING"
    with pytest.raises(JobAlreadyRunning, match=rf"Job is running \[type: USER_JOB, name: {NAME}, uid: j2\]"):
        client.fetch(f"startjob user_job name='{NAME}' uid='j2';")


def test_a_refusal_before_the_error_is_what_the_script_reports_and_the_error_is_logged(client, caplog):
    uids = [f"r{i}" for i in range(5)]
    client.fetch(f"startjob user_job name='{NAME}' uid='r1';")
    racing = client.store.get_many

    def blind(keys):  # r1 created by another writer just after the group read its keys
        return [None if k.uid == "r1" else row for k, row in zip(keys, racing(keys))]

    client.store.get_many = blind
    _failing(client.store, {"r3": StoreError("Cassandra did not answer (test)")})
    with caplog.at_level(logging.WARNING, logger="fabricjobs.store.cassandra"):
        with pytest.raises(JobAlreadyRunning, match=r"uid: r1\]"):
            client.fetch(_script(uids))
    assert _written(client.store, uids) == {"r0", "r1", "r2", "r4"}
    logged = caplog.text
    assert f"STARTJOB of USER_JOB.{NAME}.r3 failed after a refusal before it in its group" in logged, logged
    assert f"USER_JOB.{NAME}.r2, USER_JOB.{NAME}.r4" in logged, logged


def test_a_bug_in_one_insert_is_raised_as_it_is_not_as_a_store_error(client):
    _failing(client.store, {"b1": KeyError("a bug")})
    with pytest.raises(KeyError):
        client.fetch(_script(["b0", "b1", "b2"]))


def test_the_http_api_answers_502_with_what_was_written(cfg):
    from fabricjobs.web.app import Api, KeepSegments, create_app
    from fabricjobs.web.tokens import Role, TokenFile

    api = Api(open_store(cfg), cfg, TokenFile(cfg.get("web", "TOKENS_FILE")))
    try:
        token = api.tokens.create("root", Role.ADMIN)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from fastapi.testclient import TestClient
        web = TestClient(KeepSegments(create_app(api)), raise_server_exceptions=False)
        _failing(api.store, {"w1": StoreError("Cassandra did not answer (test)")})
        answer = web.post("/api/v1/commands", headers={"Authorization": f"Bearer {token}"},
                          json={"text": _script(["w0", "w1", "w2"])})
        assert answer.status_code == 502, answer.text
        body = answer.json()
        assert (body["error"], body["failed"], body["written"], body["also_failed"]) == (
            "InsertInterrupted", f"USER_JOB.{NAME}.w1", [f"USER_JOB.{NAME}.w2"], [])
    finally:
        api.store.close()


def test_a_parallel_job_written_partway_says_how_to_clean_it_up(client):
    _failing(client.store, {"p/1": StoreError("Cassandra did not answer (test)")})
    with pytest.raises(StoreError) as err:
        client.fetch(f"startjob user_job name='{NAME}' uid='p' parallelism=3;")
    message = str(err.value)
    assert message.startswith(f"STARTJOB of USER_JOB.{NAME}.p (PARALLELISM=3) failed partway: STARTJOB of "
                              f"USER_JOB.{NAME}.p/1 failed"), message
    assert message.endswith(f"STOPJOB USER_JOB NAME='{NAME}' UID='p' (its tasks stop with it), then start it again"), message
    del client.store.insert
    client.fetch(f"stopjob user_job name='{NAME}' uid='p';")
    assert client.fetch(f"startjob user_job name='{NAME}' uid='p' parallelism=3;").first_row()["Status"] == "WAITING"


def test_a_parallel_jobs_task_refused_mid_group_is_the_one_named(client):
    client.fetch(f"startjob user_job name='{NAME}' uid='q/1';")  # another writer's, just now
    real_get, real_many = client.store.get, client.store.get_many
    client.store.get = lambda key, *a, **kw: None if key.uid == "q/1" else real_get(key, *a, **kw)
    client.store.get_many = lambda keys: [None if k.uid == "q/1" else r for k, r in zip(keys, real_many(keys))]
    with pytest.raises(JobAlreadyRunning, match=r"uid: q/1\]"):
        client.fetch(f"startjob user_job name='{NAME}' uid='q' parallelism=3;")


def test_a_shell_that_goes_on_after_the_error_does_not_write_the_jobs_sent_with_it_again(client):
    """--continue-on-error: the statements whose inserts went out with the failed one are past;
    run again they would be refused (or, without a UID, written twice)."""
    import io

    from fabricjobs.shell.script import run_text

    _failing(client.store, {"c1": StoreError("Cassandra did not answer (test)")})
    out, err, started = io.StringIO(), io.StringIO(), io.StringIO()
    code = run_text(client, _script(["c0", "c1", "c2", "c3"]) + "startjob user_job name='Customer.userJob1';"
                    "jobstatus user_job;", out, err, continue_on_error=True, started=started)
    assert code == 1
    assert err.getvalue().count("\n") == 1 and err.getvalue().startswith(f"STARTJOB of USER_JOB.{NAME}.c1 failed"), \
        err.getvalue()
    live = [j.uid for j in client.store.live_jobs(type="USER_JOB", name=NAME)]
    assert sorted(u for u in live if u in ("c0", "c1", "c2", "c3")) == ["c0", "c2", "c3"] and len(live) == 4, live
    assert out.getvalue().rstrip().endswith("(4 rows)")
    # --started-jobs lists every job that will run: those written after the failed one too
    noted = [json.loads(line) for line in started.getvalue().splitlines()]
    assert sorted(n["uid"] for n in noted) == sorted(live), noted
    assert all(n["type"] == "USER_JOB" and n["name"] == NAME for n in noted)
