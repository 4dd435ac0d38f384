"""The live log path in pieces (JOBLOG ... FOLLOW): a worker's spool file of a run,
and the node part that passes its new complete lines to the store. End to end through real
nodes and the shell: tests/test_follow.py."""

from __future__ import annotations

import os

from fabricjobs.clock import ManualClock
from fabricjobs.model import JobKey
from fabricjobs.node.livelog import LiveLogFlusher
from fabricjobs.store.sqlite import SqliteStore
from fabricjobs.worker.output import RunOutput
from fabricjobs.worker.runlog import RunLog
from fabricjobs.worker.spool import LINE_MAX, Spool, spool_path

KEY = JobKey("USER_JOB", "Customer.live", "u1")


def _parts(tmp_path, running, max_bytes=65536):
    store = SqliteStore(tmp_path / "store.db")
    flusher = LiveLogFlusher(store, str(tmp_path / "board.live"), lambda: dict(running), ManualClock(),
                             interval=1.0, max_bytes=max_bytes)
    os.makedirs(flusher.spool_dir)
    return store, flusher


def test_a_run_that_logs_nothing_makes_no_file(tmp_path):
    (tmp_path / "b.live").mkdir()
    spool = Spool(spool_path(str(tmp_path / "b"), 7))
    spool.close()
    assert os.listdir(tmp_path / "b.live") == []


def test_complete_lines_are_passed_on_once_in_order_and_the_file_goes_with_the_run(tmp_path):
    running = {7: (KEY, 3)}
    store, flusher = _parts(tmp_path, running)
    spool = Spool(spool_path(str(tmp_path / "board"), 7))
    spool.write("first")
    spool.write("two\nlines")  # a message over lines: a line each
    out = RunOutput(spool, RunLog(65536))  # a job's stdout, as its worker reads it
    out.feed(b"stdout: ", b"half a li")
    assert flusher.flush_once() == 3
    assert store.live_log(KEY, 3) == [(0, "first"), (1, "two"), (2, "lines")]
    out.feed(b"stdout: ", b"ne\nnext")
    out.finish()
    assert flusher.flush_once() == 2 and flusher.flush_once() == 0
    assert [line for _, line in store.live_log(KEY, 3, after_seq=2)] == ["stdout: half a line", "stdout: next"]
    spool.close()
    assert os.listdir(flusher.spool_dir) == []
    store.close()


def test_lines_beyond_the_budget_are_counted_not_passed_on(tmp_path):
    store, flusher = _parts(tmp_path, {1: (KEY, 1)}, max_bytes=16384)
    spool = Spool(spool_path(str(tmp_path / "board"), 1))
    for i in range(3000):
        spool.write(f"line {i:05d}")  # 11 bytes each: 1489 fit in 16 KB
    spool.write("x" * (LINE_MAX + 10))  # cut to LINE_MAX
    assert flusher.flush_once() == 1490
    lines = [line for _, line in store.live_log(KEY, 1, limit=5000)]
    assert lines[0] == "line 00000" and lines[1488] == "line 01488" and lines[-1] == "[1512 lines skipped]"
    spool.write("after")
    flusher.flush_once()
    assert store.live_log(KEY, 1, after_seq=1489) == [(1490, "after")]
    spool.close()
    store.close()


def test_a_file_of_a_run_the_node_no_longer_has_is_removed(tmp_path):
    store, flusher = _parts(tmp_path, {})
    stale = Spool(spool_path(str(tmp_path / "board"), 9))
    stale.write("a killed worker's line")
    assert flusher.flush_once() == 0
    assert os.listdir(flusher.spool_dir) == [] and store.live_log(KEY, 1) == []
    store.close()


# -- the follow itself, on a store (both backends), without nodes ----------------------------------

def test_follow_yields_the_live_lines_then_the_records_rest_then_how_the_run_ended(store, store_config):
    from datetime import datetime, timezone

    import pytest

    from fabricjobs.client import Client
    from fabricjobs.config import load_config
    from fabricjobs.errors import CommandError
    from fabricjobs.model import Job, Status
    from fabricjobs.store.base import RunRecord

    t0 = datetime(2026, 5, 1, 12, tzinfo=timezone.utc)
    client = Client(store, load_config(store_config))
    key = JobKey("USER_JOB", "Customer.live", "f")
    row = store.insert(Job(key=key, status=Status.WAITING, creation_time=t0, next_run=t0)).row
    running = store.cas(row, row.replace(status=Status.IN_PROCESS, worker_id="n1", epoch=1, start_time=t0)).row
    store.append_live_log(key, 1, 0, ["a", "b"])
    lines = iter(client.fetch("joblog user_job 'Customer.live' with uid='f' follow timeout 30;").lines or ())
    assert [next(lines), next(lines), next(lines)] == ["run 1 of USER_JOB.Customer.live.f on n1: following (ends with the run)",
                                                       "a", "b"]
    done = running.replace(status=Status.PROCESSED, archived=True, end_time=t0)
    store.cas_many([(running, done)], runs=[RunRecord(key, 1, "n1", t0, t0, t0, "OK", "PROCESSED", 0, log="a\nb\nc")])
    assert list(lines) == ["c", "run 1 of USER_JOB.Customer.live.f on n1: OK -> PROCESSED"]  # c: logged after the last pass
    # Over: JOBLOG's answer, at once, still as lines (a program iterates them either way).
    final = client.fetch("joblog user_job 'Customer.live' follow;")
    assert final.status is None and list(final.lines or ()) == [
        "run 1 of USER_JOB.Customer.live.f on n1: OK -> PROCESSED", "a", "b", "c"]
    for uid in ("g", "h"):
        store.insert(Job(key=JobKey("USER_JOB", "Customer.two", uid), status=Status.WAITING, creation_time=t0, next_run=t0))
    with pytest.raises(CommandError, match="2 live jobs are named 'Customer.two'; add WITH UID='<uid>' to follow one"):
        client.fetch("joblog user_job 'Customer.two' follow;")


def test_the_shell_prints_each_line_as_it_comes_in_each_format():
    import io

    from fabricjobs.result import Result
    from fabricjobs.shell.output import print_result

    class Out(io.StringIO):
        def __init__(self):
            super().__init__()
            self.flushed: list[str] = []

        def flush(self):
            self.flushed.append(self.getvalue())

    def lines():
        yield "one"
        assert "one" in out.flushed[-1]  # printed (and flushed) before the next line is read
        yield "two \x1b[31m"

    out = Out()
    print_result(Result(lines=lines()), "table", out)
    assert out.getvalue() == "one\ntwo \u241b[31m\n"  # a terminal gets no escape sequence from a job
    for fmt, expected in (("json", '{"line": "one"}\n{"line": "two \\u001b[31m"}\n'), ("csv", "one\ntwo \x1b[31m\n")):
        out = Out()
        print_result(Result(lines=lines()), fmt, out)
        assert out.getvalue() == expected


def test_a_failing_store_is_logged_once_per_outage_and_the_lines_are_passed_on_after_it(tmp_path, caplog):
    """A full disk fails every flush (every 200 ms on a busy node): one line when it begins,
    one when lines go through again, none between; nothing is lost, the lines wait in the file."""
    import logging

    from fabricjobs.errors import StoreError

    store, flusher = _parts(tmp_path, {7: (KEY, 1)})
    spool = Spool(spool_path(str(tmp_path / "board"), 7))
    spool.write("kept")
    append = store.append_live_log

    def full_disk(*args, **kwargs):
        raise StoreError("database or disk is full")

    store.append_live_log = full_disk
    caplog.set_level(logging.WARNING, logger="fabricjobs.node")
    for _ in range(5):
        flusher.flush_and_report()
    store.append_live_log = append
    flusher.flush_and_report()
    spool.write("after")
    flusher.flush_and_report()
    assert [r.getMessage() for r in caplog.records if r.name == "fabricjobs.node.livelog"] == [
        "passing live log lines on failed: database or disk is full (trying again every flush)",
        "passing live log lines on works again"]
    assert store.live_log(KEY, 1) == [(0, "kept"), (1, "after")]
    spool.close()
    store.close()


def test_a_long_line_anywhere_within_the_room_is_kept_by_its_start(tmp_path):
    """Printed output, as a worker reads it: a 1 MB line after a short one, in the same read,
    and a 1 MB line whose line break comes in a read of its own. The spool keeps each line's
    pieces (LINE_MAX) up to its room, the run's log shows the start of each: none of it is
    counted as dropped while there is room."""
    (tmp_path / "b.live").mkdir()
    for reads in ([b"start\n" + b"y" * 1_000_000 + b"\n"], [b"x" * 1_000_000, b"\n"]):
        spool = Spool(spool_path(str(tmp_path / "b"), 1), keep=4 * 1024 * 1024)
        run_log = RunLog(65536).reset(65536, spool)
        output = RunOutput(spool, run_log)
        for data in reads:
            output.feed(b"stdout: ", data)
        output.finish()
        assert spool.dropped == 0 and spool.kept > 1_000_000, (spool.kept, spool.dropped)
        shown = [line for line in run_log.text().split("\n") if len(line) > 1000]
        assert shown and all(len(line) == len("stdout: ") + LINE_MAX for line in shown), [len(x) for x in shown]
        spool.close()
    small = Spool(spool_path(str(tmp_path / "b"), 2), keep=65536)
    output = RunOutput(small, RunLog(65536).reset(65536, small))
    output.feed(b"stdout: ", b"start\n" + b"y" * 1_000_000 + b"\n")
    assert 60_000 < small.kept <= 65536 and small.dropped > 900_000, (small.kept, small.dropped)  # its start, to the room
    small.close()
