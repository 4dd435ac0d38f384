"""The statement table (fabricjobs/commands/table.py) is the one list of statements: it must
agree with the grammar, the Command union and the service, so that a statement added in one
place only fails here rather than at a user's prompt."""

from __future__ import annotations

import re
import typing
from pathlib import Path

from fabricjobs.commands import parse_one, statements, table
from fabricjobs.service import CommandService

GRAMMAR = Path(__file__).resolve().parents[2] / "grammar" / "fabricjobs.lark"


def _grammar_statements() -> set[str]:
    text = GRAMMAR.read_text()
    body = re.search(r"^_statement:(.*?)(?=^\S|\Z)", text, re.M | re.S).group(1)
    return {w for w in re.findall(r"[a-z_]+", re.sub(r"//.*", "", body))}


def test_every_statement_of_the_grammar_is_in_the_table_and_no_other():
    assert {s.rule for s in table.STATEMENTS} == _grammar_statements()


def test_the_table_covers_the_command_union_and_the_service_carries_out_each():
    assert {s.command for s in table.STATEMENTS} == set(typing.get_args(statements.Command))
    for s in table.STATEMENTS:
        assert callable(getattr(CommandService, s.handler, None)), f"CommandService has no {s.handler}"


def test_each_usage_line_starts_with_its_keyword_and_parses_in_its_simplest_form():
    simplest = {"STARTJOB": "startjob user_job name='a';", "STOPJOB": "stopjob user_job name='a';", "FINISHJOB": "finishjob user_job name='a';", "RUNJOB": "runjob user_job name='a';", "RELEASEJOB": "releasejob user_job name='a';",
                "RESTARTJOB": "restartjob user_job name='a';", "RESUMEJOB": "resumejob user_job name='a' uid='u';",
                "UPDATEJOB": "updatejob user_job name='a' priority=3;", "JOBSTATUS": "jobstatus;",
                "JOBHISTORY": "jobhistory user_job 'a';", "JOBLOG": "joblog user_job 'a';",
                "WAITJOB": "waitjob user_job 'a' with uid='u';",
                "DELETEHISTORY": "deletehistory user_job 'a' with uid='u';",
                "CREATECALENDAR": "createcalendar 'c' exclude '2026-12-25';", "DROPCALENDAR": "dropcalendar 'c';",
                "CALENDARS": "calendars;", "PS": "ps;", "KILL": "kill 'n1' 3;",
                "NODES": "nodes;", "SET": "set k = v;"}
    assert set(simplest) == {s.keyword for s in table.STATEMENTS}
    for s in table.STATEMENTS:
        assert s.usage[0].startswith(s.keyword + " ") or s.usage[0] == s.keyword
        assert isinstance(parse_one(simplest[s.keyword]), s.command)


def test_every_parameter_of_the_grammar_is_in_the_parameter_table_and_no_other():
    text = GRAMMAR.read_text()
    assert {p.name for p in table.PARAMETERS} == set(re.findall(r"^P_([A-Z_]+)\.\d+:", text, re.M))


def test_every_statement_and_parameter_says_what_it_does_and_where_the_docs_explain_it():
    docs = GRAMMAR.parent.parent / "docs"
    for item in (*table.STATEMENTS, *table.PARAMETERS):
        assert item.summary and item.doc, item
        assert (docs / item.doc.partition("#")[0]).is_file(), f"{item} names a missing page"
