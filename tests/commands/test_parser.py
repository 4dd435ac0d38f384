"""The command language (docs/reference/statements.md): text -> command objects, and every way to get it wrong."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fabricjobs.commands import (
    JobHistory,
    JobStatus,
    Kill,
    Ps,
    RestartJob,
    ResumeJob,
    Set,
    StartJob,
    Statement,
    StopJob,
    UpdateJob,
    expected_at,
    lex,
    parse_one,
    parse_script,
)
from fabricjobs.commands import parser as parser_module
from fabricjobs.errors import CommandSyntaxError, ValidationError
from fabricjobs.model import JobType

ROOT = Path(__file__).resolve().parents[2]


def one(text: str):
    return parse_one(text)


def fails(text: str, kind: type[CommandSyntaxError] = CommandSyntaxError) -> CommandSyntaxError:
    with pytest.raises(CommandSyntaxError) as info:
        parse_script(text)
    assert type(info.value) is kind, f"{type(info.value).__name__}: {info.value}"
    return info.value


def assert_rendered(exc: CommandSyntaxError, line: int, column: int, *needles: str) -> None:
    """Position, a one-line head naming the place, and the source line with a caret under it."""
    assert (exc.line, exc.column) == (line, column), str(exc)
    rendered = str(exc).split("\n")
    head = rendered[0]
    assert head == head.splitlines()[0], "the first line of an error is a single line"
    assert f"line {line}, column {column}" in head
    src = exc.text.split("\n")[line - 1]
    if len(src) <= 160:
        assert rendered[1] == f"  {src}"
        assert rendered[2] == "  " + " " * (column - 1) + "^"
    else:  # a window of a long line, with the caret still under the right character
        window, caret = rendered[1][2:], rendered[2].index("^") - 2
        assert len(window) == 160 and window in src and rendered[2].strip() == "^"
        assert window[caret] == src[column - 1]
    for needle in needles:
        assert needle in head, f"{needle!r} not in {head!r}"


# -- the seed's commands ---------------------------------------------------------------------

SEED_JSON_ARGS = r"""startjob user_job name='Customer.userJob1' args='{\"loopsIterationCount\":\"2000\"}' UID='uid_test';"""
SEED_PROCESS = (
    "startjob process NAME='/opt/apps/fabric/workspace/project/echoArg.sh'  \n"
    """UID='processJobtest' ARGS='{"0":"ARG 1 value","1":"ARG 2 value"}';"""
)


@pytest.mark.parametrize(
    "text, command",
    [
        (
            SEED_JSON_ARGS,
            StartJob("USER_JOB", "Customer.userJob1", uid="uid_test", args='{"loopsIterationCount":"2000"}'),
        ),
        (
            # the Java example's string as the Java compiler hands it over
            r"""startjob user_job name='Customer.userJob1' args='{"loopsIterationCount\":\"2000\"}' UID='uid_test'""",
            StartJob("USER_JOB", "Customer.userJob1", uid="uid_test", args='{"loopsIterationCount":"2000"}'),
        ),
        (
            """startjob user_job name='Customer.userJob1' args='{"loopsIterationCount":"2000"}' UID='uid_test';""",
            StartJob("USER_JOB", "Customer.userJob1", uid="uid_test", args='{"loopsIterationCount":"2000"}'),
        ),
        (
            SEED_PROCESS,
            StartJob(
                "PROCESS",
                "/opt/apps/fabric/workspace/project/echoArg.sh",
                uid="processJobtest",
                args='{"0":"ARG 1 value","1":"ARG 2 value"}',
            ),
        ),
        (
            """startjob user_job name='Customer.userJob2' affinity='DC1' """
            """args='{ "first_param": "first_value", "second_param": "second_value" }' exec_interval='23 0-20/2 03 12 2';""",
            StartJob(
                "USER_JOB",
                "Customer.userJob2",
                affinity="DC1",
                args='{ "first_param": "first_value", "second_param": "second_value" }',
                exec_interval="23 0-20/2 03 12 2",
            ),
        ),
        ("kill 'dev-fabric-deployment-848b7d9f89-ddm97' 52625;", Kill("dev-fabric-deployment-848b7d9f89-ddm97", 52625)),
        ("kill dev-fabric-deployment-848b7d9f89-ddm97 52625;", Kill("dev-fabric-deployment-848b7d9f89-ddm97", 52625)),
        ("ps;", Ps(all=False)),
        ("ps all;", Ps(all=True)),
        ("SET sync off;", Set("sync", "off")),
        ("SET auto_mdb_scope = true;", Set("auto_mdb_scope", "true")),
        ("SET k2_ws.ALPINIST = 10;", Set("k2_ws.ALPINIST", "10")),
        ("SET greeting = 'hello; world';", Set("greeting", "hello; world")),
        ("STOPJOB USER_JOB NAME='Customer.userJob1'", StopJob("USER_JOB", "Customer.userJob1")),
        ("STOPJOB USER_JOB NAME='Customer.userJob1' UID='uid_test'", StopJob("USER_JOB", "Customer.userJob1", "uid_test")),
        ("RESTARTJOB USER_JOB NAME='Customer.userJob1'", RestartJob("USER_JOB", "Customer.userJob1")),
        ("RESTARTJOB PROCESS NAME='Customer.userJob1' UID='uid3'", RestartJob("PROCESS", "Customer.userJob1", "uid3")),
        ("restartjob user_job name='Deploy.version' running", RestartJob("USER_JOB", "Deploy.version", running=True)),
        ("RESTARTJOB USER_JOB RUNNING", RestartJob("USER_JOB", None, running=True)),
        ("RESUMEJOB USER_JOB NAME='Customer.userJob3' UID='uid3'", ResumeJob("USER_JOB", "Customer.userJob3", "uid3")),
        (
            "UPDATEJOB USER_JOB NAME='Customer.userJob1' UID='uid_test'\n"
            "[AFFINITY='DC1'] [ARGS='{}'] [EXEC_INTERVAL='00:05:00']\n[RESET_END_TIME=true]".replace("[", "").replace("]", ""),
            UpdateJob("USER_JOB", "Customer.userJob1", "uid_test", "DC1", "{}", "00:05:00", True),
        ),
        (
            "updatejob user_job name='X' exec_interval='' reset_end_time=true",
            UpdateJob("USER_JOB", "X", exec_interval="", reset_end_time=True),
        ),
        ("updatejob user_job name='X' reset_end_time=FALSE", UpdateJob("USER_JOB", "X", reset_end_time=False)),
        ("updatejob user_job name='X' reset_end_time='True'", UpdateJob("USER_JOB", "X", reset_end_time=True)),
        ("updatejob user_job name='X' affinity=''", UpdateJob("USER_JOB", "X", affinity="")),
        ("JOBSTATUS", JobStatus()),
        ("jobstatus 3 days ago", JobStatus(days_ago=3)),
        ("JOBSTATUS 0 DAYS AGO", JobStatus(days_ago=0)),
        ("jobstatus 1 day ago", JobStatus(days_ago=1)),  # the course's singular
        ("jobstatus user_job 30 days ago", JobStatus(type="USER_JOB", days_ago=30)),
        ("JOBSTATUS USER_JOB 'X' 1 DAY AGO DETAILS", JobStatus(type="USER_JOB", name="X", days_ago=1, details=True)),
        ("JOBSTATUS 2 Day AGO DETAILS", JobStatus(days_ago=2, details=True)),
        # The course's "set EXEC_INTERVAL=\"\"" (docs/explanation/design-choices.md): "" is the empty string.
        (
            "updatejob user_job name='T.tick' uid='cr' EXEC_INTERVAL=\"\"",
            UpdateJob("USER_JOB", "T.tick", "cr", exec_interval=""),
        ),
        ('updatejob user_job name=\'X\' affinity=""', UpdateJob("USER_JOB", "X", affinity="")),
        ("JOBSTATUS USER_JOB", JobStatus(type="USER_JOB")),
        ("JOBSTATUS user_job 'Customer.userJob1'", JobStatus(type="USER_JOB", name="Customer.userJob1")),
        (
            "JOBSTATUS USER_JOB 'Customer.userJob1' WITH UID='uid_test'",
            JobStatus(type="USER_JOB", name="Customer.userJob1", uid="uid_test"),
        ),
    ],
)
def test_seed_commands(text, command):
    assert one(text) == command


@pytest.mark.parametrize("text, command", [
    ("jobstatus by 'alice'", JobStatus(owner="alice")),
    ("JOBSTATUS REQUESTOR 'payments' BY 'alice' DETAILS", JobStatus(owner="alice", requestor="payments", details=True)),
    ("jobstatus user_job 'X' 2 days ago requestor ''", JobStatus(type="USER_JOB", name="X", days_ago=2, requestor="")),
    ("jobstatus 1 day ago by 'root'", JobStatus(days_ago=1, owner="root")),
    ("startjob user_job name='X' requestor='payments' priority=2",
     StartJob("USER_JOB", "X", requestor="payments", priority=2)),
    ("updatejob user_job name='X' REQUESTOR = ''", UpdateJob("USER_JOB", "X", requestor="")),
])
def test_owner_and_requestor_forms(text, command):
    """DolphinDB's userID (BY) and IPF's jobRequestor (REQUESTOR)."""
    assert one(text) == command


@pytest.mark.parametrize("text, kind, column, says", [
    ("jobstatus by 'a' by 'b'", ValidationError, 18, "BY is given twice"),
    ("jobstatus by ''", ValidationError, 14, "BY must not be empty"),
    ("jobstatus requestor='x'", CommandSyntaxError, 20, "expected a quoted string"),
    ("startjob user_job name='X' requestor='a\tb'", ValidationError, 38, "REQUESTOR must not contain control characters"),
])
def test_owner_and_requestor_refusals(text, kind, column, says):
    exc = fails(text, kind)
    assert exc.column == column and says in str(exc), str(exc)


def test_statement_keeps_source_and_line():
    (stmt,) = parse_script("  -- a comment\n  ps all ;  ")
    assert stmt == Statement(Ps(all=True), "ps all", 2)


# -- spelling freedom ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "STARTJOB USER_JOB NAME='n' UID='u'",
        "startjob user_job name='n' uid='u'",
        "StartJob User_Job Name='n' Uid='u'",
        "startjob user_job uid='u' name='n'",
        "startjob\tuser_job\n  name = 'n'\n  uid\n=\n'u'\n",
        "startjob /* type: */ user_job -- the type\n name='n' uid='u'",
    ],
)
def test_case_order_and_layout_do_not_matter(text):
    assert one(text) == StartJob("USER_JOB", "n", uid="u")


def test_any_parameter_order():
    a = one("startjob process exec_interval='00:00:10' args='{}' affinity='A' uid='u' name='n'")
    b = one("startjob process name='n' uid='u' affinity='A' args='{}' exec_interval='00:00:10'")
    assert a == b == StartJob("PROCESS", "n", "u", "A", "{}", "00:00:10")


@pytest.mark.parametrize(
    "literal, value",
    [
        ("'it''s'", "it's"),
        (r"'it\'s'", "it's"),
        (r"'say \"hi\"'", r'say \"hi\"'),  # only '' and \' are escapes (docs/reference/statements.md)
        (r"'back\\slash'", r"back\\slash"),
        (r"'keep \n and \u00e9'", r"keep \n and \u00e9"),
        ("''''", "'"),
        ("'a;b -- c /* d */'", "a;b -- c /* d */"),
        ("'ünïcødé ✓ 日本'", "ünïcødé ✓ 日本"),
        ("'x''; DROP TABLE k2_jobs; --'", "x'; DROP TABLE k2_jobs; --"),
        ("'SELECT * FROM t WHERE a = ''b'''", "SELECT * FROM t WHERE a = 'b'"),
    ],
)
def test_strings_are_data(literal, value):
    assert one(f"stopjob user_job name={literal}") == StopJob("USER_JOB", value)


def test_a_string_may_span_lines_where_free_text_is_allowed():
    assert one("set note = 'line1\nline2'") == Set(key="note", value="line1\nline2")  # (not in names: see below)


def test_json_escapes_reach_the_decoder_intact():
    cmd = one(r"""startjob user_job name='n' args='{"a":"x\ny","b":"\u00e9","c":"q\"q","d":"\\"}'""")
    assert cmd.args == r'{"a":"x\ny","b":"\u00e9","c":"q\"q","d":"\\"}'
    assert json.loads(cmd.args) == {"a": "x\ny", "b": "é", "c": 'q"q', "d": "\\"}


def test_args_written_as_a_c_string_literal_are_decoded_only_if_they_are_not_json_as_written():
    # The seed's example, copied from Java source: not JSON as written, JSON once \" is a quote.
    cmd = one(r"""startjob user_job name='n' args='{\"loopsIterationCount\":\"2000\"}'""")
    assert cmd.args == '{"loopsIterationCount":"2000"}'
    cmd = one(r"""startjob user_job name='n' args='{\"p\":\"a\\\\b\"}'""")
    assert json.loads(cmd.args) == {"p": "a\\b"}


def test_args_are_kept_exactly_as_written():
    args = '{ "b" : 1,\n  "a": [1, 2] }'
    assert one(f"startjob user_job name='n' args='{args}'").args == args


def test_multi_statement_script_with_lines():
    script = (
        "-- start two jobs\n"
        "startjob user_job name='a;b' uid='1';\n"
        "\n"
        "  /* then look */ jobstatus;\n"
        "stopjob user_job\n"
        "   name='a;b'\n"
        "   uid='1'; ps all;;\n"
        "set x 1"
    )
    statements = parse_script(script)
    assert [(s.command, s.line) for s in statements] == [
        (StartJob("USER_JOB", "a;b", uid="1"), 2),
        (JobStatus(), 4),
        (StopJob("USER_JOB", "a;b", "1"), 5),
        (Ps(all=True), 7),
        (Set("x", "1"), 8),
    ]
    assert statements[2].text == "stopjob user_job\n   name='a;b'\n   uid='1'"


@pytest.mark.parametrize("text", ["", "   \n ", ";", ";;\n;", "-- nothing\n/* at all */"])
def test_empty_scripts(text):
    assert parse_script(text) == []


def test_words_are_not_reserved_where_they_are_data():
    assert one("kill ps 1") == Kill("ps", 1)
    assert one("set all = startjob") == Set("all", "startjob")
    assert one("set name 'x'") == Set("name", "x")
    assert one("kill 1234 5") == Kill("1234", 5)


def test_set_keeps_key_as_written():
    assert one("SET Sync.Mode=OFF") == Set("Sync.Mode", "OFF")
    assert one("set n -1.5") == Set("n", "-1.5")


# -- validation errors -----------------------------------------------------------------------


def test_unknown_job_type():
    exc = fails("startjob user_job name='a';\nstartjob foo name='x'", ValidationError)
    known = ", ".join(t.value for t in JobType)
    assert_rendered(exc, 2, 10, f"unknown job type 'FOO' (known types: {known})")


@pytest.mark.parametrize("text, column, hint", [
    ("jobstaus;", 1, "(did you mean JOBSTATUS?)"),
    ("strtjob user_job name='x';", 1, "(did you mean STARTJOB?)"),
    ("startjob user_job nme='x';", 19, "(did you mean NAME=?)"),
    ("jobstatus user_job 'x' wiht uid='y';", 24, "(did you mean WITH?)"),
    ("startjob userjob name='x';", 10, "; did you mean USER_JOB?"),
])
def test_a_near_miss_of_a_keyword_parameter_or_type_is_named(text, column, hint):
    """A mistyped word is answered with the one it most likely meant, beside the full list."""
    with pytest.raises(CommandSyntaxError) as info:  # (ValidationError is one too)
        parse_script(text)
    assert_rendered(info.value, 1, column, hint)
    assert "did you mean" not in str(fails("job status;", CommandSyntaxError))  # (nothing close enough)


def test_duplicate_parameter():
    exc = fails("startjob user_job name='x' uid='u' NAME='y'", ValidationError)
    assert_rendered(exc, 1, 36, "NAME is given twice")


@pytest.mark.parametrize(
    "text, message",
    [
        ("startjob user_job uid='u'", "STARTJOB needs NAME='<name>'"),
        ("stopjob process", "STOPJOB needs NAME='<name>'"),
        ("resumejob user_job name='x'", "RESUMEJOB needs UID='<uid>'"),
        ("resumejob user_job uid='x'", "RESUMEJOB needs NAME='<name>'"),
        ("restartjob user_job", "RESTARTJOB needs NAME='<name>'"),  # only RUNNING may go without
        ("restartjob user_job uid='x' running", "RESTARTJOB needs NAME='<name>'"),
    ],
)
def test_missing_parameter(text, message):
    assert_rendered(fails(f"ps;\n  {text}", ValidationError), 2, 3, message)


@pytest.mark.parametrize(
    "text, message, column",
    [
        ("stopjob user_job name='x' args='{}'", "STOPJOB does not take ARGS; it takes NAME, UID", 27),
        ("restartjob user_job affinity='a' name='x'", "RESTARTJOB does not take AFFINITY; it takes NAME, UID", 21),
        ("resumejob user_job name='x' uid='u' exec_interval=''", "RESUMEJOB does not take EXEC_INTERVAL; it takes NAME, UID", 37),
        (
            "startjob user_job name='x' reset_end_time=true",
            "STARTJOB does not take RESET_END_TIME; it takes NAME, UID, AFFINITY, ARGS, EXEC_INTERVAL",
            28,
        ),
    ],
)
def test_parameter_not_taken(text, message, column):
    assert_rendered(fails(text, ValidationError), 1, column, message)


@pytest.mark.parametrize(
    "text, message, column",
    [
        ("stopjob user_job name=''", "NAME must not be empty", 23),
        ("stopjob user_job name='x' uid=''", "UID must not be empty", 31),
        ("startjob user_job name='x' uid='  '", "UID must not be empty or blank", 32),
        ("startjob user_job name='x' uid='u' affinity=' '", "AFFINITY must not be blank", 45),
        ("jobstatus user_job ''", "NAME must not be empty", 20),
        ("jobstatus user_job 'x' with uid=''", "UID must not be empty", 33),
        ("kill '' 1", "KILL needs a node name", 6),
    ],
)
def test_empty_values(text, message, column):
    assert_rendered(fails(text, ValidationError), 1, column, message)


@pytest.mark.parametrize(
    "text, message, column",
    [
        ("stopjob user_job name='\x1eProbe.noop' uid='u'", "NAME must not contain control characters, line breaks, invisible or direction-changing characters or lone surrogates (U+001E at character 1)", 23),
        ("startjob user_job name='n' uid='a\rb'", "UID must not contain control characters, line breaks, invisible or direction-changing characters or lone surrogates (U+000D at character 2)", 32),
        ("jobstatus user_job 'x' with uid='a\u2028'", "UID must not contain control characters, line breaks, invisible or direction-changing characters or lone surrogates (U+2028 at character 2)", 33),
        ("joblog user_job 'a\x1b[2Jb'", "NAME must not contain control characters, line breaks, invisible or direction-changing characters or lone surrogates (U+001B at character 2)", 17),
        ("startjob user_job name='n' affinity='HANDLE\nMSG'", "AFFINITY must not contain control characters, line breaks, invisible or direction-changing characters or lone surrogates (U+000A at character 7)", 37),
        ("startjob user_job name='n' uid='evil\u202egpj.exe'", "UID must not contain control characters, line breaks, invisible or direction-changing characters or lone surrogates (U+202E at character 5)", 32),
        ("startjob user_job name='Probe\u200b.noop' uid='u'", "NAME must not contain control characters, line breaks, invisible or direction-changing characters or lone surrogates (U+200B at character 6)", 24),
        ("startjob user_job name='n' uid='a\ud800'", "UID must not contain control characters, line breaks, invisible or direction-changing characters or lone surrogates (U+D800 at character 2)", 32),
    ],
)
def test_control_characters_in_names_uids_and_affinities_are_refused(text, message, column):
    """They would end up raw in node log lines (a carriage return forges one), tables and file
    names; a direction override or a zero-width character would show a name as another, and a
    lone surrogate cannot be stored (it reached the store as a raw UnicodeEncodeError)."""
    exc = fails(text, ValidationError)
    assert (exc.line, exc.column) == (1, column)
    head, quoted, caret = str(exc).split("\n")
    assert message in head and quoted.isprintable() and caret == "  " + " " * (column - 1) + "^"


def test_names_may_use_any_printable_unicode():
    [statement] = parse_script("startjob user_job name='Probe.café 名' uid='run 😀' affinity='Zürich';")
    assert (statement.command.name, statement.command.uid, statement.command.affinity) == ("Probe.café 名", "run 😀", "Zürich")


def test_args_not_json_points_into_the_string():
    exc = fails("startjob user_job name='n'\n  args='{\"a\": 1 \"b\": 2}'", ValidationError)
    assert_rendered(exc, 2, 17, "ARGS is not valid JSON: Expecting ',' delimiter at char 8")


def test_control_characters_in_the_input_do_not_break_the_message_or_move_the_caret():
    exc = fails("jobstatus\x1b[2J user_job\r 'x' ;", CommandSyntaxError)  # a terminal escape, a carriage return
    rendered = str(exc).split("\n")
    assert len(rendered) == 3 and all(line.isprintable() for line in rendered)
    assert rendered[1] == "  jobstatus\u241b[2J user_job\u240d 'x' ;"
    assert rendered[1][2 + exc.column - 1] == rendered[1][rendered[2].index("^")]  # the caret under the column


def test_args_error_position_counts_escapes():
    exc = fails(r"startjob user_job name='n' args='{\'a\':''x}'", ValidationError)
    assert "ARGS is not valid JSON" in str(exc)
    assert (exc.line, exc.column) == (1, 35)  # the escaped quote that is not a JSON quote


@pytest.mark.parametrize(
    "args, message",
    [
        ("[1, 2]", "ARGS must be a JSON object, got a list"),
        ('"x"', "ARGS must be a JSON object, got a string"),
        ("3", "ARGS must be a JSON object, got a number"),
        ("null", "ARGS must be a JSON object, got null"),
        ("", "ARGS is not valid JSON: Expecting value at char 0"),
        ('{"a": NaN}', "ARGS is not valid JSON: NaN is not allowed"),
        ("[" * 100_000, "ARGS is not valid JSON"),
    ],
)
def test_args_must_be_a_json_object(args, message):
    exc = fails(f"startjob user_job name='n' args='{args}'", ValidationError)
    assert message in str(exc).splitlines()[0]
    assert exc.line == 1


def test_exec_interval_is_validated():
    exc = fails("startjob user_job name='n' exec_interval='99:99:99'", ValidationError)
    assert_rendered(exc, 1, 42, "invalid EXEC_INTERVAL '99:99:99'")
    exc = fails("updatejob user_job name='n' exec_interval='1 2 3'", ValidationError)
    assert "got 3" in str(exc)


def test_exec_interval_is_stored_as_given():
    assert one("startjob user_job name='n' exec_interval=' 0 0 * * * '").exec_interval == " 0 0 * * * "
    assert one("startjob user_job name='n' exec_interval='2030-01-01 10:00:00'").exec_interval == "2030-01-01 10:00:00"


def test_reset_end_time_must_be_a_boolean():
    assert_rendered(
        fails("updatejob user_job name='n' reset_end_time='yes'", ValidationError),
        1, 44, "RESET_END_TIME must be true or false, got 'yes'",
    )


def test_hold_and_releasejob():
    """RJM's set-up before rjmgo (docs/explanation/design-choices.md): HOLD=true on STARTJOB and UPDATEJOB, RELEASEJOB."""
    assert one("startjob user_job name='n' uid='u' hold=true").hold is True
    assert one("startjob user_job name='n' HOLD='false'").hold is False
    assert one("startjob user_job name='n'").hold is None
    assert one("updatejob user_job name='n' uid='u' hold=TRUE").hold is True
    released = one("releasejob user_job name='n' uid='u'")
    assert (type(released).__name__, released.type, released.name, released.uid) == ("ReleaseJob", "USER_JOB", "n", "u")
    assert_rendered(fails("startjob user_job name='n' hold='maybe'", ValidationError),
                    1, 33, "HOLD must be true or false, got 'maybe'")
    assert_rendered(fails("updatejob user_job name='n' hold=false", ValidationError),
                    1, 29, "UPDATEJOB takes HOLD=true only: RELEASEJOB releases a held job (and its held children)")
    assert_rendered(fails("releasejob user_job uid='u'", ValidationError), 1, 1, "RELEASEJOB needs NAME='<name>'")


@pytest.mark.parametrize(
    "text, message, column",
    [
        ("jobstatus -1 days ago", "n DAYS AGO needs a whole number of days, got -1", 11),
        ("jobstatus 1.5 days ago", "n DAYS AGO needs a whole number of days, got 1.5", 11),
        ("jobstatus 99999999 days ago", "99999999 is too large", 11),
        ("kill n -3", "the task of KILL must be a whole number, got -3", 8),
        ("kill n 9223372036854775808", "9223372036854775808 is too large (at most 9223372036854775807)", 8),
        ("kill n " + "9" * 5000, "is too large", 8),
    ],
)
def test_numbers(text, message, column):
    assert_rendered(fails(text, ValidationError), 1, column, message)


def test_largest_task_fits():
    assert one("kill n 9223372036854775807").task == 2**63 - 1


# -- syntax errors ---------------------------------------------------------------------------


def test_unexpected_word_lists_what_may_come():
    exc = fails("startjob user_job name='x' FOO='y'")
    assert_rendered(exc, 1, 28, "unexpected 'FOO'", "expected NAME=, UID=, AFFINITY=, ARGS=, EXEC_INTERVAL=, DEPENDS_ON=, PRIORITY=, TZ=, LATE_THRESHOLD=, OVERLAP=, LATE_ACTION=, ON_FAILURE=, REQUESTOR=, CALENDAR=, DELETE_ON_SUCCESS=, HOLD=, PARALLELISM=, IF or ';'")
    assert exc.expected == ("NAME=", "UID=", "AFFINITY=", "ARGS=", "EXEC_INTERVAL=", "DEPENDS_ON=", "PRIORITY=", "TZ=",
                            "LATE_THRESHOLD=", "OVERLAP=", "LATE_ACTION=", "ON_FAILURE=", "REQUESTOR=", "CALENDAR=", "DELETE_ON_SUCCESS=", "HOLD=", "PARALLELISM=", "IF", "';'")


def test_a_statement_keyword_where_a_semicolon_may_come_asks_for_the_missing_semicolon():
    exc = fails("startjob user_job name='A.b' uid='x'\nstopjob user_job name='A.b' uid='x'")
    assert_rendered(exc, 2, 1, "unexpected 'stopjob'", "(a ';' missing at the end of the STARTJOB before it?)")


def test_unknown_statement():
    exc = fails("ps;\n  shutdown now")
    assert_rendered(exc, 2, 3, "unexpected 'shutdown'", "expected STARTJOB, STOPJOB, FINISHJOB, RUNJOB, RELEASEJOB, RESTARTJOB, RESUMEJOB, UPDATEJOB, JOBSTATUS, PS, KILL, SET, NODES, JOBHISTORY, JOBLOG, WAITJOB, DELETEHISTORY, CREATECALENDAR, DROPCALENDAR, CALENDARS or ';'")


def test_missing_job_type():
    exc = fails("startjob name='x'")
    assert_rendered(exc, 1, 10, "unexpected 'name='", "expected a job type")
    assert exc.expected == ("a job type",)


def test_missing_value_at_end():
    exc = fails("startjob user_job name=")
    assert_rendered(exc, 1, 24, "unexpected end of input", "expected a quoted string")


def test_unterminated_string():
    exc = fails("ps;\nstopjob user_job name='abc;\nps")
    assert_rendered(exc, 2, 23, "unterminated string starting here")


def test_unterminated_comment():
    assert_rendered(fails("ps /* no end"), 1, 4, "unterminated comment starting here")


def test_double_quotes_get_a_hint():
    assert_rendered(fails('stopjob user_job name="x"'), 1, 23, "expected a quoted string", "single quotes")


@pytest.mark.parametrize(
    "text, column",
    [
        ('updatejob user_job name=\'X\' exec_interval="00:05:00"', 43),  # only "" is a string
        ('updatejob user_job name=\'X\' exec_interval=""""', 43),  # no "" escapes in a "" string
        ('stopjob user_job name="x""', 23),
    ],
)
def test_double_quoted_text_other_than_the_empty_string_is_refused(text, column):
    err = fails(text)
    assert_rendered(err, 1, column, "expected a quoted string", "single quotes", "\"\" alone is the empty string")


def test_a_set_value_of_two_double_quotes_is_the_empty_string():
    assert one('set sync = ""') == Set("sync", "")


def test_startjob_if_not_exists():
    assert one("startjob user_job name='A' uid='u' priority=3 if not exists") == StartJob(
        "USER_JOB", "A", "u", priority=3, if_not_exists=True)
    assert one("STARTJOB USER_JOB UID='u' NAME='A' IF  NOT\nEXISTS") == StartJob("USER_JOB", "A", "u", if_not_exists=True)


@pytest.mark.parametrize(
    "text, column, needle",
    [
        ("startjob user_job name='A' if not exists", 28, "IF NOT EXISTS needs UID='<uid>'"),
        ("startjob user_job name='A' uid='u' if exists", 39, "expected NOT"),
        ("startjob user_job name='A' uid='u' if not exists priority=3", 50, "expected ';'"),
        ("stopjob user_job name='A' uid='u' if not exists", 35, "unexpected 'if'"),
    ],
)
def test_if_not_exists_is_strict(text, column, needle):
    err = fails(text, ValidationError) if "needs" in needle else fails(text)
    assert_rendered(err, 1, column, needle)


def test_jobhistory_recent():
    assert one("jobhistory recent 20") == JobHistory(recent=20)
    assert one("JOBHISTORY RECENT 10000") == JobHistory(recent=10000)


@pytest.mark.parametrize(
    "text, column, needle, kind",
    [
        ("jobhistory recent 0", 19, "RECENT needs at least 1 run", ValidationError),
        ("jobhistory recent 10001", 19, "10001 is too large (at most 10000)", ValidationError),
        ("jobhistory recent 2.5", 19, "RECENT needs a whole number of runs, got 2.5", ValidationError),
        ("jobhistory recent", 18, "expected a number", CommandSyntaxError),
        ("jobhistory recent 5 limit 2", 21, "expected ';'", CommandSyntaxError),
    ],
)
def test_jobhistory_recent_is_strict(text, column, needle, kind):
    assert_rendered(fails(text, kind), 1, column, needle)


def test_one_job_by_uid_takes_no_days():
    assert_rendered(fails("jobstatus user_job 'X' with uid='u' 1 day ago"), 1, 37, "unexpected '1'", "expected BY, REQUESTOR, WHERE, DETAILS or ';'")


def test_day_is_a_keyword_only_as_a_whole_word():
    assert_rendered(fails("jobstatus 1 dayz ago"), 1, 13, "unexpected 'dayz'", "expected DAYS")


def test_lone_quote_inside_string_gets_a_hint():
    assert_rendered(fails("stopjob user_job name='it's'"), 1, 27, "unexpected 's'", "''")


def test_two_statements_without_separator():
    assert_rendered(fails("ps all ps"), 1, 8, "unexpected 'ps'", "expected ';'")


def test_jobstatus_forms_are_strict():
    assert_rendered(fails("jobstatus 3 days"), 1, 17, "unexpected end of input", "expected AGO")
    assert_rendered(fails("jobstatus user_job 'x' uid='y'"), 1, 24, "expected BY, REQUESTOR, WHERE, DETAILS, WITH, a number or ';'")
    assert_rendered(fails("jobstatus 5days ago"), 1, 11, "expected BY, REQUESTOR, WHERE, DETAILS, a number, a job type or ';'")


def test_long_tokens_are_shortened_in_messages():
    exc = fails("ps " + "x" * 500)
    assert len(str(exc).splitlines()[0]) < 150


def test_parse_one_needs_exactly_one_statement():
    with pytest.raises(ValidationError, match="expected a command, got none"):
        parse_one(" -- nothing ")
    with pytest.raises(ValidationError) as info:
        parse_one("ps;\n  ps all")
    assert_rendered(info.value, 2, 3, "expected one command, got 2")


# -- grammar loading -------------------------------------------------------------------------


def test_grammar_file_is_the_repository_one():
    assert parser_module.grammar_path() == ROOT / "grammar" / "fabricjobs.lark"


def test_cache_file_is_per_user_and_keyed_on_the_grammar(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    a = parser_module._cache_file("start: A\nA: \"a\"\n")
    b = parser_module._cache_file("start: A\nA: \"b\"\n")
    assert a != b
    assert Path(a).parent == tmp_path / "fabricjobs"


def test_unusable_cache_dir_falls_back_to_a_private_temp_dir(tmp_path, monkeypatch):
    (tmp_path / "a-file").write_text("")
    (tmp_path / "tmp").mkdir()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "a-file"))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    directory = parser_module._cache_dir()
    assert directory == tmp_path / "tmp" / f"fabricjobs-{os.getuid()}"
    assert directory.stat().st_mode & 0o077 == 0


def test_cold_process_writes_the_cache_then_uses_it(tmp_path):
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}
    code = (
        "import lark, logging; logging.getLogger('lark').setLevel(logging.DEBUG)\n"
        "from fabricjobs.commands import parse_script; print(parse_script('ps all;')[0].command)"
    )
    runs = [subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True) for _ in "12"]
    assert [r.stdout.strip() for r in runs] == ["Ps(all=True)"] * 2
    assert "Saving grammar to cache" in runs[0].stderr
    assert "Loading grammar from cache" in runs[1].stderr and "Saving" not in runs[1].stderr
    assert len(list((tmp_path / "fabricjobs").glob("grammar-*.lark-cache"))) == 1


# -- nothing but our errors, whatever the input ----------------------------------------------

VALID = [
    SEED_JSON_ARGS,
    SEED_PROCESS,
    "kill 'dev-fabric-deployment-848b7d9f89-ddm97' 52625; ps; ps all",
    "SET sync off; SET auto_mdb_scope = true; SET k2_ws.ALPINIST = 10;",
    "updatejob user_job name='X' uid='u' affinity='a' args='{\"k\": [1, {}]}' exec_interval='*/5 * * * *' reset_end_time=true",
    "jobstatus; jobstatus 2 days ago; jobstatus user_job 'n' with uid='u' -- c\n/* d */",
    "resumejob process name='it''s' uid='\\'q\\''; restartjob user_job name='x'",
    "startjob user_job name='n' exec_interval='2030-01-01 10:00:00'",
    "deletehistory user_job 'Customer.userJob1' with uid='u1'; DELETEHISTORY process 'it''s' WITH UID = 'x'",
]
SPICY = "';=-/*\\\"\n {}[]:,0123456789.aAzZ_é\x00\u2028"


@st.composite
def mutated(draw) -> str:
    text = draw(st.sampled_from(VALID))
    for _ in range(draw(st.integers(0, 4))):
        op = draw(st.sampled_from(["insert", "delete", "replace", "truncate"]))
        i = draw(st.integers(0, len(text)))
        ch = draw(st.sampled_from(SPICY) | st.characters())
        if op == "insert":
            text = text[:i] + ch + text[i:]
        elif op == "delete":
            text = text[:i] + text[i + 1 :]
        elif op == "replace":
            text = text[:i] + ch + text[i + 1 :]
        else:
            text = text[:i]
    return text


@settings(max_examples=400, deadline=timedelta(seconds=30), suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(mutated(), st.text(), st.text(alphabet=SPICY)))
def test_any_text_gives_statements_or_our_error(text):
    try:
        statements = parse_script(text)
    except CommandSyntaxError as exc:
        head = str(exc).split("\n")[0]
        assert head and len(head.splitlines()) == 1
        if exc.line is not None:
            assert exc.line >= 1 and exc.column >= 1
    else:
        assert all(isinstance(s, Statement) for s in statements)
    expected_at(text)
    spans = lex(text)
    assert all(0 <= s < e <= len(text) for s, e, _ in spans)


def test_deletehistory_names_one_job_as_jobhistory_does_and_its_uid_is_not_optional():
    from fabricjobs.commands import DeleteHistory
    assert parse_one("DeleteHistory user_job 'Customer.userJob1' WITH UID='u1'") == DeleteHistory("USER_JOB", "Customer.userJob1", "u1")
    with pytest.raises(CommandSyntaxError) as exc:
        parse_one("deletehistory user_job 'Customer.userJob1'")
    assert "WITH" in exc.value.expected
    with pytest.raises(CommandSyntaxError, match="UID must not be empty"):
        parse_one("deletehistory user_job 'a' with uid=''")


def test_parallelism_is_a_whole_number_from_2_to_64():
    """STARTJOB ... PARALLELISM=n (DolphinDB's tasks of a job): a number or a quoted one;
    STARTJOB's alone (UPDATEJOB cannot change a job's tasks)."""
    assert one("startjob user_job name='x' parallelism=4").parallelism == 4
    assert one("startjob user_job name='x' parallelism='64'").parallelism == 64
    assert one("startjob user_job name='x'").parallelism is None
    for bad in ("1", "65", "'0'", "'x'", "'2.5'"):
        exc = fails(f"startjob user_job name='x' parallelism={bad}", ValidationError)
        assert "PARALLELISM must be a whole number from 2 to 64" in str(exc), str(exc)
    assert "UPDATEJOB does not take PARALLELISM" in str(fails("updatejob user_job name='x' parallelism=4", ValidationError))
