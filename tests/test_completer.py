"""The shell's Tab: names, UIDs and nodes that exist in the store are offered where the grammar
expects them, quoted as the language quotes them (the grammar side is tests/commands/test_complete.py)."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from prompt_toolkit.completion import CompleteEvent
from prompt_toolkit.document import Document

from fabricjobs.client import Client
from fabricjobs.config import load_config
from fabricjobs.shell.completer import Catalog, CommandCompleter
from fabricjobs.shell.repl import _load_catalog
from fabricjobs.store import open_store
from fabricjobs.store.base import NodeRow
from backends import add_sections
from harness import ROOT, wait_for


@pytest.fixture
def completer(store_config):
    add_sections(store_config, {"jobs": {"USER_JOBS_DIR": ROOT / "examples" / "jobs", "PROCESS_JOBS_DIR": ROOT / "examples" / "process_jobs"}})
    cfg = load_config(store_config)
    client = Client(open_store(cfg), cfg, owns_store=True)
    client.fetch("startjob user_job name='Customer.userJob1' uid='u1';"
                 "startjob user_job name='Customer.userJob3' uid='u2';"
                 "startjob process name='echoArg.sh' uid='it''s';")
    client.store.write_node(NodeRow("node-a", "i1", "DC1", "host", 1, datetime.now(timezone.utc), "x", 1))
    catalog = Catalog(lambda: _load_catalog(client))
    catalog.refresh(wait=True)
    yield CommandCompleter(catalog)
    client.close()


def offered(completer: CommandCompleter, text: str) -> list[tuple[str, int]]:
    """What Tab offers after ``text``: (inserted text, how many characters before the cursor it replaces)."""
    event = CompleteEvent(completion_requested=True)
    return [(c.text, c.start_position) for c in completer.get_completions(Document(text), event)]


def test_job_names_complete_inside_and_before_a_string(completer):
    assert offered(completer, "jobstatus user_job 'Customer.userJob") == [
        ("'Customer.userJob1'", -len("'Customer.userJob")), ("'Customer.userJob3'", -len("'Customer.userJob"))]
    assert ("'echoArg.sh'", 0) in offered(completer, "stopjob process name=")


def test_uids_complete_with_the_languages_quote_escape(completer):
    assert ("'it''s'", -len("'it")) in offered(completer, "jobstatus process 'echoArg.sh' with uid='it")
    assert ("'u1'", -len("'u")) in offered(completer, "resumejob user_job name='Customer.userJob1' uid='u")


def test_names_and_uids_are_those_of_the_type_and_name_already_given(completer):
    """A UID among the NAME's, a NAME among the type's (a PROCESS name is no USER_JOB's), and
    a prefix matched whatever its case."""
    assert offered(completer, "stopjob user_job name='Customer.userJob1' uid='") == [("'u1'", -1)]
    assert offered(completer, "jobstatus user_job 'Customer.userJob3' with uid='") == [("'u2'", -1)]
    assert ("'echoArg.sh'", 0) not in offered(completer, "startjob user_job name=")
    assert offered(completer, "jobstatus process '") == [("'echoArg.sh'", -1)]
    assert offered(completer, "jobstatus user_job 'cust") == [("'Customer.userJob1'", -5), ("'Customer.userJob3'", -5)]
    # Each statement of a line by itself: the last one's NAME counts.
    assert offered(completer, "jobstatus; stopjob user_job name='Customer.userJob3' uid='") == [("'u2'", -1)]


def test_a_value_edited_before_its_closing_quote_is_not_given_a_second_one(completer):
    """Tab with the cursor just before a value's closing quote completes up to it; in the middle
    of a value (text after the cursor) nothing is offered rather than leaving that text behind."""
    def at(before: str, after: str) -> list[tuple[str, int]]:
        event = CompleteEvent(completion_requested=True)
        document = Document(before + after, len(before))
        return [(c.text, c.start_position) for c in completer.get_completions(document, event)]

    assert at("stopjob user_job name='Customer.userJob1' uid='u", "';") == [("'u1", -2)]
    assert at("stopjob user_job name='Customer.userJob1' uid='u", "x';") == []


def test_live_nodes_complete_after_kill(completer, store_config):
    """Live nodes only: a node whose row still says running but whose beat is long past its
    dead threshold (here 3 ms) was offered, and KILL then said it has no live node."""
    store = open_store(load_config(store_config))
    try:
        store.write_node(NodeRow("node-gone", "i2", "DC1", "host", 2, datetime.now(timezone.utc), "x", 1,
                                 info='{"heartbeat_ms": 1, "miss": 3}'))
        from fabricjobs.cluster import read_cluster
        wait_for(lambda: not [n for n in read_cluster(store) if n.name == "node-gone" and n.is_live], 5, "node-gone dead")
    finally:
        store.close()
    completer.catalog.refresh(wait=True, now=True)
    assert offered(completer, "kill ") == [("'node-a'", 0)]


def test_a_value_with_an_escaped_quote_and_a_parameter_before_its_equals_complete_in_place(completer):
    """The value typed was counted unescaped (an escaped quote as one character), which left a
    stray quote and broke the statement; a parameter completed just before its '=' got another."""
    assert offered(completer, "jobstatus process 'echoArg.sh' with uid='it''") == [("'it''s'", -len("'it''"))]
    event = CompleteEvent(completion_requested=True)
    before = "stopjob user_job name='Customer.userJob1' ui"
    document = Document(before + "='u1';", len(before))
    assert [(c.text, c.start_position) for c in completer.get_completions(document, event)] == [("UID", -2)]


def test_keywords_and_parameters_still_come_from_the_grammar(completer):
    assert ("JOBSTATUS", -len("jobsta")) in offered(completer, "jobsta")
    assert ("EXEC_INTERVAL=", -len("exec")) in offered(completer, "startjob user_job name='x' exec")


def test_a_store_that_fails_leaves_the_names_as_they_were():
    def broken():
        raise OSError("store unreachable")

    catalog = Catalog(broken)
    catalog.refresh(wait=True)  # no exception reaches the prompt
    assert offered(CommandCompleter(catalog), "jobstatus user_job '") == []


def test_a_refresh_asked_for_during_a_load_runs_after_it():
    """A statement's refresh(now=True) while a load is under way (one that may have read the
    store before the statement): the names it made are loaded right after, not 5 s later."""
    import threading

    from harness import wait_for

    store, first_read, go_on = ["old-job"], threading.Event(), threading.Event()

    def load():
        jobs = [("USER_JOB", "A.b", uid) for uid in store]  # read, then slow to come back
        first_read.set()
        go_on.wait(10)
        return jobs, []

    catalog = Catalog(load, period=3600)
    catalog.refresh(now=True)
    assert first_read.wait(10)
    store.append("just-now")  # a STARTJOB the load under way did not see
    catalog.refresh(now=True)
    go_on.set()
    wait_for(lambda: ("USER_JOB", "A.b", "just-now") in catalog.jobs, 10, "the job just started to be offered")


def test_the_catalog_holds_a_bounded_page_of_the_live_jobs(store_config):
    """Its refresh runs after every statement: on a big cluster it reads one page, not every job."""
    from fabricjobs.model import Job, JobKey, Status
    from fabricjobs.shell.repl import CATALOG_JOBS

    cfg = load_config(store_config)
    client = Client(open_store(cfg), cfg, owns_store=True)
    try:
        now = datetime.now(timezone.utc)
        jobs = [Job(JobKey("USER_JOB", "Bulk.job", f"u{i:04d}"), Status.WAITING, now) for i in range(CATALOG_JOBS + 50)]
        assert all(r.applied for r in client.store.insert_many(jobs))
        catalog = Catalog(lambda: _load_catalog(client))
        catalog.refresh(wait=True)
        assert [uid for _, _, uid in catalog.jobs] == [f"u{i:04d}" for i in range(CATALOG_JOBS)]
    finally:
        client.close()
