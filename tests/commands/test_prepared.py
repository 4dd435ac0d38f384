"""Prepared statements (parser._parse_prepared) against the plain Lark path (parser._parse_lark).

The prepared path is only an accelerator: on every script it must give exactly what the plain
path gives, the same statements or the same error (type, message, line, column, expected).
The generated scripts repeat statement shapes with other strings in them, so that both the
first parse of a shape and its reuse are compared. The grammar checks below pin down what the
prepared path relies on; if one fails after a grammar change, parser._parse_prepared needs a
new look (or the shape rules there need to change), not just the test.
"""

from __future__ import annotations

import json

import re
from datetime import timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from re import _constants as sre_constants
from re import _parser as sre_parser

from fabricjobs.commands import StartJob, Statement, parse_one, parse_script
from fabricjobs.commands import parser as P
from fabricjobs.errors import CommandSyntaxError, ValidationError


def outcome(parse, text: str):
    try:
        return ("ok", parse(text))
    except CommandSyntaxError as exc:
        return ("error", type(exc), str(exc), exc.reason, exc.line, exc.column, exc.expected)
    except Exception as exc:  # noqa: BLE001 - whatever the plain path does, the fast one must too
        return ("raised", type(exc), str(exc))


def assert_same(text: str) -> tuple:
    plain = outcome(P._parse_lark, text)
    assert outcome(P._parse, text) == plain, text  # first sight of its shapes (or not)
    assert outcome(P._parse, text) == plain, text  # shapes now prepared
    return plain


# -- the grammar properties the prepared path relies on -------------------------------------

_CATEGORIES = {
    sre_constants.CATEGORY_DIGIT: r"\d",
    sre_constants.CATEGORY_NOT_DIGIT: r"\D",
    sre_constants.CATEGORY_SPACE: r"\s",
    sre_constants.CATEGORY_NOT_SPACE: r"\S",
    sre_constants.CATEGORY_WORD: r"\w",
    sre_constants.CATEGORY_NOT_WORD: r"\W",
}


def _in_set(ch: str, items) -> bool:
    hit, negate = False, False
    for op, av in items:
        if op is sre_constants.NEGATE:
            negate = True
        elif op is sre_constants.LITERAL:
            hit |= av == ord(ch)
        elif op is sre_constants.RANGE:
            hit |= av[0] <= ord(ch) <= av[1]
        elif op is sre_constants.CATEGORY:
            hit |= bool(re.match(_CATEGORIES[av], ch))
        else:  # anything unknown: say it may match (the check then fails loudly)
            hit = True
    return hit != negate


def can_consume(ch: str, pattern) -> bool:
    """Whether any part of a regex, lookarounds included, can consume ``ch``."""
    for op, av in pattern:
        if op is sre_constants.LITERAL:
            found = av == ord(ch)
        elif op is sre_constants.NOT_LITERAL:
            found = av != ord(ch)
        elif op is sre_constants.IN:
            found = _in_set(ch, av)
        elif op is sre_constants.BRANCH:
            found = any(can_consume(ch, sub) for sub in av[1])
        elif op is sre_constants.SUBPATTERN:
            found = can_consume(ch, av[3])
        elif op in (sre_constants.MAX_REPEAT, sre_constants.MIN_REPEAT, sre_constants.POSSESSIVE_REPEAT):
            found = can_consume(ch, av[2])
        elif op in (sre_constants.ASSERT, sre_constants.ASSERT_NOT):
            found = can_consume(ch, av[1])
        elif op is sre_constants.ATOMIC_GROUP:
            found = can_consume(ch, av)
        elif op is sre_constants.AT:
            found = False
        else:  # ANY, group references ...: may match anything
            found = True
        if found:
            return True
    return False


def _terminals():
    return {t.name: sre_parser.parse(t.pattern.to_regexp()) for t in P.get_parser().terminals}


def test_only_strings_and_comments_can_hold_a_quote():
    """So no terminal looks past the quote that opens a string: a shape lexes the same
    whatever its strings hold."""
    assert {name for name, pattern in _terminals().items() if can_consume("'", pattern)} == {"STRING", "COMMENT"}


def test_only_strings_comments_and_set_words_can_hold_a_double_quote():
    """The cache sends a script with a double quote outside its strings the plain way, so
    only a SET word (always a statement's last token) and comments matter here."""
    holders = {name for name, pattern in _terminals().items() if can_consume('"', pattern)}
    assert holders == {"STRING", "COMMENT", "SET_WORD"}


def test_only_semicolon_strings_and_comments_can_hold_a_semicolon():
    """So every ';' outside strings and comments separates statements."""
    holders = {name for name, pattern in _terminals().items() if can_consume(";", pattern)}
    assert holders == {"SEMI", "STRING", "COMMENT"}


def _starts(pattern: str, openings: tuple[str, ...]) -> set[str]:
    """Which of ``openings`` a terminal matches text beginning with (probed with some tails)."""
    tails = ["", "x", "1", "a--b", "*/", " ", "\n", "'", ";", "=", ".", "-", "/*", "--"]
    return {o for o in openings for tail in tails if re.match(pattern, o + tail)}


def test_only_comments_start_with_a_comment_opening_and_only_white_space_with_white_space():
    """So ignored text is lexed the same wherever a statement starts, and a prepared shape's
    comments are where the lexer finds them."""
    parser = P.get_parser()
    assert set(parser.lexer_conf.ignore) == {"WS", "COMMENT"}
    openings = ("--", "/*", " ", "\t", "\n", "\u00a0")
    found = {t.name: _starts(t.pattern.to_regexp(), openings) for t in parser.terminals}
    assert {name for name, starts in found.items() if starts & {"--", "/*"}} == {"COMMENT"}
    assert found["COMMENT"] == {"--", "/*"}
    assert {name for name, starts in found.items() if starts & {" ", "\t", "\n", "\u00a0"}} == {"WS"}
    assert not can_consume("'", _terminals()["WS"]) and not can_consume(";", _terminals()["WS"])


def test_the_lexing_patterns_come_from_the_grammar():
    strings, gaps = P._lexing_patterns()
    assert strings.groups == 1
    assert strings.pattern == f"({P.get_parser().get_terminal('STRING').pattern.to_regexp()})"
    assert gaps.fullmatch(" -- a\n /* b\n */\t")
    assert gaps.match("/* a */ b */").end() == len("/* a */ ")  # the first '*/' closes, as in the lexer
    assert gaps.match(" -- a;b").end() == len(" -- a;b")


@pytest.mark.parametrize("before", ["", "ps;", "startjob user_job name='a';", "kill n 1;", "set a b;", "jobstatus;\n ;"])
def test_a_statement_starts_in_the_same_lexer_context_after_a_semicolon(before):
    """The first statement of a shape is parsed alone: the parser must accept the same
    terminals at the start of a script as after any ';'."""
    parser = P.get_parser()
    first = parser.parse_interactive("")
    after = parser.parse_interactive(before)
    after.exhaust_lexer()
    assert after.accepts() == first.accepts()


# -- examples --------------------------------------------------------------------------------


def bulk(n: int, template: str = "startjob user_job name='Bench.noop' uid='t{i:06d}';\n") -> str:
    return "".join(template.format(i=i) for i in range(n))


def test_bulk_script_goes_through_prepared_statements():
    text = bulk(300)
    parsed = P._parse_prepared(text)
    assert parsed is not None
    assert parsed == P._parse_lark(text)
    source = "startjob user_job name='Bench.noop' uid='t000007'"
    assert parsed[7] == (Statement(StartJob("USER_JOB", "Bench.noop", uid="t000007"), source, 8), text.index(source))
    assert "startjob user_job name=' uid='" in P._prepared


@pytest.mark.parametrize(
    "text",
    [
        "-- header\n" + bulk(5),
        bulk(3) + "ps -- c;ps\n",
        bulk(3) + "ps -- c\n;ps\n",
        bulk(3) + "ps; -- c; ps",
        bulk(3) + "ps; -- c\n; ps; -- end",
        "ps; /* a */; ps /* b */ all -- t\n; /* c */",
        "/* a ; b */ ps",
        "ps -- it's\n; ps",
        "ps -- 'a'\n; ps",
        "ps -- 'a\n;' ; ps",
        "startjob user_job /* 'no' */ name='x' -- 'nor' this\n uid='y' /* ; */;",
        "kill a--b 1; set a b--c; set a b/*c; set x = a/*b */; kill a/*b 1",
        bulk(3) + "ps /* ; */;",
        bulk(3) + "startjob user_job name='x' uid='it''s';",
        bulk(3) + "startjob user_job name='x' uid='unterminated;",
        bulk(3) + "startjob user_job name='x' uid='';",
        bulk(3) + "startjob user_job name='x' uid='y' args='{\"a\": }';",
        bulk(3) + "startjob user_job name='x' uid='y' args='[1]';",
        bulk(3) + "startjob user_job name='x' uid='y' exec_interval='25:61:00';",
        bulk(3) + "startjob user_job name='x' name='y';",
        bulk(3) + "startjob bogus_type name='x';",
        bulk(3) + "startjob user_job name='x' uid='y' 'z';",
        bulk(3) + "startjob user_job name='x'\n uid='y\nz' affinity='a';\n\n  ps all;",
        bulk(3) + "startjob user_job name='x' uid='y' startjob",
        bulk(3) + "stopjob user_job name='x' wait timeout 1.5;",
        "startjob user_job name='a'\u2028uid='b';\x1cps;\u00a0;;  ",
        "kill 'node''s' 12; kill node-1.a 3; set a = 'b'; set a.b c=d; set x '';",
        "jobstatus user_job '';jobstatus user_job 'a' with uid='';joblog user_job 'a' with uid='b' run 2",
        bulk(3) + "updatejob user_job name='x' uid=\"\" exec_interval=\"\";",
        bulk(3) + "startjob user_job name='x' uid='y' if not exists; startjob user_job name='x' uid='z' if not exists;",
        bulk(3) + "startjob user_job name='x' if not exists;",
        bulk(3) + "updatejob user_job name=\"\" exec_interval='';updatejob user_job name='a' exec_interval=\"\"",
        bulk(3) + "updatejob user_job name='x' exec_interval=\"00:05:00\";",
        bulk(3) + "updatejob user_job name='x' exec_interval=\"\"\"\";",
        bulk(3) + "set a = \"\"; set a = x\"\"; set a = \"\"x; ps -- \"\n;ps /* \" */",
    ],
)
def test_examples_agree(text):
    assert_same(text)


@pytest.mark.parametrize(
    "text",
    [
        "-- a header\n/* and more */\n" + bulk(5) + "-- the end",
        bulk(2) + "startjob user_job -- why\n name='a' /* x */ uid='b' -- ok\n;\n" + bulk(2),
        bulk(2) + "ps; -- c\n; ps",
        "kill a--b 1; set a b--c",
    ],
)
def test_comments_where_they_cannot_swallow_a_semicolon_are_prepared(text):
    assert P._parse_prepared(text) is not None
    assert_same(text)


@pytest.mark.parametrize("text", ["ps -- c; ps", "ps; -- c; ps", "ps; /* c; */ ps", "ps -- 'a'\n; ps"])
def test_comments_that_swallow_a_semicolon_go_the_plain_way(text):
    assert P._parse_prepared(text) is None
    assert_same(text)


def test_error_in_a_bulk_script_points_where_the_plain_parse_does():
    text = bulk(50) + "startjob user_job name='x' uid='y' args='{\"a\": 1,}';\n" + bulk(10)
    with pytest.raises(ValidationError) as info:
        parse_script(text)
    try:  # where json puts it: the "}" after the comma, or (Python 3.13) the comma itself
        json.loads('{"a": 1,}')
    except json.JSONDecodeError as exc:
        at = exc.pos
    line = text.splitlines()[50]
    assert (info.value.line, info.value.column) == (51, line.index("'{") + 2 + at)
    assert outcome(P._parse_lark, text)[2] == str(info.value)
    assert "ARGS is not valid JSON" in str(info.value)


def test_parse_one_counts_prepared_statements():
    with pytest.raises(ValidationError) as info:
        parse_one("startjob user_job name='a';\n  startjob user_job name='b'")
    assert (info.value.line, info.value.column) == (2, 3)
    assert parse_one("  startjob user_job name='a' ; ") == StartJob("USER_JOB", "a")


def test_the_shape_cache_is_bounded():
    for i in range(P._PREPARED_LIMIT + 40):
        parse_script(f"startjob user_job name='x' priority={i % 10} uid='u{i}' affinity='a' tz='{'UTC' if i % 2 else ''}';" * 2)
        parse_script(f"kill 'n' {i}")
    assert len(P._prepared) <= P._PREPARED_LIMIT
    assert "kill ' 0" not in P._prepared  # the oldest went first
    assert f"kill ' {P._PREPARED_LIMIT + 39}" in P._prepared


def test_long_shapes_are_not_kept():
    word = "k" * (P._PREPARED_SHAPE_LIMIT + 1)
    assert parse_script(f"set {word} 'v'; set {word} 'w'")[1].command.value == "w"
    assert f"set {word} '" not in P._prepared


# -- generated scripts -----------------------------------------------------------------------

KEYWORD_CASES = st.sampled_from([str.lower, str.upper, str.title])
SPACE = st.sampled_from([" ", " ", " ", "  ", "\t", "\n", "\r\n", " \n  ", "\u00a0", "\u2028", "\x1c", "\x0b", " /* c */ ", " -- c\n", "--\n"])
GAP = st.one_of(st.just(""), SPACE)

ANY_BODY = st.one_of(
    st.sampled_from(
        ["", "a", "Customer.userJob1", "it''s", "it\\'s", "a;b", "-- not a comment", "/* nor this */", "x\ny",
         "ünïcødé ✓", "\\\\", 'say \\"hi\\"', "''''", " ", "SKIP", "true", "9", "UTC", "Not/AZone", "00:00:00",
         "25:61:00", "bad cron", "nope.a", "[1]", '"s"', '{"a": NaN}', "{", "null", '{"a": 1,}']
    ),
    st.text(alphabet="ab';\\\n -/*{}\":,é", max_size=8).map(lambda s: s.replace("'", "''")),
)
WORDS = st.text(alphabet="abcXYZ019._-;/*'\\\n é✓", min_size=1, max_size=10).map(lambda s: s.replace("'", "''"))
VALID_BODIES = {
    "args": st.sampled_from(["{}", '{"k": 1}', '{\\"k\\":\\"v\\"}', '{"k": [1, {}], "s": "a;b -- c"}', '{"q": "it\'\'s"}']),
    "exec_interval": st.sampled_from(["", "00:00:01", "01:30:00", "*/5 * * * *", "0 0 * * * *", "2030-01-01 10:00:00", "@hourly"]),
    "depends_on": st.sampled_from(["USER_JOB.a.b", "PROCESS.a.b, user_job.c.d", "process.x.y.z"]),
    "priority": st.sampled_from(["0", "5", "9"]),
    "tz": st.sampled_from(["", "UTC", "Europe/Paris"]),
    "late_threshold": st.sampled_from(["", "00:05:00"]),
    "overlap": st.sampled_from(["", "SKIP", "queue"]),
    "reset_end_time": st.sampled_from(["true", "False"]),
}


def body_for(role: str, clean: bool):
    """A valid value for the role; in a script that is not clean, sometimes anything."""
    valid = VALID_BODIES.get(role, WORDS)
    return valid if clean else st.one_of(valid, valid, valid, ANY_BODY)


JOB_PARAMS = {
    "startjob": ["name", "uid", "affinity", "args", "exec_interval", "depends_on", "priority", "tz", "late_threshold", "overlap"],
    "updatejob": ["name", "uid", "affinity", "args", "exec_interval", "depends_on", "priority", "tz", "late_threshold",
                  "overlap", "reset_end_time"],
    "stopjob": ["name", "uid"],
    "restartjob": ["name", "uid"],
    "resumejob": ["name", "uid"],
}
JOB_TYPES = st.sampled_from(["user_job", "process", "Interface_Listener"] * 5 + ["bogus"])


@st.composite
def job_statement(draw) -> list:
    """A statement as parts: text, or ("lit", role) for a string drawn at each use."""
    case = draw(KEYWORD_CASES)
    keyword = draw(st.sampled_from(sorted(JOB_PARAMS)))
    parts: list = [case(keyword), draw(SPACE), draw(JOB_TYPES)]
    taken = JOB_PARAMS[keyword]
    names = ["name", "uid"] + (draw(st.lists(st.sampled_from(taken[2:]), max_size=4, unique=True)) if taken[2:] else [])
    names = draw(st.permutations(names))
    if draw(st.integers(0, 19)) == 0:  # now and then: a duplicate, a missing or a foreign parameter
        names = draw(st.sampled_from([names + names[:1], names[1:], names + ["reset_end_time"]]))
    for name in names:
        parts += [draw(SPACE), case(name), draw(GAP), "=", draw(GAP)]
        if name == "priority" and draw(st.booleans()):
            parts.append(draw(st.sampled_from(["0", "7", "7", "10", "-1", "1.5"])))
        elif name == "reset_end_time" and draw(st.booleans()):
            parts.append(case(draw(st.sampled_from(["true", "false"]))))
        else:
            parts.append(("lit", name))
    if keyword == "stopjob" and draw(st.booleans()):
        parts += [draw(SPACE), case("wait")]
        if draw(st.booleans()):
            parts += [" ", case("timeout"), " ", draw(st.sampled_from(["5", "0", "5", "1.5", "99999999999"]))]
    return parts


@st.composite
def other_statement(draw) -> list:
    case = draw(KEYWORD_CASES)
    kind = draw(st.sampled_from(["jobstatus", "jobhistory", "joblog", "waitjob", "deletehistory", "ps", "kill", "set",
                                 "nodes"]))
    parts: list = [case(kind)]
    job_type = draw(JOB_TYPES)
    with_uid = [draw(SPACE), case("with"), " ", case("uid"), draw(GAP), "=", draw(GAP), ("lit", "uid")]
    if kind == "jobstatus":
        form = draw(st.integers(0, 4))
        if form == 1:
            parts += [" ", draw(st.sampled_from(["3", "0", "3", "-1"])), " ", case("days"), " ", case("ago")]
        elif form >= 2:
            parts += [" ", job_type]
            if form >= 3:
                parts += [" ", ("lit", "name")] + (with_uid if form == 4 else [])
        if draw(st.booleans()):
            parts += [" ", case("details")]
    elif kind == "deletehistory":
        parts += [" ", job_type, draw(SPACE), ("lit", "name")] + with_uid
    elif kind in ("jobhistory", "joblog", "waitjob"):
        parts += [" ", job_type, draw(SPACE), ("lit", "name")]
        if kind == "waitjob" or draw(st.booleans()):
            parts += with_uid
        option = {"jobhistory": "limit", "joblog": "run", "waitjob": "timeout"}[kind]
        if draw(st.booleans()):
            parts += [" ", case(option), " ", draw(st.sampled_from(["1", "0", "1", "2.5", "123456789012345678901"]))]
    elif kind == "ps":
        if draw(st.booleans()):
            parts += [" ", case("all")]
    elif kind == "kill":
        node = draw(st.sampled_from([("lit", "node"), "node-1.a", "n"]))
        parts += [" ", node, " ", draw(st.sampled_from(["12", "0", "12", "x"]))]
    elif kind == "set":
        parts += [" ", draw(st.sampled_from(["sync", "k2_ws.ALPINIST", "a"])), draw(st.sampled_from([" ", " = ", "="]))]
        parts.append(draw(st.sampled_from([("lit", "value"), "off", "10", "a.b-c"])))
    elif kind == "nodes" and draw(st.booleans()):
        parts += [" ", case("details")]
    return parts


SEPARATOR = st.sampled_from([";", ";\n", ";\n", ";\n", " ;", ";\n\n", ";;", "; ", ";\r\n", ";\u00a0", "\n;", ";-- c\n", ";/* c */ "])


@st.composite
def script(draw) -> str:
    """A few statement shapes, used again and again with other strings in them; sometimes damaged."""
    shapes = draw(st.lists(st.one_of(job_statement(), other_statement()), min_size=1, max_size=4))
    clean = draw(st.booleans())
    out = [draw(GAP)]
    for _ in range(draw(st.integers(1, 8))):
        for part in draw(st.sampled_from(shapes)):
            out.append(f"'{draw(body_for(part[1], clean))}'" if isinstance(part, tuple) else part)
        out.append(draw(SEPARATOR))
    if draw(st.booleans()):
        out.pop()  # no ';' after the last statement
    text = "".join(out)
    for _ in range(0 if clean else draw(st.sampled_from([0, 1, 2]))):  # some damage: syntax errors
        i = draw(st.integers(0, len(text)))
        ch = draw(st.sampled_from("';=-/*\\\"\n {}x0é"))
        text = draw(st.sampled_from([text[:i] + ch + text[i:], text[:i] + text[i + 1 :], text[:i]]))
    return text


@settings(max_examples=600, deadline=timedelta(seconds=30), suppress_health_check=[HealthCheck.too_slow])
@given(script())
def test_prepared_statements_agree_with_the_plain_parse(text):
    assert_same(text)


@settings(max_examples=200, deadline=timedelta(seconds=30), suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(script(), st.text(alphabet="';=-/*\\\" \n\tabcps01", max_size=30)), min_size=1, max_size=4))
def test_scripts_glued_together_agree(pieces):
    assert_same(";".join(pieces))


def test_generated_scripts_are_mostly_answered_by_prepared_statements():
    """The comparison above is only worth something if many generated scripts parse and go
    through the prepared path. Derandomized: a proportion of random draws is not a property
    (a fresh clone drew 68 parsing scripts of 300 once, under the quarter asked for)."""
    fast = good = total = 0

    @settings(max_examples=300, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(script())
    def count(text):
        nonlocal fast, good, total
        total += 1
        if outcome(P._parse_lark, text)[0] == "ok":
            good += 1
            fast += P._parse_prepared(text) is not None

    count()
    assert good >= total // 4, (good, total)
    assert fast >= good // 2, (fast, good)
