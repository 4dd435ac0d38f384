"""Every example of the command language in the docs runs (CONTRIBUTING.md, "Examples in the
docs"): each transcript of a page (a fenced block with ``fabric> `` lines) is run, statement by
statement, against the example configuration (examples/config.ini, examples/jobs) on two real
nodes named as ./scripts/run names them, a fresh store per page, in the page's order.

A statement passes when it succeeds, or fails with the error its transcript shows after it (the
same first words: an example of a refusal). One that fails otherwise is tried again for a few
seconds, since an example may read what one before it started (a run takes a moment). A
transcript that cannot run there says why in ``<!-- not run: ... -->`` on the line before its
fence. The output shown is not compared (times, task numbers and node names differ per run).
"""

from __future__ import annotations

import configparser
import itertools
import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from fabricjobs.errors import FabricJobsError, message_of
from testkit.rig import Rig

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted((ROOT / "docs").rglob("*.md")) + [ROOT / "README.md"]
PROMPT = "fabric> "
RETRY_SEC = 12.0
_FENCE = re.compile(r"^(?:<!-- not run: (?P<why>[^>]+?) -->\n)?```[^\n]*\n(?P<body>.*?)^```", re.M | re.S)


@dataclass(frozen=True)
class Statement:
    page: str
    line: int
    text: str
    shown: tuple[str, ...]  # what the transcript shows after it, up to the next line typed
    shell: bool = False  # a `$ ` line: a command of the operator's shell (a file dropped in an inbox)


def transcripts(page: Path) -> tuple[list[list[Statement]], list[str]]:
    """The page's transcripts to run, and the reasons given for the ones not run."""
    text = page.read_text(encoding="utf-8")
    runs, skipped = [], []
    for m in _FENCE.finditer(text):
        lines = m.group("body").split("\n")
        if not any(line.startswith(PROMPT) for line in lines):
            continue
        if m.group("why"):
            skipped.append(m.group("why"))
            continue
        first = text.count("\n", 0, m.start("body")) + 1
        block = []
        for i, line in enumerate(lines):
            if line.startswith(PROMPT) and line[len(PROMPT):].strip():
                shown = tuple(itertools.takewhile(lambda x: not x.startswith((PROMPT, "$ ")), lines[i + 1:]))
                block.append(Statement(str(page.relative_to(ROOT)), first + i, line[len(PROMPT):].strip(), shown))
            elif line.startswith("$ ") and not line[2:].startswith("./scripts/run"):  # (the cluster the test stands for)
                block.append(Statement(str(page.relative_to(ROOT)), first + i, line[2:].strip(), (), shell=True))
        runs.append(block)
    return runs, skipped


def _shown_error(shown: tuple[str, ...], error: str) -> bool:
    """Whether the transcript shows this error after the statement: a line of its output (not a
    table's) that starts with the error's first words (a script's error comes after the tables
    of the statements before it)."""
    words = error.split("\n")[0].split()[:3]
    return any(line.split()[:3] == words for line in shown if not line.startswith(("+", "|")))


def example_cluster(tmp: Path) -> Rig:
    """Two nodes, local-1 and local-2, on the example configuration (as written), its paths made
    absolute and the store and the run's files moved to ``tmp``."""
    ini = configparser.ConfigParser()
    ini.optionxform = str  # type: ignore[assignment, method-assign]  (keys keep their case)
    ini.read(ROOT / "examples" / "config.ini", encoding="utf-8")
    run = tmp / ".run"  # where ./scripts/run keeps what the config names: the pages' `$` lines write there
    ini["jobs"].update(USER_JOBS_DIR=str(ROOT / "examples" / "jobs"), PROCESS_JOBS_DIR=str(ROOT / "examples" / "process_jobs"),
                       LISTENER_ROOT=str(run / "listen"), CLEANUP_ROOT=str(run / "work"))
    ini["store"]["SQLITE_PATH"] = str(run / "fabricjobs.db")
    ini["web"].update(TOKENS_FILE=str(run / "tokens.json"), SESSION_KEY_FILE=str(run / "session.key"))
    for d in ("listen/inbox", "work"):
        (run / d).mkdir(parents=True, exist_ok=True)
    with open(tmp / "config.ini", "w", encoding="utf-8") as out:
        ini.write(out)
    rig = Rig(tmp, tmp / "config.ini")
    nodes = [rig.spawn(f"local-{i}") for i in (1, 2)]
    for node in nodes:
        rig.wait_started(node)
    return rig


def run_statement(client, st: Statement, where: Path) -> None:
    if st.shell:
        done = subprocess.run(["bash", "-c", st.text], cwd=where, capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, f"{st.page}:{st.line}: $ {st.text}\n{done.stderr}"
        return
    deadline = time.monotonic() + RETRY_SEC
    while True:
        try:
            client.fetch(st.text)
            return
        except FabricJobsError as exc:
            error = message_of(exc)
        if _shown_error(st.shown, error):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"{st.page}:{st.line}: {st.text}\n  failed: {error}\n  the page shows: {st.shown[:1]!r}")
        time.sleep(0.25)


@pytest.mark.parametrize("page", [p for p in PAGES if transcripts(p)[0]], ids=lambda p: str(p.relative_to(ROOT)))
def test_every_example_of_the_page_runs(page: Path, tmp_path):
    from fabricjobs.client import Client

    runs, _ = transcripts(page)
    rig = example_cluster(tmp_path)
    try:
        with Client.from_config(rig.config_path) as client:
            for block in runs:
                for st in block:
                    run_statement(client, st, tmp_path)
    finally:
        rig.kill_all()


def test_a_transcript_not_run_says_why_and_there_are_transcripts_to_run():
    found = {p: transcripts(p) for p in PAGES}
    assert sum(len(b) for runs, _ in found.values() for b in runs) > 80  # the extraction finds the statements
    assert all(why.strip() for _, skipped in found.values() for why in skipped)
