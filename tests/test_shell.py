"""The shell: scripts from -e / -f / stdin, output formats, errors, and the interactive prompt
driven for real through a pseudo-terminal."""

from __future__ import annotations

import io
import json
import os
import re
import stat
import signal
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from fabricjobs.client import Client
from fabricjobs.config import load_config
from fabricjobs.errors import JobNotFound
from fabricjobs.shell.script import run_text
from fabricjobs.store import open_store
from harness import ROOT, Cluster

pexpect = pytest.importorskip("pexpect")


@pytest.fixture
def cluster(tmp_path, request):
    c = Cluster(tmp_path, request=request)
    yield c
    c.stop_all()


def test_script_from_e_runs_statements_in_order_and_prints_tables(cluster):
    r = cluster.shell("-e", "startjob user_job name='Probe.noop' uid='a'; startjob user_job name='Probe.noop' uid='b'; jobstatus user_job;")
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("(1 row)") == 2 and r.stdout.rstrip().endswith("(2 rows)")
    assert "| USER_JOB | Probe.noop | a     | WAITING  |" in r.stdout
    assert r.stderr == ""


def test_an_error_stops_the_script_goes_to_stderr_and_exits_non_zero(cluster):
    r = cluster.shell("-e", "startjob user_job name='Probe.noop' uid='a';\nstartjob user_job name='Probe.noop' uid='a';\nstartjob user_job name='Probe.noop' uid='c';")
    assert r.returncode == 1
    assert r.stderr.strip() == "Job is running [type: USER_JOB, name: Probe.noop, uid: a]"
    assert "uid='c'" not in r.stdout and cluster.job("USER_JOB", "Probe.noop", "c") is None


def test_help_in_a_script_lists_the_statements_as_at_the_prompt(cluster):
    """``help`` is a shell word, not a statement: from -e or stdin it prints the same list as
    at the prompt, after the statements before it and before those after it."""
    r = cluster.shell("-e", "startjob user_job name='Probe.noop' uid='h1'; help; jobstatus user_job;")
    assert r.returncode == 0, r.stderr
    assert r.stdout.index("(1 row)") < r.stdout.index("Statements end with") < r.stdout.rindex("| h1 ")
    assert "JOBSTATUS" in r.stdout and r.stdout.count("(1 row)") == 2
    piped = cluster.shell(input="-- what is there?\n\\?\n")
    assert piped.returncode == 0 and "Statements end with ';'" in piped.stdout, piped.stderr


def test_a_timestamp_beyond_the_calendar_in_its_zone_is_refused_with_the_reason(cluster):
    """9999-12-31 23:59:59 is a date in UTC, but past the last one in Honolulu (10 h behind):
    a clear refusal, not an internal error, and no job."""
    r = cluster.shell("-e", "startjob user_job name='Probe.noop' uid='far' exec_interval='9999-12-31 23:59:59' "
                            "tz='Pacific/Honolulu';")
    assert r.returncode == 1
    assert r.stderr.strip() == ("invalid EXEC_INTERVAL '9999-12-31 23:59:59': out of the range of dates in time zone "
                                "Pacific/Honolulu")
    assert cluster.job("USER_JOB", "Probe.noop", "far") is None


def test_a_time_no_zone_can_hold_is_shown_in_utc_not_as_an_internal_error():
    """A job due at 9999-12-31 23:30 UTC (a valid timestamp there) listed by a shell in Berlin, an
    hour ahead: its due time is shown in UTC, where JOBSTATUS and RUNJOB's note failed with an
    internal OverflowError; a year below 1000 is shown with four digits."""
    from datetime import datetime, timezone
    from zoneinfo import ZoneInfo

    from fabricjobs.clock import shown_time

    far = datetime(9999, 12, 31, 23, 30, tzinfo=timezone.utc)
    assert shown_time(far, ZoneInfo("Europe/Berlin")) == "9999-12-31 23:30:00.000"
    assert shown_time(datetime(1, 1, 1, 0, 53, 28, tzinfo=timezone.utc), None) == "0001-01-01 00:53:28.000"


def test_continue_on_error_runs_the_rest(cluster):
    r = cluster.shell("--continue-on-error", "-e", "stopjob user_job name='Probe.noop' uid='zz'; startjob user_job name='Probe.noop' uid='c';")
    assert r.returncode == 1
    assert "No active job" in r.stderr and cluster.job("USER_JOB", "Probe.noop", "c") is not None


def test_a_syntax_error_among_startjobs_runs_those_before_it_and_stops(cluster):
    """A script's STARTJOBs are held back to be written together; a statement that does not
    parse still comes after the ones before it, and without --continue-on-error stops the rest."""
    script = "startjob user_job name='Probe.noop' uid='a';\nstartjob user_job nme='x';\nstartjob user_job name='Probe.noop' uid='c';"
    r = cluster.shell("-e", script)
    assert r.returncode == 1 and r.stderr.startswith("Syntax error at line 2")
    assert "| a     |" in r.stdout and cluster.job("USER_JOB", "Probe.noop", "a") is not None
    assert cluster.job("USER_JOB", "Probe.noop", "c") is None
    r = cluster.shell("--continue-on-error", "-e", script.replace("'a'", "'a2'").replace("'c'", "'c2'"))
    assert r.returncode == 1 and r.stderr.startswith("Syntax error at line 2")
    assert r.stdout.index("| a2    |") < r.stdout.index("| c2    |")
    assert cluster.job("USER_JOB", "Probe.noop", "c2") is not None


def _counting_inserts(store_config) -> tuple[Client, list[int]]:
    """A client on ``store_config`` with the example jobs, and the sizes of its store's bulk inserts."""
    from backends import add_sections

    add_sections(store_config, {"jobs": {"USER_JOBS_DIR": ROOT / "examples" / "jobs"}})
    cfg = load_config(store_config)
    client = Client(open_store(cfg), cfg, owns_store=True)
    calls: list[int] = []
    real = client.store.insert_many
    client.store.insert_many = lambda jobs: (calls.append(len(jobs)), real(jobs))[1]
    return client, calls


def test_a_files_startjobs_are_written_together_and_printed_in_order(store_config, tmp_path):
    """`shell -f` with 600 STARTJOBs among other statements: written in groups (a bulk submit
    costs one store transaction per group, docs/guides/scripts-and-code.md), each result
    printed in the script's order, the other statements in their place."""
    client, calls = _counting_inserts(store_config)
    try:
        text = "".join(f"startjob user_job name='Customer.userJob1' uid='u{i:03d}';\n" for i in range(300))
        text += "jobstatus user_job 'Customer.userJob1' with uid='u000';\n"
        text += "".join(f"startjob user_job name='Customer.userJob1' uid='u{i:03d}';\n" for i in range(300, 600))
        out, err = io.StringIO(), io.StringIO()
        assert run_text(client, text, out, err) == 0, err.getvalue()
        assert sum(calls) == 600 and len(calls) <= 4, calls
        uids = [line.split("|")[3].strip() for line in out.getvalue().splitlines() if line.startswith("| USER_JOB")]
        assert uids == [f"u{i:03d}" for i in range(300)] + ["u000"] + [f"u{i:03d}" for i in range(300, 600)]
    finally:
        client.close()


def test_syntax_errors_point_at_the_script_line_and_column(cluster):
    r = cluster.shell("-e", "jobstatus;\n  startjob user_job nme='x';")
    assert r.returncode == 1
    lines = r.stderr.splitlines()
    assert lines[0].startswith("Syntax error at line 2, column 21:") and "NAME=" in lines[0]
    assert lines[2] == "  " + " " * 20 + "^"
    assert "Traceback" not in r.stderr
    assert "(0 rows)" in r.stdout  # the first statement ran


def test_a_long_scripts_statements_carry_no_copy_of_the_lines_before_them():
    """A restore of a big export is one long file: its statements are split in one pass, each
    holding only its own text (each padded with every newline before it, 20,000 statements took
    330 MB), and an error deep in it still points at the file's own line and column."""
    from fabricjobs.errors import CommandSyntaxError
    from fabricjobs.shell.script import split_statements

    text = "".join(f"startjob user_job name='Probe.noop' uid='u{i}';\n" for i in range(20_000))
    text += "jobstatus; startjob user_job nme='x';\n"
    pieces = list(split_statements(text))
    assert len(pieces) == 20_002 and sum(len(p.text) for p in pieces) < len(text)
    with pytest.raises(CommandSyntaxError) as bad:
        pieces[-1].parse(text, 1 << 20)
    assert (bad.value.line, bad.value.column) == (20_001, 30), str(bad.value)
    assert str(bad.value).split("\n")[1] == "  jobstatus; startjob user_job nme='x';"


def test_stdin_and_file_input_and_the_output_formats(cluster, tmp_path):
    r = cluster.shell(input="startjob user_job name='Probe.noop' uid='s';\n")
    assert r.returncode == 0 and "WAITING" in r.stdout
    script = tmp_path / "s.sql"
    script.write_text("-- a comment\njobstatus user_job 'Probe.noop' with uid='s';\n")
    r = cluster.shell("-f", str(script), "--format", "json")
    data = json.loads(r.stdout)
    assert data[0]["UID"] == "s" and data[0]["Status"] == "WAITING" and data[0]["Is Archived"] is False
    # A table's notice stays out of the JSON (a document of rows) but is not dropped: stderr.
    r = cluster.shell("--format", "json", "-e", "startjob user_job name='Probe.noop' uid='s' if not exists;")
    assert r.returncode == 0 and json.loads(r.stdout)[0]["UID"] == "s" and r.stderr.strip() == "(it exists: left as it is)"
    r = cluster.shell("-e", "jobstatus user_job;", "--format", "csv")
    assert r.stdout.splitlines()[0].startswith("Type,Name,UID,Status,Creation Time")
    assert r.stdout.splitlines()[1].startswith("USER_JOB,Probe.noop,s,WAITING,")


def test_started_jobs_lists_exactly_the_jobs_the_script_started(cluster, tmp_path):
    """What ./scripts/run waits for: the jobs of this script's STARTJOBs (a generated UID
    included), not those of an earlier script nor those a failed STARTJOB did not create."""
    assert cluster.shell("-e", "startjob user_job name='Probe.noop' uid='earlier';").returncode == 0
    started = tmp_path / "started.jsonl"
    r = cluster.shell("--started-jobs", str(started), "--continue-on-error", "-e",
                      "startjob user_job name='Probe.noop' uid='a'; startjob user_job name='Probe.noop' uid='earlier';"
                      " startjob user_job name='Probe.noop'; jobstatus user_job;")
    assert r.returncode == 1 and "Job is running" in r.stderr
    lines = [json.loads(line) for line in started.read_text().splitlines()]
    assert lines[0] == {"type": "USER_JOB", "name": "Probe.noop", "uid": "a"} and len(lines) == 2
    assert cluster.job("USER_JOB", "Probe.noop", lines[1]["uid"]) is not None and lines[1]["uid"] not in ("a", "earlier")
    # IF NOT EXISTS that found the job started nothing: it was listed all the same.
    again = tmp_path / "again.jsonl"
    r = cluster.shell("--started-jobs", str(again), "-e", "startjob user_job name='Probe.noop' uid='a' if not exists;")
    assert r.returncode == 0 and again.read_text() == "", again.read_text()


def test_scripts_take_the_prompts_words_a_bom_and_a_reader_that_goes_away(cluster, tmp_path):
    """What a script met that the prompt takes: exit (a prompt session saved as a script: it
    was a syntax error); help as JSON with --format json (it broke the JSON) and an unknown
    statement's help as an error; a file saved with a UTF-8 BOM (its first statement failed);
    and output piped into head (an "internal error: BrokenPipeError" per statement left, exit 1)."""
    r = cluster.shell(input="startjob user_job name='Probe.noop' uid='b';\nexit\nstopjob user_job name='Probe.noop' uid='b';\n")
    assert r.returncode == 0 and r.stderr == "" and cluster.job("USER_JOB", "Probe.noop", "b").status.name == "WAITING"
    r = cluster.shell("--format", "json", "-e", "help startjob; jobstatus user_job;")
    decoder, rest, found = json.JSONDecoder(), r.stdout, []  # (a stream of JSON values, as jq reads them)
    while rest.strip():
        value, end = decoder.raw_decode(rest.lstrip())
        found.append(value)
        rest = rest.lstrip()[end:]
    assert r.returncode == 0 and found[0]["help"].startswith("STARTJOB") and found[1][0]["UID"] == "b", r.stdout
    r = cluster.shell("-e", "help nosuch;")
    assert r.returncode == 1 and r.stdout == "" and "No statement 'nosuch'" in r.stderr, (r.stdout, r.stderr)
    bom = tmp_path / "bom.sql"
    bom.write_bytes("\ufeffjobstatus user_job 'Probe.noop' with uid='b';\n".encode())
    r = cluster.shell("-f", str(bom))
    assert r.returncode == 0 and "| b " in r.stdout, r.stderr
    cluster.fetch("".join(f"startjob user_job name='Probe.noop' uid='many{i:03d}';" for i in range(400)))
    piped = subprocess.run(["bash", "-c", f"{sys.executable} -m fabricjobs --config {cluster.config_path} shell "
                            "-e 'jobstatus user_job; jobstatus user_job;' | head -1; echo \"status ${PIPESTATUS[0]}\""],
                           capture_output=True, text=True, timeout=60, env=dict(os.environ, XDG_STATE_HOME=str(tmp_path)))
    assert piped.stdout.rstrip().endswith("status 0") and "internal error" not in piped.stderr, (piped.stdout[-200:], piped.stderr)
    assert not (tmp_path / "fabricjobs" / "shell.log").exists()  # (no bug was logged)


def test_control_characters_from_a_job_or_a_command_are_shown_not_sent_to_the_terminal(cluster):
    """A job's error may hold a carriage return or an escape sequence: a table cell shows them
    as symbols (one column each), while the JSON output keeps the value exactly, for programs.
    A command that puts one in a name is refused, its input quoted visibly."""
    cluster.start_node("node-a")
    error = "line one\r\n\x1b[2Jcleared?\rback"
    cluster.fetch(f"startjob user_job name='Probe.fails_saying' uid='ctl' args='{json.dumps({'message': error})}';")
    cluster.wait_job("USER_JOB", "Probe.fails_saying", "ctl", lambda j: j.status.name == "FAILED")
    table = cluster.shell("-e", "jobhistory user_job 'Probe.fails_saying' with uid='ctl';")
    assert table.returncode == 0, table.stderr
    assert "\x1b" not in table.stdout and "\r" not in table.stdout
    assert "\u241b[2Jcleared?\u240dback" in table.stdout  # ␛ and ␍; the "\r\n" is a line break in the cell
    as_json = cluster.shell("--format", "json", "-e", "jobhistory user_job 'Probe.fails_saying' with uid='ctl';")
    assert error in json.loads(as_json.stdout)[0]["Error"]
    # Found by the fuzz test below: a name with a line break in it split the "No active job"
    # message in two. Such names are refused (one message, the input quoted visibly).
    bad = cluster.shell("-e", "stopjob user_job name='\x1eProbe.noop' uid='u';")
    assert bad.returncode == 1 and bad.stdout == ""
    head, quoted, caret = bad.stderr.rstrip("\n").split("\n")
    assert head.endswith("NAME must not contain control characters, line breaks, invisible or direction-changing characters or lone surrogates (U+001E at character 1)")
    assert quoted == "  stopjob user_job name='\u241eProbe.noop' uid='u';" and caret.strip() == "^"  # the script's own line


def test_a_message_quoting_raw_control_characters_is_printed_as_one_visible_line():
    """Whatever a message quotes (here an error that carries a job's own text), the shell
    prints it as one line without sending the terminal an escape sequence or a carriage return."""
    class Refusing:
        def execute(self, command):
            raise JobNotFound("job said: \x1b[2Jgone\r\nsecond\u2028third")

    err = io.StringIO()
    assert run_text(Refusing(), "jobstatus;", io.StringIO(), err) == 1
    assert err.getvalue() == "job said: \u241b[2Jgone\u240d\u240asecond\ufffdthird\n"


def test_held_startjobs_are_printed_before_the_next_statement_runs(store_config):
    """The STARTJOBs held back to be written together are written and printed before the
    statement after them starts (a WAITJOB may take long: what was started is shown first)."""
    from backends import add_sections
    from fabricjobs.commands import statements

    add_sections(store_config, {"jobs": {"USER_JOBS_DIR": ROOT / "examples" / "jobs"}})
    cfg = load_config(store_config)
    client = Client(open_store(cfg), cfg, owns_store=True)
    out, seen = io.StringIO(), []
    real = client.execute

    def execute(command):
        if isinstance(command, statements.WaitJob):
            seen.append(out.getvalue())
        return real(command)

    client.execute = execute
    try:
        text = ("startjob user_job name='Customer.userJob1' uid='w1'; startjob user_job name='Customer.userJob1' uid='w2';"
                " waitjob user_job 'Customer.userJob1' with uid='w1' timeout 1;")
        assert run_text(client, text, out, io.StringIO()) == 1  # no node runs it: the wait times out
        assert seen and "| w1    |" in seen[0] and "| w2    |" in seen[0], seen
    finally:
        client.close()


def test_a_bug_shows_one_line_and_its_traceback_goes_to_the_shell_log_only(tmp_path, monkeypatch):
    """As the CLI runs the shell (its log records on stderr, cli.py): a bug in a statement is
    one line on stderr; the traceback is in the shell log, not on the terminal."""
    import logging

    class Broken:
        def execute(self, command):
            raise RuntimeError("a bug")

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    terminal = io.StringIO()
    handler = logging.StreamHandler(terminal)
    logging.getLogger().addHandler(handler)
    try:
        err = io.StringIO()
        assert run_text(Broken(), "jobstatus;", io.StringIO(), err) == 1
    finally:
        logging.getLogger().removeHandler(handler)
    assert err.getvalue().startswith("internal error: RuntimeError: a bug (details in ") and err.getvalue().count("\n") == 1
    assert "Traceback" not in terminal.getvalue() + err.getvalue()
    assert "Traceback" in (tmp_path / "fabricjobs" / "shell.log").read_text()


def test_a_bug_in_any_one_off_command_is_one_line_not_a_traceback(tmp_path, monkeypatch, capsys):
    """Not only statements: a bug in ``fabricjobs nodes`` (or ps, export-jobs, ...) is one line
    on stderr and exit status 1; its traceback is in the shell log."""
    from fabricjobs import cli

    def broken(args):
        raise RuntimeError("a bug in a command")

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    monkeypatch.setitem(cli.COMMANDS, "nodes", broken)
    assert cli.main(["--config", str(tmp_path / "none.ini"), "nodes"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("internal error: RuntimeError: a bug in a command (details in ") and err.count("\n") == 1, err
    assert "Traceback" in (tmp_path / "fabricjobs" / "shell.log").read_text()


def test_environment_names_the_config(cluster, tmp_path):
    env = dict(os.environ, FABRICJOBS_CONFIG=str(cluster.config_path))
    r = subprocess.run([sys.executable, "-m", "fabricjobs", "shell", "-e", "startjob user_job name='Probe.noop' uid='env';"],
                       capture_output=True, text=True, env=env, cwd=tmp_path, timeout=30)
    assert r.returncode == 0, r.stderr
    assert cluster.job("USER_JOB", "Probe.noop", "env") is not None


# -- the shell's entry point never shows a traceback or hangs ---------------------------------

SEED_COMMANDS = [
    "startjob user_job name='Probe.noop' args='{\"loopsIterationCount\":\"2000\"}' UID='uid_test';",
    "stopjob user_job name='Probe.noop' uid='uid_test';",
    "restartjob user_job name='Probe.noop';",
    "resumejob user_job name='Probe.noop' uid='uid_test';",
    "updatejob user_job name='Probe.noop' exec_interval='0 * * * *' reset_end_time=true;",
    "jobstatus 3 days ago;",
    "jobstatus user_job 'Probe.noop' with uid='uid_test';",
    "ps all;",
    "kill 'dev-fabric-deployment-848b7d9f89-ddm97' 52625;",
    "set k2_ws.ALPINIST = 10;",
]


def _mutate(text: str, data) -> str:
    ops = data.draw(st.lists(st.tuples(st.sampled_from("idrt"), st.integers(0, len(text)), st.characters()), max_size=4))
    for op, pos, ch in ops:
        if op == "i":
            text = text[:pos] + ch + text[pos:]
        elif op == "d":
            text = text[:pos] + text[pos + 1:]
        elif op == "r":
            text = text[:pos] + ch + text[pos + 1:]
        else:
            text = text[:pos]
    return text


@pytest.fixture(scope="module")
def fuzz_client(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fuzz")
    cfg_path = tmp / "config.ini"
    cfg_path.write_text(f"[store]\nSQLITE_PATH = {tmp / 'fuzz.db'}\n[jobs]\nUSER_JOBS_DIR = {ROOT / 'tests' / 'jobs'}\n"
                        f"PROCESS_JOBS_DIR = {ROOT / 'tests' / 'process'}\n")
    cfg = load_config(cfg_path)
    c = Client(open_store(cfg), cfg, owns_store=True)
    yield c
    c.close()


@settings(max_examples=300, deadline=30000, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_input_ends_in_results_or_one_clean_error(fuzz_client, data):
    base = data.draw(st.one_of(st.sampled_from(SEED_COMMANDS), st.text(max_size=80)))
    text = _mutate(base, data)
    out, err = io.StringIO(), io.StringIO()
    keep_going = data.draw(st.booleans())

    def hung(signum, frame):
        raise AssertionError(f"no result after 10 s for {text!r}")

    previous = signal.signal(signal.SIGALRM, hung)  # a hang fails the example (hypothesis' deadline only reports afterwards)
    signal.setitimer(signal.ITIMER_REAL, 10)
    try:
        code = run_text(fuzz_client, text, out, err, continue_on_error=keep_going)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert code in (0, 1)
    # (A message starts a line; a syntax error's quote of the input, which may contain any
    # words, and its caret are indented under it.)
    lines = [line for line in err.getvalue().splitlines() if line.strip() and not line[0].isspace()]
    assert not any(line.startswith(("Traceback", "internal error:")) for line in lines), err.getvalue()
    if code == 1:
        assert lines, "a failure says why"
        if not keep_going:  # the script stops at its first error: one message
            assert len(lines) == 1, err.getvalue()


# -- the interactive prompt in a real pseudo-terminal -------------------------------------------

def test_a_paste_of_startjobs_at_the_prompt_is_written_together(store_config, tmp_path, monkeypatch, capsys):
    """A paste of 300 STARTJOBs at the interactive prompt is one entry: written in groups, as
    a script's are (docs/guides/scripts-and-code.md), not one store write per statement."""
    from fabricjobs.shell import repl

    client, calls = _counting_inserts(store_config)
    entries = ["".join(f"startjob user_job name='Customer.userJob1' uid='v{i:03d}';\n" for i in range(300))]

    class Prompt:  # what prompt_toolkit hands the loop: the entry, then Ctrl-D
        def __init__(self, *args, **kw):
            pass

        def prompt(self):
            if not entries:
                raise EOFError
            return entries.pop()

    monkeypatch.setattr(repl, "PromptSession", Prompt)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    try:
        assert repl.run_repl(client) == 0
        assert sum(calls) == 300 and len(calls) <= 2, calls
        assert capsys.readouterr().out.count("| USER_JOB ") == 300
    finally:
        client.close()


def _prompt(cluster, tmp_path, pager: str = "") -> "pexpect.spawn":
    """``fabricjobs shell`` at a terminal (a pty, 40 lines of 250 columns), its history under
    ``tmp_path``; no pager unless one is named (an answer taller than 40 lines would be less's)."""
    env = dict(os.environ, XDG_STATE_HOME=str(tmp_path / "state"), TERM="xterm", FABRICJOBS_PAGER=pager)
    return pexpect.spawn(sys.executable, ["-m", "fabricjobs", "--config", str(cluster.config_path), "shell"],
                         env=env, cwd=str(tmp_path), encoding="utf-8", timeout=15, dimensions=(40, 250))


def test_interactive_prompt_multiline_statement_and_tab_completion(cluster, tmp_path):
    cluster.fetch("startjob user_job name='Probe.noop' uid='tty';")
    child = _prompt(cluster, tmp_path)
    try:
        child.expect("fabric>")
        child.send("jobsta")
        child.send("\t")  # completes the keyword
        child.expect("JOBSTATUS")
        child.send(" user_job\r")  # no ';' yet: a new line, nothing runs
        child.expect("->")
        child.send("'Probe.noop' with uid='tty';\r")
        child.expect(r"\(1 row\)")
        assert "Probe.noop" in child.before and "WAITING" in child.before
        child.send("startjob user_job nme='x';\r")  # an error prints one message and the shell goes on
        child.expect("Syntax error at line 1")
        child.expect("fabric>")
        child.send("jobstatus user_job 'Probe.n")
        child.send("\t")  # the name of a job in the store (read in the background at start-up)
        child.expect("'Probe.noop'")
        child.send(";\r")
        child.expect(r"\(1 row\)")
        # A paste of several statements in one entry runs as a script: in order, to the first error
        child.send("\x1b[200~startjob user_job name='Probe.noop' uid='p1';\nstartjob user_job name='Probe.noop' "
                   "uid='p2';\njobstatus user_job 'Probe.noop' with uid='p2';\x1b[201~")  # a bracketed paste
        child.send("\r")
        shown = []
        for _ in range(3):
            child.expect(r"\(1 row\)")
            shown.append(child.before)
        assert "| p1 " in shown[0] and "| p2 " in shown[1] and re.search(r"UID +\| p2", shown[2]), shown
        child.expect("fabric>")
        child.send("help\r")  # every statement of the language, one screen
        for statement in ("STARTJOB", "UPDATEJOB", "JOBSTATUS", "JOBHISTORY", "JOBLOG", "WAITJOB", "DELETEHISTORY", "KILL",
                          "NODES"):
            child.expect(statement)
        child.expect("fabric>")
        child.send("stopjob user_job name='Probe.noop' uid='tty'")
        child.sendintr()  # Ctrl-C drops the line: the job is not stopped
        child.expect("fabric>")
        child.send("jobstatus user_job 'Probe.noop' with uid='tty';\r")
        child.expect(r"\(1 row\)")
        assert "WAITING" in child.before and "STOPPING" not in child.before and "TERMINATED" not in child.before
        child.expect("fabric>")
        child.sendcontrol("d")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    history = tmp_path / "state" / "fabricjobs" / "history"
    assert history.exists() and "startjob user_job nme=" in history.read_text()
    assert stat.S_IMODE(history.stat().st_mode) == 0o600  # it holds whatever ARGS were typed
    assert stat.S_IMODE(history.parent.stat().st_mode) == 0o700


def test_an_answer_taller_than_the_terminal_goes_through_the_pager(cluster, tmp_path):
    """As psql and pgcli do: a JOBSTATUS of 60 rows on a terminal of 40 lines is handed to the
    pager (here a script that keeps what it was given), one of 3 rows is printed as it is."""
    kept = tmp_path / "paged.txt"
    pager = tmp_path / "pager.sh"
    pager.write_text(f"#!/bin/sh\ncat > {kept}\necho paged\n")
    pager.chmod(0o755)
    cluster.fetch("".join(f"startjob user_job name='Probe.noop' uid='p{i:02d}' affinity='nowhere';" for i in range(60)))
    child = _prompt(cluster, tmp_path, pager=str(pager))
    try:
        child.expect("fabric>")
        child.send("jobstatus user_job 'Probe.noop' with uid='p01';\r")
        child.expect(r"\(1 row\)")  # short: printed as it is
        assert not kept.exists()
        child.send("jobstatus user_job 'Probe.noop';\r")
        child.expect("paged")
        child.expect("fabric>")
        shown = kept.read_text()
        # (as a table, or one record per block where the table is wider than the terminal)
        assert re.search(r"\| p00\s", shown) and re.search(r"\| p59\s", shown) and "(60 rows)" in shown, shown[-300:]
        child.sendcontrol("d")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)


def test_interactive_history_search_help_of_a_statement_and_a_job_just_started(cluster, tmp_path):
    """Ctrl-R finds an earlier entry and Enter takes it into the input (it is run by the next
    Enter); ``help <statement>`` shows that statement; a job started at the prompt is offered by
    the next Tab."""
    child = _prompt(cluster, tmp_path)
    try:
        child.expect("fabric>")
        child.send("calendars;\r")
        child.expect(r"\(0 rows\)")
        child.expect("fabric>")
        child.send("nodes;\r")
        child.expect(r"\(\d+ rows?\)")
        child.expect("fabric>")
        child.sendcontrol("r")
        child.send("calen")
        child.expect(r"I-search backward: .*calen")
        child.send("\r")  # takes the match ...
        child.send("\r")  # ... and this runs it
        child.expect(r"\(0 rows\)")
        child.expect("fabric>")
        child.send("help waitjob\r")  # (no ';' needed, as the banner says: it opened a new line)
        child.expect(r"WAITJOB <TYPE> '<NAME>' WITH UID='<UID>'")
        child.expect("Waits until a job")
        child.expect("fabric>")
        child.send("startjob user_job name='Probe.noop' uid='just-now' affinity='nowhere';\r")
        child.expect(r"\(1 row\)")
        child.expect("no node is running, so the job waits until one starts")  # (no node was started)
        child.expect("fabric>")
        child.send("jobstatus user_job 'Probe.noop' with uid='just")
        child.send("\t")
        child.expect("'just-now'")
        child.send(";\r")
        child.expect(r"\(1 row\)")
        child.expect("fabric>")
        cluster.start_node("n1")  # (started: waited for until it beats)
        child.send("startjob user_job name='Probe.noop' uid='with-a-node';\r")
        child.expect(r"\(1 row\)")
        child.expect("fabric>")
        assert "no node is running" not in child.before, child.before
        child.sendcontrol("d")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
