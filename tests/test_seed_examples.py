"""Every command line printed in seed 001, the Fabric Jobs course, replayed in the course's
order through the shell's script runner against two real node processes on SQLite (docs/explanation/design-choices.md).

The seed is not read here (the tests never read /work/shared): its lines are copied below as
data, each with the seed line it is printed on and what it must give:

* ``shows``: what the shell prints, each a substring (or a regex) of its output, in order:
  the course's documented result, in this project's table layout;
* ``error``: the one message on stderr when the command is refused, the course's own refusal
  ("Job is running [...]") or, with ``deliberate`` saying why, one of this project's;
* a ``template`` (the course's syntax lines, ``STARTJOB <JOBTYP> NAME='<name>' [UID=...]``) is
  typed as printed first, and must be refused with a syntax error at its first placeholder
  that changes nothing, then typed filled in (``run``), which must show ``shows``.

``run`` is what is typed when it is not the printed text: a template filled in, the string a
Java call passes, or the course's text adapted where ``deliberate`` says so. The steps that
are not seed lines (``Then``, ``Until``) look at what a line did or wait for a job, with
deadlines. The course's transcripts also run once through ``fabricjobs shell`` itself.

Printed in the seed but not command lines, so not here: Java code (annotations, isAborted(),
failJob*()), log lines, config.ini and node.id lines (``HANDLE_MSG:5 10``: affinity limits are
tests/test_cluster.py's), and the actors JobWait and StopJob (WAITJOB and STOPJOB ... WAIT,
used below).
"""

from __future__ import annotations

import io
import json
import re
from dataclasses import dataclass
from typing import Pattern

import pytest

from fabricjobs.model import Status
from fabricjobs.shell.script import run_text
from harness import ROOT, two_nodes, wait_for

KEY = ("USER_JOB", "Customer.userJob1", "uid_test")


@dataclass(frozen=True)
class Seed:
    """A command line the course prints, with its line in the seed."""

    line: int
    printed: str
    run: str = ""  # typed instead of ``printed`` ("" : the printed text)
    shows: tuple[str | Pattern[str], ...] = ()
    error: str = ""  # the start of the message on stderr
    deliberate: str = ""  # why this project refuses or adapts the course's line
    template: bool = False
    hides: tuple[str, ...] = ()  # not in the output


@dataclass(frozen=True)
class Then:
    """A statement of this test's own, to see what a seed line did."""

    run: str
    shows: tuple[str | Pattern[str], ...] = ()
    error: str = ""
    hides: tuple[str, ...] = ()


@dataclass(frozen=True)
class Until:
    """Wait (with a deadline) until the job is in ``status`` (and has ``tries`` tries; with
    ``in_ps``, until its run is in PS too: a node publishes its tasks with its heartbeat)."""

    key: tuple[str, str, str]
    status: Status
    tries: int | None = None
    in_ps: bool = False


def row(*cells: str) -> str:
    """A table row's cells as the shell pads them (each cell followed by at least one space)."""
    return "| " + " +\\| ".join(re.escape(c) for c in cells) + " +\\|"


def rows(*cells: str) -> Pattern[str]:
    return re.compile(row(*cells))


TEMPLATE = "STARTJOB <JOBTYP> NAME='<name>' [UID='<uid>'] [AFFINITY='<affinity>'] [ARGS='<args>'] [EXEC_INTERVAL='<execInterval>'];"
FILLED = "STARTJOB USER_JOB NAME='Customer.userJob6' UID='every5min' AFFINITY='ANY' ARGS='{}' EXEC_INTERVAL='00:05:00';"
WAITING_UID_TEST = rows("USER_JOB", "Customer.userJob1", "uid_test", "WAITING")
STOP_UID_TEST = Then("stopjob user_job name='Customer.userJob1' uid='uid_test' wait timeout 20;", (rows("USER_JOB", "Customer.userJob1", "uid_test", "TERMINATED"),))
RUNNING = "Job is running [type: USER_JOB, name: Customer.userJob1, uid: uid_test]"

COURSE = [
    # -- Process job (the course's echoArg.sh) ------------------------------------------------
    Seed(103, "startjob process NAME='/opt/apps/fabric/workspace/project/echoArg.sh'\nUID='processJobtest' ARGS='{\"0\":\"ARG 1 value\",\"1\":\"ARG 2 value\"}';",
         error="PROCESS '/opt/apps/fabric/workspace/project/echoArg.sh' refused: it is outside PROCESS_JOBS_DIR",
         deliberate="the path is the course's server; a PROCESS NAME must lie inside [jobs] PROCESS_JOBS_DIR "
                    "(only code the operator installed runs), and the demo's directory holds echoArg.sh"),
    Then("jobstatus process;", ("(0 rows)",)),  # the refusal created nothing
    Seed(103, "(the same, with the script in PROCESS_JOBS_DIR)",
         run="startjob process NAME='echoArg.sh' UID='processJobtest' ARGS='{\"0\":\"ARG 1 value\",\"1\":\"ARG 2 value\"}';",
         shows=(rows("PROCESS", "echoArg.sh", "processJobtest", "WAITING"),)),
    Then("waitjob process 'echoArg.sh' with uid='processJobtest' timeout 20;", ("PROCESSED",)),
    Then("joblog process 'echoArg.sh' with uid='processJobtest';",
         ("stdout: Total Arguments : 2", "stdout: 1st Argument = ARG 1 value", "stdout: 2nd Argument = ARG 2 value")),
    # -- STARTJOB -----------------------------------------------------------------------------
    Seed(181, TEMPLATE, run=FILLED, template=True, shows=(rows("USER_JOB", "Customer.userJob6", "every5min", "WAITING"),)),
    Seed(183, "startjob user_job name='Customer.userJob1' args='{\\\"loopsIterationCount\\\":\\\"2000\\\"}' UID='uid_test';",
         shows=(WAITING_UID_TEST,)),
    Then("jobstatus user_job 'Customer.userJob1' with uid='uid_test';", ('{"loopsIterationCount":"2000",',)),
    Until(KEY, Status.IN_PROCESS),
    Seed(250, "STOPJOB <JOBTYP> NAME='<name>' UID='<uid>'", run="STOPJOB USER_JOB NAME='Customer.userJob1' UID='uid_test'",
         template=True, shows=(rows("USER_JOB", "Customer.userJob1", "uid_test", "STOPPING"),)),
    Then("waitjob user_job 'Customer.userJob1' with uid='uid_test' timeout 20;", (rows("USER_JOB", "Customer.userJob1", "uid_test", "TERMINATED"),)),
    Seed(192, "fabric().fetch(\"startjob user_job name='Customer.userJob1' args='{\\\"loopsIterationCount\\\\\\\":\\\\\\\"2000\\\\\\\"}' UID='uid_test'\");",
         run="startjob user_job name='Customer.userJob1' args='{\"loopsIterationCount\\\":\\\"2000\\\"}' UID='uid_test'",
         deliberate="a Java call: typed is the string Java passes to fetch", shows=(WAITING_UID_TEST,)),
    STOP_UID_TEST,
    Seed(199, "Db.Row results = fabric().fetch(\"startjob user_job name='Customer.userJob1' args='{\\\"loopsIterationCount\\\\\\\":\\\\\\\"2000\\\\\\\"}'\n    UID='uid_test'\").firstRow();",
         run="startjob user_job name='Customer.userJob1' args='{\"loopsIterationCount\\\":\\\"2000\\\"}'\n    UID='uid_test'",
         deliberate="a Java call: typed is the string Java passes to fetch", shows=(WAITING_UID_TEST,)),
    STOP_UID_TEST,
    Seed(209, TEMPLATE, run=FILLED.replace("every5min", "every5min_b"), template=True,
         shows=(rows("USER_JOB", "Customer.userJob6", "every5min_b", "WAITING"),)),
    Seed(215, "startjob user_job name='Customer.userJob1' args='{\"loopsIterationCount\":\"2000\"}' UID='uid_test';",
         shows=("| Type ", "| Name ", "| UID ", "| Status ", "| Notes ", WAITING_UID_TEST, "(1 row)")),
    Seed(220, "startjob user_job name='Customer.userJob1' args='{\"loopsIterationCount\":\"2000\"}' UID='uid_test';", error=RUNNING),
    Seed(227, "args='{ \"first_param\": \"first_value\", \"second_param\": \"second_value\" }'",
         run="startjob user_job name='Customer.params' uid='params' args='{ \"first_param\": \"first_value\", \"second_param\": \"second_value\" }';",
         deliberate="an ARGS value: typed in a STARTJOB of a job taking those parameters",
         shows=(rows("USER_JOB", "Customer.params", "params", "WAITING"),)),
    Then("waitjob user_job 'Customer.params' with uid='params' timeout 20;", ("PROCESSED", '{"first_param": "first_value", "second_param": "second_value"}')),
    # -- EXEC_INTERVAL (a timestamp and a cron are SCHEDULED, an interval WAITING: lines 448-449)
    Seed(234, "Timestamp: yyyy-MM-dd HH:mm:ss", run="startjob user_job name='Customer.userJob6' uid='once' exec_interval='2030-01-01 00:00:00';",
         shows=(rows("USER_JOB", "Customer.userJob6", "once", "SCHEDULED"),)),
    Then("jobstatus user_job 'Customer.userJob6' with uid='once';", ("2030-01-01 00:00:00.000",)),
    Seed(237, "23 0-20/2 03 12 2", run="startjob user_job name='Customer.userJob6' uid='cron' exec_interval='23 0-20/2 03 12 2';",
         shows=(rows("USER_JOB", "Customer.userJob6", "cron", "SCHEDULED"),)),
    # minute 23 of an even hour up to 20, in December (on the 3rd or on a Tuesday)
    Then("jobstatus user_job 'Customer.userJob6' with uid='cron';", (re.compile(r"\| \d{4}-12-\d\d (?:[01][02468]|20):23:00\.000 +\|"),)),
    # -- ps and kill --------------------------------------------------------------------------
    Until(KEY, Status.IN_PROCESS, in_ps=True),
    Seed(267, "ps;", shows=("| dc ", "| node ", "| task ", "| thread ", "| type ", "| description ", "| duration (ms) ", "| JOB ", "| UserJob - Customer.userJob1 |")),
    Seed(272, "kill 'dev-fabric-deployment-848b7d9f89-ddm97' 52625;", error="no live node 'dev-fabric-deployment-848b7d9f89-ddm97' (live nodes: local-1, local-2)",
         deliberate="the course's node and task; here the nodes are local-1 and local-2 (filled in below)"),
    Seed(264, "kill <node_id> <task_id>;", run="kill '{node}' {task};", template=True,
         shows=("KILL sent to node {node} for task {task} (UserJob - Customer.userJob1)",)),
    Until(KEY, Status.IN_PROCESS, tries=1, in_ps=True),  # the kill was a failed try; the job runs again
    Seed(279, "ps all", shows=("| UserJob - Customer.userJob1 |",)),
    # -- RESTARTJOB, STOPJOB, RESUMEJOB -------------------------------------------------------
    Seed(293, "RESTARTJOB <JOBTYP> NAME='<name>'", run="RESTARTJOB USER_JOB NAME='Customer.userJob1'", template=True,
         shows=(rows("USER_JOB", "Customer.userJob1", "uid_test", "RESTART"), "(1 row)")),
    Until(KEY, Status.IN_PROCESS),
    Seed(295, "RESTARTJOB <JOBTYP> NAME='<name>' UID='<uid>'", run="RESTARTJOB USER_JOB NAME='Customer.userJob1' UID='uid_test'",
         template=True, shows=(rows("USER_JOB", "Customer.userJob1", "uid_test", "RESTART"),)),
    Until(KEY, Status.IN_PROCESS),
    Seed(247, "STOPJOB <JOBTYP> NAME='<name>'", run="STOPJOB USER_JOB NAME='Customer.userJob1'", template=True,
         shows=(rows("USER_JOB", "Customer.userJob1", "uid_test", "STOPPING"), "(1 row)")),
    Then("waitjob user_job 'Customer.userJob1' with uid='uid_test' timeout 20;", (rows("USER_JOB", "Customer.userJob1", "uid_test", "TERMINATED"),)),
    Seed(302, "RESUMEJOB <JOBTYP> NAME='<name>' UID='<uid>'", run="RESUMEJOB USER_JOB NAME='Customer.userJob1' UID='uid_test'",
         template=True, shows=(WAITING_UID_TEST,)),
    Then("RESUMEJOB USER_JOB NAME='Customer.userJob1' UID='uid_test'", error=RUNNING),  # "applies only to an existing Job"
    Then("RESUMEJOB USER_JOB NAME='Customer.userJob1' UID='nope'", error="No such job [type: USER_JOB, name: Customer.userJob1, uid: nope]"),
    STOP_UID_TEST,
    # -- UPDATEJOB ----------------------------------------------------------------------------
    Seed(319, "EXEC_INTERVAL=\"\"", run="updatejob user_job name='Customer.userJob6' uid='cron' EXEC_INTERVAL=\"\";",
         deliberate="a parameter: typed in the UPDATEJOB of a cron job it turns into a one-time job",
         shows=(rows("USER_JOB", "Customer.userJob6", "cron", "WAITING"),)),
    Then("waitjob user_job 'Customer.userJob6' with uid='cron' timeout 20;", (rows("USER_JOB", "Customer.userJob6", "cron", "PROCESSED"),)),
    Until(("USER_JOB", "Customer.userJob6", "every5min"), Status.SCHEDULED),  # its first run is over
    Seed(324, "UPDATEJOB <jobType> NAME='<name>' [UID='<uid>']\n[AFFINITY='<affinity>'] [ARGS='<args>'] [EXEC_INTERVAL='<execInterval>']\n[RESET_END_TIME=true/false]",
         run="UPDATEJOB USER_JOB NAME='Customer.userJob6' UID='every5min'\nAFFINITY='ANY' ARGS='{}' EXEC_INTERVAL='00:05:00'\nRESET_END_TIME=true",
         template=True, shows=(rows("USER_JOB", "Customer.userJob6", "every5min", "WAITING"),)),
    # -- JOBSTATUS ----------------------------------------------------------------------------
    Seed(339, "JOBSTATUS [x days ago]", run="JOBSTATUS 1 days ago", template=True,
         shows=(rows("PROCESS", "echoArg.sh", "processJobtest", "PROCESSED"),)),
    Seed(339, "JOBSTATUS [x days ago] (one day: the singular)", run="jobstatus 1 day ago;",
         shows=(rows("PROCESS", "echoArg.sh", "processJobtest", "PROCESSED"),)),
    Seed(342, "JOBSTATUS <JOBTYP>", run="JOBSTATUS USER_JOB", template=True,
         shows=(rows("USER_JOB", "Customer.userJob6", "every5min"),), hides=("| params ", "| processJobtest "),
         deliberate="the live jobs of the type, as JOBSTATUS alone (docs/explanation/design-choices.md); the course's "
                    "'all jobs matching the type' is the next line's form"),
    Seed(342, "JOBSTATUS <JOBTYP> (all jobs of the type: with n DAYS AGO)", run="JOBSTATUS USER_JOB 1 days ago", template=True,
         shows=(rows("USER_JOB", "Customer.params", "params", "PROCESSED"), rows("USER_JOB", "Customer.userJob6", "every5min")),
         hides=("| processJobtest ",)),
    Then("JOBSTATUS USER_JOB 'Customer.params' 1 day ago", (rows("USER_JOB", "Customer.params", "params", "PROCESSED"), "(1 row)")),
    Seed(344, "JOBSTATUS <JOBTYP> '<NAME>' WITH UID='<UID>'", run="JOBSTATUS USER_JOB 'Customer.params' WITH UID='params'", template=True,
         shows=("| Output ", "| Arguments ", rows("USER_JOB", "Customer.params", "params", "PROCESSED"), "(1 row)")),
    # -- Session scope (last: a SET applies to every later STARTJOB of the session) -----------
    Seed(381, "SET sync off;", shows=("SET",)),
    Seed(382, "SET auto_mdb_scope = true;", shows=("SET",)),
    Seed(383, "SET k2_ws.ALPINIST = 10;", shows=("SET",)),
    Then("startjob user_job name='Customer.params' uid='scoped' args='{\"first_param\": \"a\", \"second_param\": \"b\"}';"),
    Then("jobstatus user_job 'Customer.params' with uid='scoped';",
         ('{"first_param": "a", "second_param": "b","session_scope":{"scope":{"EXECUTION_ID":"', '"SYNC":"off","AUTO_MDB_SCOPE":"true","k2_ws.ALPINIST":"10","LOG_ID":"')),
]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = two_nodes(tmp_path_factory.mktemp("seed"), settings={"jobs": {"PROCESS_JOBS_DIR": str(ROOT / "examples" / "process_jobs")}})
    yield c
    c.stop_all()


def _shown(client, text: str) -> str:
    out = io.StringIO()
    run_text(client, text, out, io.StringIO())
    return out.getvalue()


def _published(client, row) -> bool:
    """Whether ``row``'s run going on is among the tasks its node published (PS shows those):
    the course's KILL names the task PS shows, which must be this run's, not the one before."""
    node = next((n for n in client.store.nodes() if n.name == row.worker_id), None)
    return node is not None and any(t.get("key") == str(row.key) and t.get("epoch") == row.epoch
                                    for t in json.loads(node.tasks))


def _typed(text: str, last_ps: str) -> str:
    """``{node}`` and ``{task}``: those of the course's userJob1 in the last ps output."""
    if "{node}" not in text:
        return text
    match = re.search(r"\| DC1 +\| (\S+) +\| (\d+) +\| \d+ +\| JOB +\| UserJob - Customer\.userJob1 ", last_ps)
    assert match, f"no userJob1 task in the last ps:\n{last_ps}"
    return text.format(node=match.group(1), task=match.group(2))


def _check(where: str, text: str, code: int, out: str, err: str, shows, error: str) -> str | None:
    """What is wrong with one statement's outcome, or None."""
    if error:
        if code != 1 or not err.startswith(error) or out:
            return f"{where}: {text!r} should be refused with {error!r}; got exit {code}, stderr {err!r}, stdout {out[:300]!r}"
        return None
    if code != 0 or err:
        return f"{where}: {text!r} failed: {err.strip()}"
    pos = 0
    for want in shows:
        m = want.search(out, pos) if isinstance(want, re.Pattern) else None
        at = m.start() if m else (out.find(want, pos) if isinstance(want, str) else -1)
        if at < 0:
            return f"{where}: {text!r} should show {getattr(want, 'pattern', want)!r} (in order); it printed:\n{out}"
        pos = at
    return None


def test_every_command_line_of_the_course(cluster):
    client = cluster.client()
    last_ps = ""
    for step in COURSE:
        if isinstance(step, Until):
            row = cluster.wait_job(*step.key, lambda j, s=step: j.status is s.status and (s.tries is None or j.tries == s.tries),
                                   timeout=20, what=f"{'.'.join(step.key)} {step.status}")
            if step.in_ps:  # PS shows what nodes published: while tasks churn, up to a second late
                wait_for(lambda r=row: _published(client, r), 20, f"run {row.epoch} of {row.key} in PS")
            continue
        where = f"seed line {step.line}" if isinstance(step, Seed) else "check"
        if isinstance(step, Seed) and step.template:
            out, err = io.StringIO(), io.StringIO()
            code = run_text(client, step.printed, out, err)
            assert code == 1 and err.getvalue().startswith("Syntax error at line 1") and not out.getvalue(), (where, err.getvalue())
            assert re.search(r"unexpected '[<\[]", err.getvalue()), f"{where}: refused at its first placeholder: {err.getvalue()}"
        text = _typed(step.run or step.printed, last_ps)
        out, err = io.StringIO(), io.StringIO()
        code = run_text(client, text, out, err)
        shows = tuple(_typed(s, last_ps) if isinstance(s, str) else s for s in step.shows)
        problem = _check(where, text, code, out.getvalue(), err.getvalue(), shows, step.error)
        assert problem is None, problem
        shown = [h for h in step.hides if h in out.getvalue()]
        assert not shown, f"{where}: {text!r} should not show {shown}; it printed:\n{out.getvalue()}"
        if text.lower().startswith("ps"):
            last_ps = out.getvalue()


def test_the_course_transcript_through_fabricjobs_shell(cluster):
    """Lines 215-221 as typed into ``fabricjobs shell``, and the issue's two inputs."""
    uid = "uid_shell"
    r = cluster.shell("-e", f"startjob user_job name='Customer.userJob1' args='{{\"loopsIterationCount\":\"2000\"}}' UID='{uid}';\n"
                            f"startjob user_job name='Customer.userJob1' args='{{\"loopsIterationCount\":\"2000\"}}' UID='{uid}';")
    assert r.returncode == 1
    assert re.search(row("USER_JOB", "Customer.userJob1", uid, "WAITING"), r.stdout) and "(1 row)" in r.stdout
    assert r.stderr.strip() == f"Job is running [type: USER_JOB, name: Customer.userJob1, uid: {uid}]"
    r = cluster.shell("-e", "startjob user_job name='Customer.userJob6' uid='cr' exec_interval='0/30 * * * * *';"
                            " updatejob user_job name='Customer.userJob6' uid='cr' EXEC_INTERVAL=\"\"; jobstatus 1 day ago;"
                            f" stopjob user_job name='Customer.userJob1' uid='{uid}' wait timeout 20;")
    assert r.returncode == 0, r.stderr
    assert re.search(row("USER_JOB", "Customer.userJob6", "cr", "WAITING"), r.stdout)
    job = cluster.job("USER_JOB", "Customer.userJob6", "cr")
    assert job.execution_interval == ""  # one-time now
    assert re.search(row("USER_JOB", "Customer.userJob1", uid, "TERMINATED"), r.stdout)
