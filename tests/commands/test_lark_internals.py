"""What the parser reads of Lark beyond its documented parse() and Transformer: a Lark upgrade
that changes any of it fails here, not silently at a user's prompt.

The prepared-statement cache (fabricjobs/commands/prepared.py) rebuilds Lark's lexing of
strings and ignored text from the grammar's terminals, keeps parse trees with their token
positions and replays a Transformer by hand; on anything unexpected it turns itself off
without a word, so these tests also check that it is still in use. The error wording
(messages.py) reads the interactive parser of an error. Finally the cache is switched off and
on over the inputs of test_parser.py: both must give the same commands and the same errors.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from lark import Token, Transformer, Tree, v_args
from lark.exceptions import UnexpectedToken
from lark.lexer import TerminalDef

from fabricjobs.commands import parse_script, prepared
from fabricjobs.commands.grammar import get_parser
from fabricjobs.commands.parser import parse_lark
from fabricjobs.commands.transform import ToCommand
from fabricjobs.errors import CommandSyntaxError


def _parser_test_inputs() -> list[str]:
    """The statements test_parser.py parses: its parametrized texts and its VALID scripts."""
    path = Path(__file__).with_name("test_parser.py")
    spec = importlib.util.spec_from_file_location("_parser_test_inputs", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    texts = list(module.VALID)
    for name, test in vars(module).items():
        for mark in getattr(test, "pytestmark", []) if name.startswith("test_") else []:
            if mark.name != "parametrize":
                continue
            argnames = [a.strip() for a in mark.args[0].split(",")]
            for values in mark.args[1]:
                first = values[0] if len(argnames) > 1 else values
                if argnames[0] == "text":
                    texts.append(first)
                elif argnames[0] == "literal":
                    texts.append(f"stopjob user_job name={first}")
    return list(dict.fromkeys(texts))


CORPUS = _parser_test_inputs()


def outcome(text: str):
    try:
        return ("ok", parse_script(text))
    except CommandSyntaxError as exc:
        return ("error", type(exc), str(exc), exc.line, exc.column, exc.expected)


# -- the Lark internals the prepared-statement cache reads ------------------------------------


def test_terminals_can_be_looked_up_and_turned_into_regular_expressions():
    parser = get_parser()
    string = parser.get_terminal("STRING")
    assert isinstance(string, TerminalDef) and isinstance(string.priority, int)
    assert isinstance(string.pattern.to_regexp(), str)
    assert re.fullmatch(string.pattern.to_regexp(), "'it''s'")
    assert {t.name for t in parser.terminals} >= {"STRING", "SEMI", "WS", "COMMENT"}
    assert set(parser.lexer_conf.ignore) == {"WS", "COMMENT"}
    with pytest.raises(KeyError):  # what prepared._lexing_patterns expects of an unknown name
        parser.get_terminal("NO_SUCH_TERMINAL")


def test_the_cache_finds_its_lexing_patterns():
    """None would switch the cache off for good, without a word."""
    assert prepared._lexing_patterns() is not None


def test_trees_carry_the_positions_the_cache_relies_on():
    text = "  startjob user_job name='a' uid='b' -- c\n"
    tree = get_parser().parse(text)
    (node,) = tree.children
    assert isinstance(node, Tree) and isinstance(node.data, str)
    assert (node.meta.start_pos, node.meta.end_pos, node.meta.line) == (2, text.index(" --"), 1)
    tokens = list(node.scan_values(lambda v: isinstance(v, Token)))
    strings = [(t.type, t.value, t.start_pos, t.end_pos) for t in tokens if t.type == "STRING"]
    assert strings == [("STRING", "'a'", 25, 28), ("STRING", "'b'", 33, 36)]
    made = Token("STRING", "'x'")
    assert made == "'x'" and made.type == "STRING" and made.value == "'x'"


def test_a_transformer_calls_the_rule_method_with_the_transformed_children_and_keeps_tokens():
    """prepared._build replays Transformer.transform this way; _compile refuses methods that
    v_args wraps (they carry visit_wrapper) and token callbacks (__default_token__)."""

    class Probe(Transformer):
        def inner(self, children):
            return ("inner", children)

        def outer(self, children):
            return ("outer", children)

        @v_args(inline=True)
        def wrapped(self, *children):
            return children

    tok = Token("STRING", "'s'")
    assert Probe().transform(Tree("outer", [Tree("inner", [tok]), tok])) == ("outer", [("inner", [tok]), tok])
    assert hasattr(Probe.wrapped, "visit_wrapper") and not hasattr(Probe.outer, "visit_wrapper")
    assert ToCommand.__default_token__ is Transformer.__default_token__


@pytest.mark.parametrize("text", [t for t in CORPUS if outcome(t)[0] == "ok"])
def test_a_replayed_tree_builds_what_the_transformer_builds(text):
    """For each statement of the corpus: the cache's compiled tree, replayed with the
    statement's own strings, gives what Lark's Transformer gives for the parse tree."""
    for node in get_parser().parse(text).children:
        if not isinstance(node, Tree):
            continue
        strings = [t.value for t in node.scan_values(lambda v: isinstance(v, Token)) if t.type == "STRING"]
        compiled = prepared._compile(node, iter(range(len(strings))))
        assert compiled is not None, node
        assert prepared._build(compiled, ToCommand(text), strings) == ToCommand(text).transform(node)


def test_errors_carry_the_interactive_parser_the_wording_reads():
    with pytest.raises(UnexpectedToken) as info:
        get_parser().parse("startjob user_job name='a' kill")
    ip = info.value.interactive_parser
    assert "P_UID" in set(ip.accepts())
    assert any(isinstance(v, Token) and v.type == "STARTJOB" for v in ip.parser_state.value_stack)


# -- the flag: the same answers with the cache on and off -------------------------------------


def test_the_corpus_is_the_parser_tests_inputs():
    assert len(CORPUS) > 50
    assert sum(outcome(t)[0] == "ok" for t in CORPUS) > 30


@pytest.mark.parametrize("text", CORPUS)
def test_cache_on_and_off_give_the_same_commands_and_errors(text, monkeypatch):
    monkeypatch.setattr(prepared, "enabled", False)
    plain = outcome(text)
    monkeypatch.setattr(prepared, "enabled", True)
    assert outcome(text) == plain  # first sight of its shapes
    assert outcome(text) == plain  # shapes prepared


def test_the_corpus_goes_through_the_cache_when_it_is_on():
    """Else the comparison above compares the plain path with itself."""
    ok = [t for t in CORPUS if outcome(t)[0] == "ok"]
    fast = [t for t in ok if prepared.parse_prepared(t) is not None]
    assert len(fast) >= len(ok) * 3 // 4, set(ok) - set(fast)
    script = ";\n".join(ok)
    assert prepared.parse_prepared(script) == parse_lark(script)


def test_with_the_cache_off_it_is_not_consulted(monkeypatch):
    def refuse(text):
        raise AssertionError("the prepared-statement cache was used while off")

    monkeypatch.setattr(prepared, "enabled", False)
    monkeypatch.setattr(prepared, "parse_prepared", refuse)
    assert [s.command for s in parse_script("ps; ps all")] == [s.command for s, _ in parse_lark("ps; ps all")]


@pytest.mark.parametrize("value, enabled", [("0", False), ("off", False), ("1", True), ("", True)])
def test_the_environment_sets_the_flag(value, enabled):
    env = {**os.environ, "FABRICJOBS_PREPARED_STATEMENTS": value}
    code = "from fabricjobs.commands import prepared; print(prepared.enabled)"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == str(enabled)
