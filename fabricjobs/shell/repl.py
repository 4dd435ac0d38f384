"""The interactive shell: wires the prompt (lexer, completer, keys, history) to a Client and
prints each result. A failing statement prints its one clear message and the shell goes on;
a bug is logged with its traceback and reported in one line."""

from __future__ import annotations

import os
import re
import shutil
import sys
from pathlib import Path
from typing import TextIO, cast

from prompt_toolkit import PromptSession
from prompt_toolkit.history import FileHistory

from ..client import Client
from ..cluster import read_cluster
from ..errors import FabricJobsError
from ..private import private_file
from .completer import Catalog, CommandCompleter
from .keys import key_bindings
from .lexer import STYLE, CommandLexer
from .help import EXIT_WORDS, help_text
from .pager import PagedOutput, pager_command
from .script import run_text, shell_log_path

def history_path() -> Path:
    return shell_log_path().with_name("history")


#: Live jobs whose names Tab offers: the first ones in key order. A refresh runs after every
#: statement, and on Cassandra each job listed is a read: every live job was 2,009 requests a
#: refresh with 2,000 live jobs (docs/guides/scripts-and-code.md).
CATALOG_JOBS = 500


#: Statements after which a job waits for a node to run it.
_STARTS = re.compile(r"\b(startjob|resumejob|runjob|restartjob)\b", re.IGNORECASE)
NO_NODE_NOTE = ("note: no node is running, so the job waits until one starts (`fabricjobs node`, or "
                "./scripts/run for a local cluster; NODES lists them)")


def _no_live_node(client: Client) -> bool:
    """Whether the store shows no live node (a store that cannot say: not a reason to warn)."""
    try:
        return not any(n.is_live for n in read_cluster(client.store))
    except FabricJobsError:
        return False


def _load_catalog(client: Client):
    jobs = [(j.type, j.name, j.uid) for j in client.store.live_jobs(limit=CATALOG_JOBS)]
    nodes = [n.name for n in read_cluster(client.store) if n.is_live]  # (KILL names a live node; PS ... too)
    return jobs, nodes


def run_repl(client: Client, *, fmt: str = "table", zone=None) -> int:
    path = history_path()
    try:
        history = FileHistory(str(private_file(path)))  # it holds every ARGS typed, passwords too
    except OSError:
        history = None
    catalog = Catalog(lambda: _load_catalog(client))
    session: PromptSession = PromptSession(
        message=[("class:prompt", "fabric> ")],
        multiline=True,
        prompt_continuation=lambda width, line_number, wrap_count: [("class:continuation", "-> ".rjust(width))],
        lexer=CommandLexer(),
        completer=CommandCompleter(catalog),
        complete_while_typing=False,
        key_bindings=key_bindings(),
        history=history,
        style=STYLE,
        enable_history_search=True,
    )
    catalog.refresh()
    out = cast(TextIO, PagedOutput(sys.stdout, pager_command(os.environ)))  # (an answer taller than the terminal: less)
    warned = False  # (once, until a node has been seen)
    while True:
        try:
            text = session.prompt()
        except KeyboardInterrupt:
            continue
        except EOFError:
            return 0
        word = text.strip().lower().rstrip(";")
        if word in EXIT_WORDS:
            return 0
        shown = help_text(text)
        if shown is not None:
            print(shown, file=out)
            continue
        width = shutil.get_terminal_size((120, 40)).columns
        try:
            # An entry of many statements (a paste) runs as a script does: to its first error,
            # its consecutive STARTJOBs written together (docs/guides/scripts-and-code.md).
            code = run_text(client, text, out, sys.stderr, fmt=fmt, zone=zone, width=width)
        except KeyboardInterrupt:  # (a wait given up, or a long answer cut: what was sent stays done)
            print("interrupted: the statements sent before stay done (a STOPJOB ... WAIT still stops its job); "
                  "JOBSTATUS shows where things are", file=sys.stderr)
            code = 1
        catalog.refresh(now=True)  # (the job just started is one the next Tab may name)
        if code == 0 and _STARTS.search(text):  # a job started with no node to run it waits silently
            alone = _no_live_node(client)
            if alone and not warned:
                print(NO_NODE_NOTE, file=sys.stderr)
            warned = alone
