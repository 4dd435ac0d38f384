"""Command semantics (docs/reference/statements.md) through the client API, on a real store, without nodes."""

from __future__ import annotations

import json
import sys
from datetime import datetime, timedelta, timezone

import pytest

from fabricjobs.client import Client
from fabricjobs.clock import ManualClock
from fabricjobs.config import load_config
from fabricjobs.errors import (
    CalendarNotFound,
    CommandSyntaxError, JobAlreadyRunning, JobNotFound, NodeNotFound, TaskNotFound, ValidationError,
)
from fabricjobs.model import JobKey, Status
from fabricjobs.store import open_store
from backends import add_sections
from harness import ROOT, TESTS

UTC = timezone.utc
T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


@pytest.fixture
def client(store_config, tmp_path):
    add_sections(store_config, {
        "jobs": {"USER_JOBS_DIR": ROOT / "examples" / "jobs", "PROCESS_JOBS_DIR": ROOT / "examples" / "process_jobs", "USER_JOB_MODULES": "json"},
        "node": {"TIME_ZONE": "UTC"},
    })
    cfg = load_config(store_config)
    c = Client(open_store(cfg), cfg, ManualClock(T0), owns_store=True)
    yield c
    c.close()


def row(client, type="USER_JOB", name="Customer.userJob1", uid="uid_test"):
    return client.store.get(JobKey(type, name, uid))


# -- the seed's transcripts -------------------------------------------------------------------

def test_the_seeds_two_startjob_transcript(client):
    cmd = "startjob user_job name='Customer.userJob1' args='{\"loopsIterationCount\":\"2000\"}' UID='uid_test';"
    first = client.fetch(cmd)
    assert first.columns == ("Type", "Name", "UID", "Status", "Notes")
    assert first.rows == (("USER_JOB", "Customer.userJob1", "uid_test", "WAITING", ""),)
    with pytest.raises(JobAlreadyRunning) as err:
        client.fetch(cmd)
    assert str(err.value) == "Job is running [type: USER_JOB, name: Customer.userJob1, uid: uid_test]"
    assert len(client.store.live_jobs()) == 1


def test_the_readmes_application_code_example(store_config):
    """docs/guides/scripts-and-code.md's "From application code", as an application writes it."""
    from fabricjobs import Client as PublicClient
    from fabricjobs.errors import CommandSyntaxError, FabricJobsError

    add_sections(store_config, {"jobs": {"USER_JOBS_DIR": ROOT / "examples" / "jobs"}})
    with PublicClient.from_config(store_config) as client:
        row = client.fetch("startjob user_job name='Customer.userJob1' uid='u1';").first_row()
        assert row["Status"] == "WAITING"
        jobs = client.fetch("jobstatus user_job;")
        assert [(job["UID"], job["Status"], job["Start Time"]) for job in jobs] == [("u1", "WAITING", None)]
        assert jobs.as_dicts()[0]["Is Archived"] is False and isinstance(jobs.as_dicts()[0]["Creation Time"], datetime)
        with pytest.raises(JobAlreadyRunning, match=r"Job is running \[type: USER_JOB, name: Customer.userJob1, uid: u1\]"):
            client.fetch("startjob user_job name='Customer.userJob1' uid='u1';")
        with pytest.raises(CommandSyntaxError) as bad:
            client.fetch("startjob user_job nme='x';")
        assert isinstance(bad.value, FabricJobsError) and (bad.value.line, bad.value.column) == (1, 19)
        results = client.run_script("set sync off; jobstatus;")
        assert len(results) == 2 and results[1].first_row()["UID"] == "u1"


def test_a_bulk_script_stops_at_its_first_error_and_keeps_what_ran_before(client):
    """A script's STARTJOBs are written together (one commit), but a failing one still stops
    the script with the ones before it done and the ones after it never run."""
    text = "".join(f"startjob user_job name='Customer.userJob1' uid='b{i}';" for i in range(300))
    client.run_script(text)
    again = ("startjob user_job name='Customer.userJob1' uid='new1';"
             "startjob user_job name='Customer.userJob1' uid='b7';"  # already running
             "startjob user_job name='Customer.userJob1' uid='new2';")
    with pytest.raises(JobAlreadyRunning):
        client.run_script(again)
    uids = {j.key.uid for j in client.store.live_jobs()}
    assert len(uids) == 301 and "new1" in uids and "new2" not in uids


def test_a_bulk_scripts_first_error_wins_whether_a_check_or_a_write(client):
    """A group's rows are checked before its inserts: a bad STARTJOB stops the script with the
    ones before it written, and a write that fails before a later bad check is the error shown."""
    bad_check = ("startjob user_job name='Customer.userJob1' uid='c1';"
                 "startjob user_job name='Customer.noSuchJob' uid='c2';"
                 "startjob user_job name='Customer.userJob1' uid='c3';")
    with pytest.raises(ValidationError):
        client.run_script(bad_check)
    assert {j.key.uid for j in client.store.live_jobs()} == {"c1"}
    conflict_first = ("startjob user_job name='Customer.userJob1' uid='c4';"
                      "startjob user_job name='Customer.userJob1' uid='c1';"
                      "startjob user_job name='Customer.noSuchJob' uid='c5';")
    with pytest.raises(JobAlreadyRunning):
        client.run_script(conflict_first)
    assert {j.key.uid for j in client.store.live_jobs()} == {"c1", "c4"}


def test_a_bug_in_one_startjobs_check_keeps_the_ones_before_it(client, monkeypatch):
    """Not only a refusal: whatever a STARTJOB's check raises, the STARTJOBs before it in the
    group are written, as they would be one by one, and the error is the script's."""
    real = client.service._new_job

    def new_job(command, session):
        if command.uid == "d2":
            raise RuntimeError("a bug in a check")
        return real(command, session)

    monkeypatch.setattr(client.service, "_new_job", new_job)
    with pytest.raises(RuntimeError):
        client.run_script("startjob user_job name='Customer.userJob1' uid='d1';"
                          "startjob user_job name='Customer.userJob1' uid='d2';"
                          "startjob user_job name='Customer.userJob1' uid='d3';")
    assert {j.key.uid for j in client.store.live_jobs()} == {"d1"}


def test_a_script_statement_sees_the_jobs_started_earlier_in_it(client):
    client.run_script("startjob user_job name='Customer.userJob1' uid='parent';"
                      "startjob user_job name='Customer.userJob1' uid='child' "
                      "depends_on='USER_JOB.Customer.userJob1.parent';")
    assert row(client, uid="child").blocked


def test_depends_on_is_read_once_by_the_parser_and_built_commands_may_still_name_parents_as_text(client):
    from fabricjobs.commands import StartJob, parse_one

    parsed = parse_one("startjob user_job name='Customer.userJob1' uid='k' depends_on='user_job.Customer.userJob1.p'")
    assert parsed.depends_on == (JobKey("USER_JOB", "Customer.userJob1", "p"),)
    client.fetch("startjob user_job name='Customer.userJob1' uid='p';")
    twice = ("USER_JOB.Customer.userJob1.p", "USER_JOB.Customer.userJob1.p")  # (the API's list may repeat one)
    client.execute(StartJob("USER_JOB", "Customer.userJob1", uid="as-text", depends_on=twice))
    client.execute(parsed)
    assert row(client, uid="as-text").depends_on == row(client, uid="k").depends_on == "USER_JOB.Customer.userJob1.p"
    assert row(client, uid="as-text").blocked and row(client, uid="k").blocked


def test_the_seeds_escaped_args_example_and_the_java_fetch_style(client):
    r = client.fetch("startjob user_job name='Customer.userJob1' args='{\\\"loopsIterationCount\\\":\\\"2000\\\"}' UID='uid_test';")
    assert r.first_row()["Status"] == "WAITING"
    args = json.loads(row(client).arguments)
    assert args["loopsIterationCount"] == "2000"


def test_the_seeds_set_example_gives_its_session_scope_shape(client):
    client.fetch("SET sync off; SET auto_mdb_scope = true; SET k2_ws.ALPINIST = 10;")
    client.fetch("startjob user_job name='Customer.userJob1' uid='u1';")
    args = json.loads(row(client, uid="u1").arguments)
    scope = args["session_scope"]["scope"]
    assert list(scope) == ["EXECUTION_ID", "SYNC", "AUTO_MDB_SCOPE", "k2_ws.ALPINIST", "LOG_ID"]
    assert (scope["SYNC"], scope["AUTO_MDB_SCOPE"], scope["k2_ws.ALPINIST"]) == ("off", "true", "10")
    assert len(scope["EXECUTION_ID"]) == 36 and scope["LOG_ID"].isdigit() and len(scope["LOG_ID"]) == 16
    # every STARTJOB of the session carries it, with a new EXECUTION_ID and the same LOG_ID
    client.fetch("startjob user_job name='Customer.userJob1' uid='u2' args='{\"loopsIterationCount\": 1}';")
    other = json.loads(row(client, uid="u2").arguments)
    assert other["loopsIterationCount"] == 1
    assert other["session_scope"]["scope"]["LOG_ID"] == scope["LOG_ID"]
    assert other["session_scope"]["scope"]["EXECUTION_ID"] != scope["EXECUTION_ID"]


@pytest.mark.parametrize("verb", ["startjob", "updatejob"])
def test_a_session_scope_in_args_that_is_not_the_shape_set_makes_is_refused(client, verb):
    """The job reads current_job().session_scope as an object: a string there broke every run."""
    if verb == "updatejob":
        client.fetch("startjob user_job name='Customer.userJob1' uid='sc1' exec_interval='0 0 * * *';")
    before = row(client, uid="sc1")
    with pytest.raises(ValidationError, match='ARGS key "session_scope" is the session.s SET values'):
        client.fetch(f"{verb} user_job name='Customer.userJob1' uid='sc1' args='{{\"session_scope\": \"hijack\"}}';")
    after = row(client, uid="sc1")
    assert (after.arguments if after else None) == (before.arguments if before else None)
    client.fetch(f"{verb} user_job name='Customer.userJob1' uid='sc1' args='{{\"session_scope\": {{\"scope\": {{\"A\": \"1\"}}}}}}';")


def test_a_listener_may_only_watch_a_directory_under_listener_root(store_config, tmp_path):
    root, elsewhere = tmp_path / "root", tmp_path / "elsewhere"
    (root / "inbox").mkdir(parents=True)
    elsewhere.mkdir()
    (root / "escape").symlink_to(elsewhere)
    add_sections(store_config, {"jobs": {"USER_JOBS_DIR": ROOT / "examples" / "jobs", "LISTENER_ROOT": root}})
    cfg = load_config(store_config)
    with Client(open_store(cfg), cfg, owns_store=True) as c:
        def start(path: str) -> str:
            args = json.dumps({"path": path, "pattern": "*.csv"})
            return f"startjob interface_listener name='Files.count_lines' uid='l' args='{args}';"

        for path, why in (("../elsewhere", "'..' is not allowed"), ("escape", "outside LISTENER_ROOT"),
                          (str(elsewhere), "outside LISTENER_ROOT"), ("missing", "no such directory")):
            with pytest.raises(ValidationError, match=why):
                c.fetch(start(path))
        assert c.store.live_jobs() == []  # nothing was written
        assert c.fetch(start("inbox")).first_row()["Status"] == "WAITING"


def test_updatejob_may_not_change_what_a_listener_watches_but_may_change_its_other_args(store_config, tmp_path):
    """A listener marks the files already there as present at its first run only: a new path or
    pattern would make every old file there new to it (docs/guides/writing-jobs.md)."""
    root = tmp_path / "root"
    (root / "inbox").mkdir(parents=True)
    (root / "in2").mkdir()
    add_sections(store_config, {"jobs": {"USER_JOBS_DIR": ROOT / "examples" / "jobs", "LISTENER_ROOT": root}})
    cfg = load_config(store_config)
    with Client(open_store(cfg), cfg, owns_store=True) as c:
        def args(**given) -> str:
            return json.dumps({"path": "inbox", "pattern": "*.csv", **given})

        c.fetch(f"startjob interface_listener name='Files.count_lines' uid='l' args='{args()}';")
        key = ("INTERFACE_LISTENER", "Files.count_lines", "l")
        before = c.store.get(JobKey(*key)).arguments
        for changed in (args(path="in2"), args(pattern="*.txt"), json.dumps({"path": "inbox"})):
            with pytest.raises(ValidationError, match="cannot change what a listener watches .* nothing was changed"):
                c.fetch(f"updatejob interface_listener name='Files.count_lines' uid='l' args='{changed}';")
            assert c.store.get(JobKey(*key)).arguments == before
        with pytest.raises(ValidationError, match="pattern must be a file name pattern"):
            c.fetch(f"startjob interface_listener name='Files.count_lines' uid='l2' args='{args(pattern='')}';")
        c.fetch(f"updatejob interface_listener name='Files.count_lines' uid='l' args='{args(path='./inbox/', settle_sec=2)}';")
        assert json.loads(c.store.get(JobKey(*key)).arguments)["settle_sec"] == 2


def test_the_seeds_process_job_example_with_an_absolute_path_inside_the_dir(client):
    path = ROOT / "examples" / "process_jobs" / "echoArg.sh"
    r = client.fetch(f"startjob process NAME='{path}' UID='processJobtest' ARGS='{{\"0\":\"ARG 1 value\",\"1\":\"ARG 2 value\"}}';")
    assert r.first_row()["Status"] == "WAITING"


def test_the_seeds_kill_and_ps_examples_route_to_the_nodes(client):
    assert client.fetch("ps;").rows == ()
    with pytest.raises(NodeNotFound, match="no live node 'dev-fabric-deployment-848b7d9f89-ddm97'"):
        client.fetch("kill 'dev-fabric-deployment-848b7d9f89-ddm97' 52625;")


# -- STARTJOB -------------------------------------------------------------------------------

def test_startjob_generates_a_uid_when_none_is_given(client):
    a = client.fetch("startjob user_job name='Customer.userJob1';").first_row()
    b = client.fetch("startjob user_job name='Customer.userJob1';").first_row()
    assert a["UID"] != b["UID"] and len(a["UID"]) == 36


@pytest.mark.parametrize(
    "interval, status, due",
    [
        ("", "WAITING", T0),
        ("00:05:00", "WAITING", T0),
        ("2026-03-02 10:30:00", "SCHEDULED", datetime(2026, 3, 2, 10, 30, tzinfo=UTC)),
        ("*/15 * * * *", "SCHEDULED", datetime(2026, 3, 2, 9, 15, tzinfo=UTC)),
        ("30 * * * * *", "SCHEDULED", datetime(2026, 3, 2, 9, 0, 30, tzinfo=UTC)),
    ],
)
def test_startjob_status_follows_the_schedule(client, interval, status, due):
    r = client.fetch(f"startjob user_job name='Customer.userJob1' uid='s' exec_interval='{interval}';")
    assert r.first_row()["Status"] == status
    job = row(client, uid="s")
    assert job.next_run == due and job.execution_interval == interval


def test_startjob_reuses_an_archived_key(client):
    client.fetch("startjob user_job name='Customer.userJob1' uid='r';")
    old = row(client, uid="r")
    client.store.cas(old, old.replace(status=Status.PROCESSED, archived=True, end_time=T0, output='"x"'))
    again = client.fetch("startjob user_job name='Customer.userJob1' uid='r' args='{\"loopsIterationCount\": 2}';")
    assert again.first_row()["Status"] == "WAITING"
    new = row(client, uid="r")
    assert not new.archived and new.epoch == old.epoch + 1 and json.loads(new.arguments)["loopsIterationCount"] == 2
    assert len(client.fetch("jobstatus 30 days ago;").rows) == 1  # updated, not duplicated


@pytest.mark.parametrize(
    "command, message",
    [
        ("startjob broadway_job name='x';", "unknown job type 'BROADWAY_JOB'"),
        ("startjob user_job name='Customer.nope';", "no top-level function 'nope'"),
        ("startjob user_job name='Nobody.job';", "no Nobody.py in USER_JOBS_DIR"),
        ("startjob user_job name='os:system';", "not in the [jobs] USER_JOB_MODULES allowlist"),
        ("startjob user_job name='builtins:eval';", "not in the [jobs] USER_JOB_MODULES allowlist"),
        ("startjob process name='../pyproject.toml';", "'..' is not allowed"),
        ("startjob process name='/etc/passwd';", "outside PROCESS_JOBS_DIR"),
        ("startjob process name='nothere.sh';", "no such file"),
        ("startjob user_job name='Customer.userJob1' uid='..';", "UID must not be '.' or '..': no URL path can name it"),
        ("startjob process name='echoArg.sh' args='{\"0\": \"a\", \"time_limit\": 30}';",
         "PROCESS ARGS key 'time_limit' is neither an argument position (\"0\", \"1\", ...) nor one of memory_mb, "
         "time_limit_sec"),
        ("startjob user_job name='Customer.userJob1' args='[1,2]';", "ARGS must be a JSON object"),
        ("startjob user_job name='Customer.userJob1' args='{oops}';", "ARGS is not valid JSON"),
        ("startjob user_job name='Customer.userJob1' exec_interval='61 * * * *';", "invalid cron expression"),
        ("startjob user_job name='Customer.userJob1' affinity='{\"Affinity\": 5}';", "non-empty list"),
        ("startjob user_job name='Customer.userJob1' name='x';", "NAME is given twice"),
        ("startjob user_job uid='x';", "needs NAME"),
        ("resumejob user_job name='Customer.userJob1';", "RESUMEJOB needs UID"),
    ],
)
def test_bad_input_gets_a_clear_message_and_changes_nothing(client, command, message):
    with pytest.raises((ValidationError, CommandSyntaxError)) as err:
        client.fetch(command)
    assert message in str(err.value)
    assert "Traceback" not in str(err.value)
    assert client.store.live_jobs() == []


def test_allowlisted_module_functions_may_be_named(client):
    assert client.fetch("startjob user_job name='json:dumps' uid='j';").first_row()["Status"] == "WAITING"


def test_symlinks_out_of_the_process_dir_are_refused(client, tmp_path):
    from fabricjobs.jobs.registry import JobCatalog, JobResolutionError

    (tmp_path / "procs").mkdir()
    (tmp_path / "procs" / "escape.sh").symlink_to("/bin/sh")
    with pytest.raises(JobResolutionError, match="outside PROCESS_JOBS_DIR"):
        JobCatalog("", (), str(tmp_path / "procs")).process_path("escape.sh")


def test_a_job_function_removed_after_startjob_fails_its_run_with_a_clear_error(tmp_path):
    """STARTJOB checks the function is there without running the module; a worker, which
    imports the module anyway, finds out from the import."""
    from fabricjobs.jobs.registry import JobCatalog, JobResolutionError

    (tmp_path / "Gone.py").write_text("def here():\n    return 1\n")
    catalog = JobCatalog(str(tmp_path), (), "")
    catalog.check("USER_JOB", "Gone.here")
    with pytest.raises(JobResolutionError, match="defines no top-level function 'away'"):
        catalog.check("USER_JOB", "Gone.away")
    with pytest.raises(JobResolutionError, match="^INTERFACE_LISTENER 'Gone.away': its NAME is the USER_JOB each file "
                                                 "runs; unknown USER_JOB 'Gone.away'"):
        catalog.check("INTERFACE_LISTENER", "Gone.away")  # (which type is unknown: said, not left to guess)
    assert catalog.load_user_job("Gone.here")() == 1
    with pytest.raises(JobResolutionError, match="has no function 'away'"):
        catalog.load_user_job("Gone.away")
    # A module broken after STARTJOB fails its run cleanly (no retry), not its worker process.
    (tmp_path / "Broken.py").write_text("def here(:\n")
    (tmp_path / "Raising.py").write_text("raise RuntimeError('no config here')\ndef here():\n    return 1\n")
    with pytest.raises(JobResolutionError, match=r"cannot import Broken\.py: SyntaxError"):
        catalog.load_user_job("Broken.here")
    with pytest.raises(JobResolutionError, match="cannot import Raising.py: RuntimeError: no config here"):
        catalog.load_user_job("Raising.here")


NASTY = [
    "it's; DROP TABLE k2_jobs; --",
    "O''Reilly \" `x` \\n",
    "ünïcødé ✓ 日本語 🚀",
    "'); DELETE FROM nodes; SELECT ('",
]


@pytest.mark.parametrize("text", NASTY)
def test_names_uids_and_args_are_stored_and_shown_exactly_as_given(client, text):
    quoted = text.replace("'", "''")
    arg_json = json.dumps({"loopsIterationCount": text}, ensure_ascii=False).replace("'", "''")
    client.fetch(f"startjob user_job name='Customer.userJob1' uid='{quoted}' args='{arg_json}';")
    job = row(client, uid=text)
    assert job.uid == text
    assert json.loads(job.arguments)["loopsIterationCount"] == text
    assert job.arguments.startswith(json.dumps({"loopsIterationCount": text}, ensure_ascii=False)[:-1])  # the caller's text, verbatim
    shown = client.fetch(f"jobstatus user_job 'Customer.userJob1' with uid='{quoted}';").first_row()
    assert shown["UID"] == text and json.loads(shown["Arguments"])["loopsIterationCount"] == text


# -- STOPJOB / RESTARTJOB / RESUMEJOB / UPDATEJOB ---------------------------------------------

def _running(client, uid):
    job = row(client, uid=uid)
    res = client.store.cas(job, job.replace(status=Status.IN_PROCESS, worker_id="n1", epoch=job.epoch + 1, start_time=T0))
    return res.row


def test_stopjob_of_idle_jobs_terminates_at_once_and_of_running_ones_asks_their_node(client):
    client.fetch("startjob user_job name='Customer.userJob1' uid='a'; startjob user_job name='Customer.userJob1' uid='b' exec_interval='0 * * * *';")
    client.fetch("startjob user_job name='Customer.userJob1' uid='c';")
    _running(client, "c")
    r = client.fetch("stopjob user_job name='Customer.userJob1';")
    assert {x["UID"]: x["Status"] for x in r} == {"a": "TERMINATED", "b": "TERMINATED", "c": "STOPPING"}
    assert row(client, uid="a").archived and not row(client, uid="c").archived
    with pytest.raises(JobNotFound):
        client.fetch("stopjob user_job name='Customer.userJob1' uid='a';")


def test_restartjob(client):
    client.fetch("startjob user_job name='Customer.userJob1' uid='a' exec_interval='0 * * * *';")
    client.fetch("startjob user_job name='Customer.userJob1' uid='b';")
    _running(client, "b")
    r = client.fetch("restartjob user_job name='Customer.userJob1';")
    assert {x["UID"]: x["Status"] for x in r} == {"a": "WAITING", "b": "RESTART"}
    a = row(client, uid="a")
    assert a.worker_id is None and a.next_run == T0


def test_a_change_answers_with_what_it_did_even_when_a_node_acts_on_it_at_once(client, monkeypatch):
    """RESTARTJOB of a running job says RESTART, even if the node has restarted the run by the
    time the answer is made (on a busy Cassandra cluster, what a read after the write finds)."""
    client.fetch("startjob user_job name='Customer.userJob1' uid='r';")
    running = _running(client, "r")
    store, read_many = client.store, client.store.get_many

    def the_node_acts_first(keys):
        now = store.get(running.key)
        if now.status is Status.RESTART:  # the run restarted before anyone reads the row back
            store.cas(now, now.replace(status=Status.IN_PROCESS, epoch=now.epoch + 1))
        return read_many(keys)

    monkeypatch.setattr(store, "get_many", the_node_acts_first)
    shown = client.fetch("restartjob user_job name='Customer.userJob1' uid='r';").first_row()
    assert shown["Status"] == "RESTART"


def test_restartjob_of_a_job_being_stopped_leaves_the_stop_in_place(client):
    """STOPJOB came first: a RESTARTJOB after it must not turn the stop into a new run."""
    client.fetch("startjob user_job name='Customer.userJob1' uid='s';")
    _running(client, "s")
    assert client.fetch("stopjob user_job name='Customer.userJob1' uid='s';").first_row()["Status"] == "STOPPING"
    shown = client.fetch("restartjob user_job name='Customer.userJob1' uid='s';").first_row()
    assert shown["Status"] == "STOPPING" and row(client, uid="s").status is Status.STOPPING


def test_resumejob_of_a_job_whose_calendar_was_dropped_meanwhile_is_refused(client):
    """DROPCALENDAR checks the live jobs only: an ended job may still name the calendar. Its
    RESUMEJOB is refused with the reason, and the job stays ended."""
    client.fetch("createcalendar 'c2' exclude '2000-01-01';")
    client.fetch("startjob user_job name='Customer.userJob1' uid='cal5' calendar='c2' exec_interval='0 0 * * *';")
    client.fetch("stopjob user_job name='Customer.userJob1' uid='cal5';")
    client.fetch("dropcalendar 'c2';")
    with pytest.raises(CalendarNotFound, match="No such calendar 'c2'"):
        client.fetch("resumejob user_job name='Customer.userJob1' uid='cal5';")
    assert row(client, uid="cal5").archived


def test_the_tasks_of_a_job_whose_uid_is_at_the_limit_can_be_named(client):
    """A task's UID is the job's with '/i' added: at the 1,024-character limit the job's part
    is cut and a hash keeps the tasks of two such jobs apart; every statement can name them."""
    uid = "u" * 1024
    client.fetch(f"startjob user_job name='Customer.userJob1' uid='{uid}' parallelism=2;")
    tasks = sorted((j for j in client.store.live_jobs() if j.task_of), key=lambda j: j.uid)
    assert [len(t.uid) for t in tasks] == [1024, 1024] and [t.uid[-2:] for t in tasks] == ["/0", "/1"]
    for task in tasks:
        assert client.fetch(f"jobstatus user_job 'Customer.userJob1' with uid='{task.uid}';").first_row()["UID"] == task.uid
    other = "u" * 1023 + "v"
    client.fetch(f"startjob user_job name='Customer.userJob1' uid='{other}' parallelism=2;")
    assert len({j.uid for j in client.store.live_jobs() if j.task_of}) == 4
    # What a listener checks of a file job its request names: made from its own UID, nothing else.
    from fabricjobs.names import derived_suffix, derived_uid
    assert derived_suffix(uid, tasks[0].uid) == "/0" and derived_suffix(other, tasks[0].uid) is None
    assert derived_suffix("inbox", derived_uid("inbox", "/a.csv")) == "/a.csv"
    assert derived_suffix("inbox", tasks[0].uid[tasks[0].uid.index("~") - 2:]) is None  # a mark, but not at the limit


def test_restartjob_running_restarts_only_jobs_with_a_run_going_and_leaves_schedules_alone(client):
    """The deploy form: an idle recurring job must not fire off schedule, nor a WAITING one lose
    its due time; nothing running is no error; NAME may be left out."""
    client.fetch("startjob user_job name='Customer.userJob1' uid='a' exec_interval='0 * * * *';")
    client.fetch("startjob user_job name='Customer.userJob1' uid='b'; startjob user_job name='Customer.userJob1' uid='c';")
    client.fetch("startjob user_job name='Customer.userJob3' uid='d';")
    before = {u: row(client, uid=u) for u in "ac"}
    assert client.fetch("restartjob user_job name='Customer.userJob1' running;").rows == ()
    _running(client, "b")
    d = row(client, name="Customer.userJob3", uid="d")
    client.store.cas(d, d.replace(status=Status.IN_PROCESS, worker_id="n1", epoch=d.epoch + 1, start_time=T0))
    r = client.fetch("restartjob user_job name='Customer.userJob1' running;")
    assert {x["UID"]: x["Status"] for x in r} == {"b": "RESTART"}
    assert {u: row(client, uid=u) for u in "ac"} == before  # untouched: same status, due time, epoch
    r = client.fetch("restartjob user_job running;")  # every running USER_JOB (b: still ending its run)
    assert {x["UID"]: x["Status"] for x in r} == {"b": "RESTART", "d": "RESTART"}


def test_resumejob_only_for_archived_jobs(client):
    client.fetch("startjob user_job name='Customer.userJob1' uid='a' exec_interval='0 * * * *';")
    with pytest.raises(JobAlreadyRunning):
        client.fetch("resumejob user_job name='Customer.userJob1' uid='a';")
    client.fetch("stopjob user_job name='Customer.userJob1' uid='a';")
    stopped = row(client, uid="a")
    assert stopped.end_time is not None
    r = client.fetch("resumejob user_job name='Customer.userJob1' uid='a';")
    assert r.first_row()["Status"] == "SCHEDULED"
    resumed = row(client, uid="a")
    # A new life: created now, not started or ended yet (no Start Time before its Creation Time).
    assert not resumed.archived and (resumed.start_time, resumed.end_time) == (None, None)
    assert resumed.creation_time >= stopped.end_time
    with pytest.raises(JobNotFound):
        client.fetch("resumejob user_job name='Customer.userJob1' uid='zz';")


def test_updatejob_changes_affinity_args_and_schedule(client):
    client.fetch("SET team = blue;")
    client.fetch("startjob user_job name='Customer.userJob1' uid='a' exec_interval='0 * * * *';")
    r = client.fetch("updatejob user_job name='Customer.userJob1' uid='a' affinity='HANDLE_MSG' args='{\"loopsIterationCount\": 3}';")
    assert r.first_row()["Status"] == "SCHEDULED"
    job = row(client, uid="a")
    assert job.affinity == "HANDLE_MSG"
    args = json.loads(job.arguments)
    assert args["loopsIterationCount"] == 3 and args["session_scope"]["scope"]["TEAM"] == "blue"  # the session scope stays
    client.fetch("updatejob user_job name='Customer.userJob1' uid='a' exec_interval='*/10 * * * *';")
    assert row(client, uid="a").next_run == datetime(2026, 3, 2, 9, 10, tzinfo=UTC)
    client.fetch("updatejob user_job name='Customer.userJob1' uid='a' reset_end_time=true;")
    job = row(client, uid="a")
    assert job.status is Status.WAITING and job.next_run == T0 and job.worker_id is None
    client.fetch("updatejob user_job name='Customer.userJob1' uid='a' exec_interval='0 * * * *' reset_end_time=false;")
    assert row(client, uid="a").status is Status.SCHEDULED


def test_updatejob_changes_the_scheduling_parameters_and_jobstatus_details_shows_them(client):
    """The scheduling parameters (docs/guides/schedules.md) go through UPDATEJOB as through STARTJOB: a new TZ
    recomputes a cron job's next due time in that zone (09:00 in Paris is 08:00 UTC in March),
    and JOBSTATUS ... DETAILS shows every one of them."""
    client.fetch("startjob user_job name='Customer.userJob1' uid='z' exec_interval='0 9 * * *';")
    assert row(client, uid="z").next_run == datetime(2026, 3, 3, 9, 0, tzinfo=UTC)  # the node's zone: UTC
    d = client.fetch("jobstatus user_job 'Customer.userJob1' with uid='z' details;").first_row()
    assert (d["Late Action"], d["On Failure"]) == ("SKIP", "")  # the defaults, said
    client.fetch("updatejob user_job name='Customer.userJob1' uid='z' tz='Europe/Paris' priority=8 "
                 "late_threshold='00:05:00' overlap='QUEUE' late_action='RUN' on_failure='USER_JOB.Customer.onFailure';")
    job = row(client, uid="z")
    assert (job.time_zone, job.priority, job.late_threshold, job.overlap) == ("Europe/Paris", 8, "00:05:00", "QUEUE")
    assert job.status is Status.SCHEDULED and job.next_run == datetime(2026, 3, 3, 8, 0, tzinfo=UTC)
    d = client.fetch("jobstatus user_job 'Customer.userJob1' with uid='z' details;").first_row()
    assert (d["Priority"], d["Time Zone"], d["Late Threshold"], d["Overlap"]) == (8, "Europe/Paris", "00:05:00", "QUEUE")
    assert (d["Late Action"], d["On Failure"]) == ("RUN", "USER_JOB.Customer.onFailure")
    with pytest.raises(ValidationError):
        client.fetch("updatejob user_job name='Customer.userJob1' uid='z' tz='Mars/Olympus';")
    assert row(client, uid="z").time_zone == "Europe/Paris"  # bad input changes nothing
    client.fetch("startjob user_job name='Customer.userJob1' uid='ny' exec_interval='0 9 * * *' tz='America/New_York';")
    assert row(client, uid="ny").next_run == datetime(2026, 3, 2, 14, 0, tzinfo=UTC)  # EST until 8 March


def test_updatejob_empty_interval_turns_a_recurring_job_into_a_one_time_job(client):
    client.fetch("startjob user_job name='Customer.userJob1' uid='a' exec_interval='0 0 * * *';")
    r = client.fetch("updatejob user_job name='Customer.userJob1' uid='a' exec_interval='';")
    assert r.first_row()["Status"] == "WAITING"
    job = row(client, uid="a")
    assert job.execution_interval == "" and job.next_run == T0


def test_updatejob_with_an_empty_depends_on_removes_the_parents_and_unblocks(client):
    """As the API's PATCH with "depends_on": [] does: the child is claimable at once."""
    client.fetch("startjob user_job name='Customer.userJob1' uid='parent' exec_interval='0 0 * * *';")
    client.fetch("startjob user_job name='Customer.userJob1' uid='child' depends_on='USER_JOB.Customer.userJob1.parent';")
    assert row(client, uid="child").blocked
    client.fetch("updatejob user_job name='Customer.userJob1' uid='child' depends_on='';")
    child = row(client, uid="child")
    assert not child.blocked and child.depends_on == ""


def test_updatejob_depends_on_of_a_parallel_job_or_its_task_is_refused(client):
    """A parallel job's parents are its tasks (the parent collects their outputs once all are
    PROCESSED): new ones would free it before its tasks end."""
    client.fetch("startjob user_job name='Customer.userJob1' uid='other' exec_interval='0 0 * * *';"
                 "startjob user_job name='Customer.userJob1' uid='par' parallelism=2;")
    for uid in ("par", "par/0"):
        with pytest.raises(ValidationError, match="a parallel job or one of its tasks"):
            client.fetch(f"updatejob user_job name='Customer.userJob1' uid='{uid}' depends_on='';")
        with pytest.raises(ValidationError, match="nothing was changed"):
            client.fetch(f"updatejob user_job name='Customer.userJob1' uid='{uid}' "
                         "depends_on='USER_JOB.Customer.userJob1.other';")
    parent = row(client, uid="par")
    assert parent.blocked and parent.depends_on == "USER_JOB.Customer.userJob1.par/0,USER_JOB.Customer.userJob1.par/1"


def test_new_parents_of_a_running_or_held_job(client):
    """A one-time job's run going on: its retry would wait (and an ended job is blocked by
    nothing); a held job is never blocked (RELEASEJOB reads its parents)."""
    from fabricjobs.model import Event, advance

    client.fetch("startjob user_job name='Customer.userJob1' uid='parent' exec_interval='0 0 * * *';"
                 "startjob user_job name='Customer.userJob1' uid='once';"
                 "startjob user_job name='Customer.userJob1' uid='held' hold=true;")
    running = _running(client, "once")
    said = client.fetch("updatejob user_job name='Customer.userJob1' uid='once' "
                        "depends_on='USER_JOB.Customer.userJob1.parent';").first_row()
    assert said["Notes"] == "running; should this run fail, its retry waiting for USER_JOB.Customer.userJob1.parent (SCHEDULED)"
    now = row(client, uid="once")
    assert now.blocked and now.status is Status.IN_PROCESS and now.epoch == running.epoch
    done = advance(now, Event.DONE_ONCE, now.replace(status=Status.PROCESSED, end_time=T0))
    assert done.archived and not done.blocked  # ended: nothing left to hold back
    client.fetch("updatejob user_job name='Customer.userJob1' uid='held' depends_on='USER_JOB.Customer.userJob1.parent';")
    held = row(client, uid="held")
    assert held.status is Status.HELD and not held.blocked and held.depends_on == "USER_JOB.Customer.userJob1.parent"


def test_updatejob_on_a_running_job_keeps_the_run(client):
    client.fetch("startjob user_job name='Customer.userJob1' uid='a' exec_interval='00:10:00';")
    running = _running(client, "a")
    r = client.fetch("updatejob user_job name='Customer.userJob1' uid='a' exec_interval='00:01:00' reset_end_time=true;")
    assert r.first_row()["Status"] == "IN_PROCESS" and "next run starts when this one ends" in r.first_row()["Notes"]
    job = row(client, uid="a")
    assert (job.worker_id, job.epoch, job.execution_interval) == ("n1", running.epoch, "00:01:00")


# -- JOBSTATUS -----------------------------------------------------------------------------

def test_jobstatus_forms_and_columns(client):
    client.fetch("startjob user_job name='Customer.userJob1' uid='a';")
    client.fetch("startjob user_job name='Customer.userJob3' uid='b' exec_interval='2026-03-02 12:00:00';")
    client.fetch("startjob process name='echoArg.sh' uid='c';")
    waiting = client.fetch("jobstatus user_job 'Customer.userJob1' with uid='a';").first_row()
    assert (waiting["Status"], waiting["Next Run"]) == ("WAITING", "Ready to be executed")
    _running(client, "a")
    done = row(client, "PROCESS", "echoArg.sh", "c")
    client.store.cas(done, done.replace(status=Status.PROCESSED, archived=True, end_time=T0, output='"Total Arguments : 0"'))
    allj = client.fetch("jobstatus;")
    assert allj.columns == (
        "Type", "Name", "UID", "Status", "Creation Time", "Start Time", "End Time", "Affinity", "Is Archived",
        "Next Run", "Ownership Candidates Num", "Notes", "Node", "Tries", "Priority", "Progress",
    )
    by_uid = {r["UID"]: r for r in allj}
    assert set(by_uid) == {"a", "b"}
    assert by_uid["a"]["Next Run"] == "Already running" and by_uid["a"]["Node"] == "n1"
    assert by_uid["b"]["Next Run"] == datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
    assert by_uid["a"]["Ownership Candidates Num"] == 0  # no live node
    assert {r["UID"] for r in client.fetch("jobstatus 1 days ago;")} == {"a", "b", "c"}
    assert [r["UID"] for r in client.fetch("jobstatus process;")] == []
    single = client.fetch("jobstatus process 'echoArg.sh' with uid='c';")
    assert single.columns[-2:] == ("Output", "Arguments")
    assert single.first_row()["Output"] == '"Total Arguments : 0"' and single.first_row()["Is Archived"] is True
    client.clock.advance(timedelta(days=3))
    assert {r["UID"] for r in client.fetch("jobstatus 2 days ago;")} == {"a", "b"}


def test_ps_and_kill_read_and_write_the_nodes_published_state(client):
    from fabricjobs.store.base import NodeRow

    client.store.write_node(NodeRow(
        name="node-x", incarnation="i", dc="DC1", host="elsewhere", pid=1, started=T0, version="t", beat=1,
        info=json.dumps({"heartbeat_ms": 60000, "miss": 10}),
        tasks=json.dumps([{"task": 52625, "thread": 4242, "type": "JOB", "description": "UserJob - Customer.userJob1", "elapsed_ms": 1034}]),
    ))
    ps = client.fetch("ps all;")
    assert ps.columns == ("dc", "node", "task", "thread", "type", "description", "duration (ms)", "progress")
    r = ps.first_row()
    assert (r["node"], r["task"], r["thread"], r["description"]) == ("node-x", 52625, 4242, "UserJob - Customer.userJob1")
    assert r["duration (ms)"] >= 1034
    with pytest.raises(TaskNotFound, match="node 'node-x' has no task 1"):
        client.fetch("kill 'node-x' 1;")
    assert "KILL sent to node node-x for task 52625" in client.fetch("kill 'node-x' 52625;").status
    assert [k.task for k in client.store.kill_requests("node-x")] == [52625]


def test_an_accepted_startjob_is_reported_accepted_when_waking_the_nodes_fails(client, monkeypatch):
    """Waking the local nodes is a hint after the commit: a store that times out on that read
    (seen on Cassandra with a replica paused) must not turn an accepted STARTJOB into an error
    that a client would retry into "Job is running"."""
    from fabricjobs.errors import StoreError

    client.service.doorbell.enabled = True
    monkeypatch.setattr(client.service.doorbell, "ring_listening", lambda: False)  # rung by name: the nodes read

    def nodes_times_out(timeout=None):
        raise StoreError("Cassandra: ReadTimeout (QUORUM, received only 1 responses)")

    monkeypatch.setattr(client.store, "nodes", nodes_times_out)
    one = client.fetch("startjob user_job name='Customer.userJob1' uid='woken';")
    script = client.fetch("startjob user_job name='Customer.userJob1' uid='in-a-script';"
                          "startjob user_job name='Customer.userJob1' uid='woken2';")  # rings at the end
    assert one.first_row()["Status"] == script.first_row()["Status"] == "WAITING"
    assert all(row(client, uid=u).status is Status.WAITING for u in ("woken", "in-a-script", "woken2"))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the doorbell is Linux-only")
def test_a_startjob_wakes_the_nodes_listening_on_this_host_without_reading_the_nodes_table(client, monkeypatch):
    """The doorbells bound on this host are found among its sockets: a STARTJOB costs no read
    of the nodes (on Cassandra, a third of the reads a submitted job cost)."""
    from fabricjobs.wakeup import Doorbell
    from harness import wait_for

    bell = client.service.doorbell = Doorbell.for_store(client.store)
    rings: list[str] = []
    stops = [bell.listen(name, lambda name=name: rings.append(name)) for name in ("n1", "n2")]
    try:
        def no_read(timeout=None):
            raise AssertionError("the nodes table was read to ring the nodes")

        monkeypatch.setattr(client.store, "nodes", no_read)
        assert client.fetch("startjob user_job name='Customer.userJob1' uid='rung';").first_row()["Status"] == "WAITING"
        wait_for(lambda: sorted(rings) == ["n1", "n2"], 15, "both listening nodes to be rung")
    finally:
        for stop in stops:
            if stop is not None:
                stop()
        bell.close()


# -- the other seeds' features on every backend -----------------------------------------------------------------

def test_startjob_if_not_exists_answers_the_existing_row_live_or_archived(client):
    cmd = "startjob user_job name='Customer.userJob1' uid='setup' args='{\"loopsIterationCount\": 3}' if not exists;"
    made = client.fetch(cmd)
    first = made.rows
    again = client.run_script(cmd + " startjob user_job name='Customer.userJob3' uid='other';" + cmd)  # in a bulk script too
    assert [r.rows for r in again] == [first, (("USER_JOB", "Customer.userJob3", "other", "WAITING", ""),), first]
    assert made.notices == () and again[0].notices == ("(it exists: left as it is)",)  # which one was created, said
    before = row(client, uid="setup")
    client.fetch("stopjob user_job name='Customer.userJob1' uid='setup';")
    archived = client.fetch(cmd.replace("3}", "9}")).rows
    assert archived == (("USER_JOB", "Customer.userJob1", "setup", "TERMINATED", ""),)
    now = row(client, uid="setup")
    assert now.archived and now.arguments == before.arguments and now.epoch == before.epoch


def test_jobstatus_of_a_type_n_days_ago_adds_that_types_archived_jobs(client):
    client.run_script("startjob user_job name='Customer.userJob1' uid='a'; startjob user_job name='Customer.userJob3' uid='b';"
                      "startjob process name='echoArg.sh' uid='p'; startjob user_job name='Customer.userJob1' uid='live';")
    client.run_script("stopjob user_job name='Customer.userJob1' uid='a'; stopjob user_job name='Customer.userJob3' uid='b';"
                      "stopjob process name='echoArg.sh' uid='p';")
    uids = lambda text: sorted(r[2] for r in client.fetch(text).rows)  # noqa: E731
    assert uids("jobstatus user_job;") == ["live"]
    assert uids("jobstatus user_job 1 day ago;") == ["a", "b", "live"]
    assert uids("jobstatus user_job 'Customer.userJob1' 1 day ago;") == ["a", "live"]
    assert uids("jobstatus 1 day ago;") == ["a", "b", "live", "p"]


# -- HOLD and RELEASEJOB (RJM) ---------------------------------------------------------

def _statuses(client, *uids):
    return tuple(row(client, uid=u).status.value for u in uids)


def test_releasejob_walks_the_graph_through_jobs_that_are_not_held(client):
    """root (held) -> mid (not held, blocked) -> leaf (held): releasing root releases leaf;
    a NAME-wide release leaves the jobs that are not held alone."""
    client.fetch("startjob user_job name='Customer.userJob1' uid='root' hold=true;"
                 "startjob user_job name='Customer.userJob1' uid='mid' depends_on='USER_JOB.Customer.userJob1.root';"
                 "startjob user_job name='Customer.userJob1' uid='leaf' hold=true depends_on='USER_JOB.Customer.userJob1.mid';"
                 "startjob user_job name='Customer.userJob1' uid='apart' hold=true;")
    assert _statuses(client, "root", "mid", "leaf") == ("HELD", "WAITING", "HELD") and row(client, uid="mid").blocked
    res = client.fetch("releasejob user_job name='Customer.userJob1' uid='root';")
    assert [r[2] for r in res.rows] == ["root", "leaf"]
    assert res.rows[1][4] == ("released with USER_JOB.Customer.userJob1.root; "
                              "waiting for USER_JOB.Customer.userJob1.mid (WAITING)")
    assert _statuses(client, "root", "mid", "leaf", "apart") == ("WAITING", "WAITING", "WAITING", "HELD")
    assert row(client, uid="leaf").blocked and not row(client, uid="root").blocked
    res = client.fetch("releasejob user_job name='Customer.userJob1';")  # the held one of the name
    assert [r[2] for r in res.rows] == ["apart"]
    with pytest.raises(Exception) as err:
        client.fetch("releasejob user_job name='Customer.userJob1';")
    assert str(err.value).startswith("Job is not held: None of the 4 live jobs [type: USER_JOB, name: Customer.userJob1] is HELD")


def test_a_held_job_keeps_held_through_restartjob_finishjob_runjob_and_updatejob(client):
    client.fetch("startjob user_job name='Customer.userJob6' uid='h' exec_interval='0 0 2 * * *' hold=true;")
    held = row(client, name="Customer.userJob6", uid="h")
    assert held.status is Status.HELD and held.next_run is None and held.worker_id is None
    client.fetch("restartjob user_job name='Customer.userJob6' uid='h';")
    client.fetch("finishjob user_job name='Customer.userJob6' uid='h';")
    with pytest.raises(Exception, match="Job is held .*: RELEASEJOB runs it"):
        client.fetch("runjob user_job name='Customer.userJob6' uid='h';")
    client.fetch("updatejob user_job name='Customer.userJob6' uid='h' priority=7 reset_end_time=true;")
    after = row(client, name="Customer.userJob6", uid="h")
    assert after.status is Status.HELD and after.priority == 7 and after.next_run is None
    client.fetch("releasejob user_job name='Customer.userJob6' uid='h';")
    released = row(client, name="Customer.userJob6", uid="h")
    assert released.status is Status.SCHEDULED and released.next_run == T0.replace(hour=2) + timedelta(days=1)


def test_updatejob_hold_fences_a_scheduled_jobs_owner_and_release_makes_it_due_afresh(client):
    client.fetch("startjob user_job name='Customer.userJob1' uid='every' exec_interval='00:10:00';")
    job = row(client, uid="every")
    owned = client.store.cas(job, job.replace(status=Status.SCHEDULED, worker_id="n1", next_run=T0 + timedelta(minutes=10)))
    assert owned.applied
    res = client.fetch("updatejob user_job name='Customer.userJob1' uid='every' hold=true;")
    assert res.rows == (("USER_JOB", "Customer.userJob1", "every", "HELD", "held: RELEASEJOB runs it"),)
    held = row(client, uid="every")
    assert held.worker_id is None and held.epoch == owned.row.epoch + 1 and held.next_run is None
    client.fetch("releasejob user_job name='Customer.userJob1' uid='every';")
    assert row(client, uid="every").status is Status.WAITING and row(client, uid="every").next_run == T0


def test_what_is_refused_where_a_job_is_defined_stays_free_where_one_is_named(client):
    """'.' and a trailing backslash are refused in a job's definition (no URL path, no
    statement could name it then), not in a lookup nor in a SET value: a job made before the
    rule stays reachable, and SET values are free text."""
    client.fetch("set dir = '..'; set path = 'C:\\\\';")
    with pytest.raises(JobNotFound):
        client.fetch("stopjob user_job name='Customer.userJob1' uid='..';")
    from fabricjobs.commands import StartJob, UpdateJob  # (as the API builds them: no statement can write these)

    with pytest.raises(ValidationError, match="AFFINITY must not end with a backslash"):
        client.execute(StartJob("USER_JOB", "Customer.userJob1", "ok", affinity="x\\"))
    client.fetch("startjob user_job name='Customer.userJob1' uid='ok' exec_interval='0 0 * * *';")
    with pytest.raises(ValidationError, match="REQUESTOR must not end with a backslash"):
        client.execute(UpdateJob("USER_JOB", "Customer.userJob1", "ok", requestor="team\\"))
    from fabricjobs.model import Job

    made_before = Job(JobKey("USER_JOB", "Customer.userJob1", "old\\"), Status.SCHEDULED, T0,
                      execution_interval="0 0 * * *", next_run=T0)
    assert client.store.insert(made_before).applied  # (as a job made before the rule is in the store)
    client.execute(UpdateJob("USER_JOB", "Customer.userJob1", "old\\", priority=3))  # its key is named, not defined
    assert row(client, uid="old\\").priority == 3
