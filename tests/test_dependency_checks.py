"""Blocked jobs and their parents: children that stay blocked do not hide the ones behind them,
and retention keeps the parents that blocked children wait on (docs/guides/dependencies.md)."""

from __future__ import annotations

from datetime import timedelta


def test_children_that_stay_blocked_do_not_hide_the_ones_behind_them(store_config, store, monkeypatch):
    """More blocked rows than a page (children of a FAILED parent, due first) and behind them
    one whose parent is PROCESSED: the dependency checks page on until they free it, then
    start over from the first page."""

    from fabricjobs.clock import ManualClock
    from fabricjobs.config import load_config
    from fabricjobs.model import Job, JobKey, Status
    from fabricjobs.node import reconcile
    from fabricjobs.node.node import Node

    monkeypatch.setattr(reconcile, "_ADOPT_BATCH", 3)
    monkeypatch.setattr(reconcile, "MAX_PAGES", 1)  # one page per check: the next check goes on
    clock = ManualClock()
    node = Node(load_config(store_config), name="a", clock=clock, store=store)
    try:
        failed, done = JobKey("USER_JOB", "Customer.userJob1", "failed"), JobKey("USER_JOB", "Customer.userJob1", "done")
        t0 = clock.now()
        store.insert(Job(failed, Status.FAILED, t0, archived=True))
        store.insert(Job(done, Status.PROCESSED, t0, archived=True))
        for i in range(7):  # two of them share a due time across a page boundary
            store.insert(Job(JobKey("USER_JOB", "Customer.userJob1", f"stuck{i}"), Status.WAITING, t0,
                             next_run=t0 + timedelta(seconds=min(i, 5)), blocked=True, depends_on=str(failed)))
        free = JobKey("USER_JOB", "Customer.userJob1", "free")
        store.insert(Job(free, Status.WAITING, t0, next_run=t0 + timedelta(seconds=9), blocked=True, depends_on=str(done)))
        checks = 0
        while store.get(free).blocked:
            checks += 1
            assert checks <= 5, "the job behind a page of stuck children was never checked"
            node.signals.parents_changed.set()  # a check now (as after a job ended here)
            node.reconciler._unblock(clock.now())
        node.signals.parents_changed.set()
        node.reconciler._unblock(clock.now())  # finds the end of the list ...
        assert node.reconciler._blocked_from is None  # ... so the next check starts over
        assert all(store.get(JobKey("USER_JOB", "Customer.userJob1", f"stuck{i}")).blocked for i in range(7))
        assert "is FAILED" in store.get(JobKey("USER_JOB", "Customer.userJob1", "stuck6")).error_msg
    finally:
        node.board.close(unlink=True)


def test_retention_goes_by_the_stores_clock_and_keeps_parents_that_blocked_children_wait_on(tmp_path):
    """Issue #18, item 8: a node whose clock ran 31 days fast deleted fresh archived rows, and a
    deleted FAILED parent (a missing parent counts as done) let its blocked child run."""
    from datetime import datetime, timezone

    from fabricjobs.clock import ManualClock
    from fabricjobs.config import load_config
    from fabricjobs.model import Job, JobKey, Status
    from fabricjobs.node.node import Node
    from fabricjobs.store.sqlite import SqliteStore
    from testkit.rig import write_config

    config = write_config(tmp_path / "c.ini", {"store": {"BACKEND": "sqlite", "SQLITE_PATH": str(tmp_path / "j.db")},
                                               "jobs": {"K2JOB_ARCHIVING_TIME_HOUR": 24}})
    store = SqliteStore(tmp_path / "j.db")
    real_now = datetime.now(timezone.utc)

    def archived(uid, status, ended):
        row = store.insert(Job(JobKey("USER_JOB", "A.b", uid), Status.WAITING, ended, next_run=ended)).row
        store.cas(row, row.replace(status=status, archived=True, end_time=ended))

    archived("fresh", Status.PROCESSED, real_now - timedelta(minutes=5))
    archived("old", Status.PROCESSED, real_now - timedelta(days=3))
    archived("failed-parent", Status.FAILED, real_now - timedelta(days=3))
    store.insert(Job(JobKey("USER_JOB", "A.b", "child"), Status.WAITING, real_now, next_run=real_now,
                     depends_on="USER_JOB.A.b.failed-parent", blocked=True))
    fast = ManualClock(real_now + timedelta(days=31))
    node = Node(load_config(config), name="fast", clock=fast, store=store)
    try:
        node._purge_archive()
        left = {j.key.uid for j in store.archived_since(real_now - timedelta(days=30))}
        assert left == {"fresh", "failed-parent"}  # "old" went; the fast clock deleted nothing more
        assert store.get(JobKey("USER_JOB", "A.b", "child")).blocked
    finally:
        node.board.close(unlink=True)
        store.close()
