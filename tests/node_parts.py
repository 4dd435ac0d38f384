"""In-process node parts for tests of one step of a node's loop (claims, trains, fires): a node
whose claim step runs in the test's thread, and a store with some methods replaced."""

from __future__ import annotations

import contextlib


@contextlib.contextmanager
def one_slot_node(tmp_path, pool_size: int = 1):
    """An in-process node "a" with one slot (or ``pool_size``) on SQLite, its lease held,
    launching nothing: its claim step (node.reconciler.claims) runs in the test's thread.
    Yields (node, store, clock)."""
    from fabricjobs.clock import ManualClock
    from fabricjobs.config import load_config
    from fabricjobs.node.node import Node
    from fabricjobs.store.sqlite import SqliteStore
    from testkit.rig import write_config

    config = write_config(tmp_path / "c.ini", {"store": {"BACKEND": "sqlite", "SQLITE_PATH": str(tmp_path / "j.db")},
                                               "jobs": {"K2JOBS_POOL_SIZE": pool_size}})
    store = SqliteStore(tmp_path / "j.db")
    clock = ManualClock()
    node = Node(load_config(config), name="a", clock=clock, store=store)
    try:
        node.board.set_lease(clock.monotonic() + 60, clock.monotonic())
        node.executor._launch = lambda *runs: None
        yield node, store, clock
    finally:
        node.board.close(unlink=True)
        store.close()


class StoreWith:
    """``store`` with some of its methods replaced (keyword arguments: name=function)."""

    def __init__(self, store, **methods) -> None:
        self._store, self.__dict__["_methods"] = store, methods

    def __getattr__(self, name):
        return self._methods.get(name) or getattr(self._store, name)
