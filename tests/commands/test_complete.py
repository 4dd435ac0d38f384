"""What the shell may offer at the cursor, and how it colours a line: both from the grammar."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fabricjobs.commands import Expectation, expected_at, lex

STATEMENTS = ("STARTJOB", "STOPJOB", "FINISHJOB", "RUNJOB", "RELEASEJOB", "RESTARTJOB", "RESUMEJOB", "UPDATEJOB", "JOBSTATUS", "PS", "KILL", "SET", "NODES",
              "JOBHISTORY", "JOBLOG", "WAITJOB", "DELETEHISTORY", "CREATECALENDAR", "DROPCALENDAR", "CALENDARS")
START_PARAMS = ("NAME", "UID", "AFFINITY", "ARGS", "EXEC_INTERVAL", "DEPENDS_ON", "PRIORITY", "TZ", "LATE_THRESHOLD",
                "OVERLAP", "LATE_ACTION", "ON_FAILURE", "REQUESTOR", "CALENDAR", "DELETE_ON_SUCCESS", "HOLD", "PARALLELISM")


# -- expected_at -----------------------------------------------------------------------------


def test_empty_text_expects_a_statement():
    assert expected_at("") == Expectation(keywords=STATEMENTS)
    assert expected_at("  -- hi\n").keywords == STATEMENTS


def test_after_statement_keyword_a_job_type():
    e = expected_at("startjob ")
    assert e.job_type and e.statement == "STARTJOB" and e.params == () and e.keywords == ()


def test_after_job_type_the_parameters():
    e = expected_at("startjob user_job ")
    assert e.params == START_PARAMS and not e.job_type
    assert set(expected_at("updatejob user_job ").params) == {*START_PARAMS[:-1], "RESET_END_TIME"}  # PARALLELISM: STARTJOB's
    assert expected_at("stopjob process ").params == ("NAME", "UID")


def test_given_parameters_are_not_offered_again():
    assert expected_at("startjob user_job name='x' ").params == START_PARAMS[1:]
    assert expected_at("stopjob user_job uid='u' NAME = 'x' ").params == ()


def test_inside_a_string():
    e = expected_at("startjob user_job name='Cust")
    assert (e.string_for, e.in_string, e.prefix, e.statement) == ("NAME", True, "Cust", "STARTJOB")
    assert expected_at("startjob user_job name='it''s a").prefix == "it's a"


def test_right_before_a_string():
    e = expected_at("startjob user_job uid = ")
    assert (e.string_for, e.in_string, e.prefix) == ("UID", False, "")


def test_partial_word_is_the_prefix():
    e = expected_at("startjob user_job na")
    assert e.prefix == "na" and "NAME" in e.params
    e = expected_at("startjob us")
    assert e.prefix == "us" and e.job_type


def test_jobstatus_positions():
    e = expected_at("jobstatus ")
    assert e.job_type and e.number
    e = expected_at("jobstatus user_job ")
    assert e.string_for == "JOB_NAME" and e.keywords == ("BY", "REQUESTOR", "WHERE", "DETAILS")
    assert expected_at("jobstatus user_job 'Cu").string_for == "JOB_NAME"
    assert expected_at("jobstatus user_job 'x' ").keywords == ("BY", "REQUESTOR", "WHERE", "DETAILS", "WITH")
    assert expected_at("jobstatus where ").keywords == ("STATUS",)
    assert set(expected_at("jobstatus where status ").keywords) == {"IN"}
    assert expected_at("jobstatus where status = ").string_for == "STATUS"
    assert expected_at("jobstatus where status in ('FAILED', ").string_for == "STATUS"
    assert expected_at("jobstatus by ").string_for is None  # a user's name, not a job's
    assert expected_at("jobstatus user_job by 'alice' requestor ").string_for is None
    assert expected_at("jobstatus user_job 'x' with ").params == ("UID",)
    assert expected_at("jobstatus 3 ").keywords == ("DAYS",)
    assert expected_at("jobstatus 3 days ").keywords == ("AGO",)


def test_history_log_and_wait_positions():
    assert set(expected_at("jobhistory user_job 'x' ").keywords) == {"WITH", "LIMIT"}
    assert expected_at("joblog user_job 'x' with uid='u' ").keywords == ("FOLLOW", "RUN")
    assert expected_at("joblog user_job 'x' follow ").keywords == ("TIMEOUT",)
    assert set(expected_at("waitjob user_job 'x' with uid='u' ").keywords) == {"RUN", "TIMEOUT"}
    assert expected_at("waitjob user_job 'x' with uid='u' run 2 ").keywords == ("TIMEOUT",)
    assert "WAIT" in expected_at("stopjob user_job name='x' ").keywords
    assert expected_at("nodes ").keywords == ("DETAILS",)
    assert expected_at("deletehistory user_job 'x' ").keywords == ("WITH",)
    assert expected_at("deletehistory user_job 'x' with ").params == ("UID",)


def test_ps_all_and_kill():
    assert expected_at("ps ").keywords == ("ALL",)
    e = expected_at("kill ")
    assert e.string_for == "NODE" and e.statement == "KILL"
    assert expected_at("kill 'node-1' ").number


def test_reset_end_time_values():
    e = expected_at("updatejob user_job name='x' reset_end_time=")
    assert e.keywords == ("TRUE", "FALSE") and e.string_for == "RESET_END_TIME"


def test_second_statement():
    e = expected_at("ps; sto")
    assert e.prefix == "sto" and "STOPJOB" in e.keywords and e.statement is None
    e = expected_at("startjob user_job name='a;b';\nstopjob user_job ")
    assert e.statement == "STOPJOB" and e.params == ("NAME", "UID")


def test_an_earlier_broken_statement_does_not_matter():
    assert expected_at("startjob foo bar baz; ps ").keywords == ("ALL",)


def test_semicolon_inside_an_open_string_is_data():
    e = expected_at("kill 'abc; sto")
    assert (e.string_for, e.in_string, e.prefix) == ("NODE", True, "abc; sto")


def test_nothing_inside_a_comment_or_after_an_error():
    assert expected_at("ps -- what") == Expectation()
    assert expected_at("ps /* what") == Expectation()
    assert expected_at("ps /* x */ ").keywords == ("ALL",)
    e = expected_at("startjob user_job bogus ")
    assert e.statement == "STARTJOB" and e.params == () and not e.job_type


def test_long_input_stays_fast():
    expected_at("a" * 200_000 + " b")  # was quadratic with a regex search for the last word
    lex("x " * 20_000 + "'" + "y" * 100_000)


# -- lex -------------------------------------------------------------------------------------


def spans(text: str) -> list[tuple[str, str]]:
    return [(text[s:e], cat) for s, e, cat in lex(text)]


def test_lex_categories():
    text = "startjob user_job name='x;y' /* c */ args='{}' -- hi\n; ps all; kill node-1 5; set a = 10"
    assert spans(text) == [
        ("startjob", "keyword"),
        ("user_job", "type"),
        ("name=", "param"),
        ("'x;y'", "string"),
        ("/* c */", "comment"),
        ("args=", "param"),
        ("'{}'", "string"),
        ("-- hi", "comment"),
        (";", "punct"),
        ("ps", "keyword"),
        ("all", "keyword"),
        (";", "punct"),
        ("kill", "keyword"),
        ("node-1", "word"),
        ("5", "number"),
        (";", "punct"),
        ("set", "keyword"),
        ("a", "word"),
        ("=", "punct"),
        ("10", "number"),
    ]


def test_lex_unterminated_string_is_an_error_to_the_end():
    assert spans("ps; stopjob user_job name='abc; ps") == [
        ("ps", "keyword"),
        (";", "punct"),
        ("stopjob", "keyword"),
        ("user_job", "type"),
        ("name=", "param"),
        ("'abc; ps", "error"),
    ]


def test_lex_goes_on_after_a_syntax_error():
    assert spans("foo bar 'x' ; ps all") == [
        ("foo", "word"),
        ("bar", "word"),
        ("'x'", "string"),
        (";", "punct"),
        ("ps", "keyword"),
        ("all", "keyword"),
    ]


def test_lex_unterminated_comment():
    assert spans("ps /* x") == [("ps", "keyword"), ("/* x", "error")]


@pytest.mark.parametrize("text", ["", "   ", "\n-- only a comment", "'", "/*", ";;;"])
def test_lex_trivial_inputs(text):
    lex(text)


@settings(max_examples=300, deadline=timedelta(seconds=30))
@given(st.text(alphabet=st.sampled_from("';=-/*\\\"\n \t{}0123456789.aZ_é") | st.characters(), max_size=80))
def test_lex_covers_every_visible_character_once(text):
    result = lex(text)
    covered = [False] * len(text)
    last_end = 0
    for start, end, category in result:
        assert last_end <= start < end <= len(text)
        assert category in {"keyword", "param", "type", "string", "number", "punct", "comment", "word", "error"}
        covered[start:end] = [True] * (end - start)
        last_end = end
    assert all(c or ch.isspace() for c, ch in zip(covered, text))
    assert isinstance(expected_at(text), Expectation)
