"""The grammar (``grammar/fabricjobs.lark``) loaded once, and its terminals in words.

Building the LALR tables takes longer than a shell's whole cold start, so they are cached on
disk, keyed on the grammar text. The parser, its error messages and the shell's completion
and highlighting all name terminals the same way; that vocabulary lives here with the grammar.
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
from pathlib import Path
from typing import Iterable

import lark
from lark import Lark, Token

#: Terminals that are not keywords: how lex() colours them and how errors say them.
#: Every other terminal is a keyword (said by its name) or a parameter P_<X> (said "X=").
_TERMINAL_WORDS: dict[str, tuple[str, str]] = {
    "STRING": ("string", "a quoted string"),
    "NUMBER": ("number", "a number"),
    "JOB_TYPE": ("type", "a job type"),
    "NODE_WORD": ("word", "a node name"),
    "SET_KEY": ("word", "a setting name"),
    "SET_WORD": ("word", "a value"),
    "EQ": ("punct", "'='"),
    "LPAR": ("punct", "'('"),
    "RPAR": ("punct", "')'"),
    "COMMA": ("punct", "','"),
    "SEMI": ("punct", "';'"),
    "COMMENT": ("comment", "a comment"),
    "WS": ("space", "white space"),
    "$END": ("space", "end of input"),
}
_PARAM_PREFIX = "P_"

_parser: Lark | None = None


# -- the grammar, loaded once ----------------------------------------------------------------


def grammar_path() -> Path:
    """The packaged grammar of a wheel install, else the repository's (editable install)."""
    package = Path(__file__).resolve().parent.parent
    packaged = package / "_grammar" / "fabricjobs.lark"
    return packaged if packaged.is_file() else package.parent / "grammar" / "fabricjobs.lark"


def get_parser() -> Lark:
    """The process-wide LALR parser; its tables come from a cache keyed on the grammar text."""
    global _parser
    if _parser is None:
        text = grammar_path().read_text(encoding="utf-8")
        _parser = Lark(
            text,
            parser="lalr",
            lexer="contextual",
            propagate_positions=True,
            maybe_placeholders=False,
            cache=_cache_file(text) or False,
        )
    return _parser


def _cache_file(grammar: str) -> str | None:
    """A per-user cache path named after the grammar's hash (None: do not cache).

    The name changes with the grammar, Lark and Python, so an edited grammar never meets old
    tables; Lark also checks the hash stored inside the file.
    """
    key = f"{grammar}\0{lark.__version__}\0{sys.version_info[:2]}"
    name = f"grammar-{hashlib.sha256(key.encode('utf-8', 'surrogatepass')).hexdigest()[:20]}.lark-cache"
    directory = _cache_dir()
    return str(directory / name) if directory else None


def _cache_dir() -> Path | None:
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(xdg) if os.path.isabs(xdg) else Path.home() / ".cache"
    uid = getattr(os, "getuid", lambda: None)()
    candidates = [(base / "fabricjobs", False), (Path(tempfile.gettempdir()) / f"fabricjobs-{uid}", True)]
    for directory, shared in candidates:
        try:
            directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            st = directory.stat()
        except (OSError, RuntimeError):  # RuntimeError: Path.home() without a home
            continue
        # The cache is unpickled: in a shared temp dir, trust only a private dir of our own.
        if shared and uid is not None and (st.st_uid != uid or st.st_mode & 0o022):
            continue
        if os.access(directory, os.W_OK | os.X_OK):
            return directory
    return None


# -- terminals in words ----------------------------------------------------------------------


def terminal_category(name: str) -> str:
    """The highlighting class of a terminal: keyword, param, string, number, punct, ..."""
    if name in _TERMINAL_WORDS:
        return _TERMINAL_WORDS[name][0]
    return "param" if name.startswith(_PARAM_PREFIX) else "keyword"


def terminal_words(name: str) -> str:
    """How a message says a terminal: NAME=, STARTJOB, a quoted string, ';' ..."""
    if name in _TERMINAL_WORDS:
        return _TERMINAL_WORDS[name][1]
    return f"{param_name(name)}=" if name.startswith(_PARAM_PREFIX) else name


def param_name(terminal: str) -> str:
    """P_EXEC_INTERVAL -> EXEC_INTERVAL."""
    return terminal[len(_PARAM_PREFIX):]


def is_param(terminal: str) -> bool:
    return terminal.startswith(_PARAM_PREFIX)


def is_keyword(terminal: str) -> bool:
    return terminal_category(terminal) == "keyword"


def grammar_order(names: Iterable[str]) -> list[str]:
    """Terminal names sorted as the grammar declares them (so messages read in a stable order)."""
    order = {t.name: i for i, t in enumerate(get_parser().terminals)}
    return sorted(set(names), key=lambda n: (order.get(n, len(order)), n))


def token_start(tok: Token) -> int:
    """A token's offset (lark types it optional; tokens of a parse always have one)."""
    assert tok.start_pos is not None
    return tok.start_pos


def token_end(tok: Token) -> int:
    assert tok.end_pos is not None
    return tok.end_pos
