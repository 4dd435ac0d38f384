"""Heartbeats, leases and liveness verdicts: a lease that lapses during a slow write, the tasks
a beat publishes, reads of the nodes table that stall or fail, and when a silent node may be
judged dead (docs/explanation/nodes.md)."""

from __future__ import annotations

import pytest

from fabricjobs.worker.board import Board


def test_a_lease_that_runs_out_during_a_slow_heartbeat_write_counts_as_a_lapse(store):
    """The node's runs saw the lease end while the write hung; the renewal must raise the
    generation (so runs claimed before end) and say so, even though the write succeeded.
    The beat is 5 s (a write may take 5 s): time is the manual clock's, and on a loaded
    machine a real Cassandra LWT once took longer than the 0.25 s a 0.2 s beat allows."""
    from fabricjobs.clock import ManualClock
    from fabricjobs.node.heartbeat import Heartbeat

    clock, board, lapses = ManualClock(), Board.create(1), []
    beat = Heartbeat(store, board, clock, name="n1", dc="dc1", interval=5.0, miss=5, info=dict, tasks=list,
                     running=lambda: 0, on_fenced=lambda: None, on_recovered=lambda: None,
                     on_lapse=lapses.append, on_displaced=lambda row: None)
    try:
        assert beat.beat_once() and board.generation() == 0 and lapses == []
        write = store.write_node
        store.write_node = lambda row, timeout=None: (clock.advance(beat.lease + 0.1), write(row))
        assert beat.beat_once()  # the write succeeded, but only after the lease ran out
        assert board.generation() == 1 and lapses == [1]
    finally:
        board.close(unlink=True)


def test_changed_tasks_go_out_at_once_after_a_quiet_spell_and_once_a_second_while_they_churn(store):
    """PS shows a job that just started on a quiet node; but a node whose tasks change all the
    time (thousands of short runs a second) must not write its row ten times a second: on one
    SQLite file those writes were 40 % of all write transactions. A due beat is never held
    back by a pending publication."""
    import threading

    from fabricjobs.clock import ManualClock
    from fabricjobs.node.heartbeat import Heartbeat

    clock, board, poked, writes = ManualClock(), Board.create(1), threading.Event(), []
    beat = Heartbeat(store, board, clock, name="n1", dc="dc1", interval=5.0, miss=12, info=dict, tasks=list,
                     running=lambda: 0, on_fenced=lambda: None, on_recovered=lambda: None,
                     on_lapse=lambda generation: None, on_displaced=lambda row: None, poked=poked)
    write = store.write_node
    store.write_node = lambda row, timeout=None: (writes.append(round(clock.monotonic(), 2)), write(row))[1]
    try:
        start = clock.monotonic()
        assert beat.beat_once()
        next_beat = start + 5.0
        clock.advance(2.0)
        poked.set()  # a run started on a quiet node
        next_beat = beat._tick(next_beat)
        assert writes == [round(start, 2), round(start + 2.0, 2)]
        for _ in range(62):  # 3.1 s of runs starting and ending every 50 ms, across the due beat
            clock.advance(0.05)
            poked.set()
            next_beat = beat._tick(next_beat)
        churn = [t - start for t in writes[2:]]
        assert 3 <= len(churn) <= 4 and churn[0] >= 2.95, churn  # not 30 writes
        assert all(b - a >= 0.95 for a, b in zip(churn, churn[1:-1])), churn
        assert 5.0 <= churn[-1] <= 5.1 and next_beat - start == pytest.approx(churn[-1] + 5.0), churn  # the beat
        clock.advance(1.5)  # quiet again
        poked.set()
        beat._tick(next_beat)
        assert len(writes) == 2 + len(churn) + 1 and writes[-1] == round(clock.monotonic(), 2)  # at once
    finally:
        store.write_node = write
        board.close(unlink=True)


def test_a_beat_brought_back_by_a_stalled_read_counts_from_when_the_read_returned(store_config, store):
    """Found by the chaos soak: an observer paused (SIGSTOP) while its read of the nodes was in
    flight got a fresh beat back, counted it from before the pause, saw the same beat again
    10 ms later, and took over a live node's running jobs. A beat counts from the read's
    return; a node whose beat really stands still for the threshold is still judged dead."""
    import json

    from fabricjobs.clock import ManualClock
    from fabricjobs.config import load_config
    from fabricjobs.node.node import Node
    from fabricjobs.store.base import NodeRow

    clock = ManualClock()
    observer = Node(load_config(store_config), name="b", clock=clock, store=store)
    try:
        store.write_node(NodeRow(name="a", incarnation="i1", dc="DC1", host="h", pid=1, started=clock.now(),
                                 version="x", beat=7, info=json.dumps({"heartbeat_ms": 200, "miss": 5})))
        read = store.nodes
        store.nodes = lambda timeout=None: (clock.advance(2.4), read())[1]  # the observer is paused mid-read
        observer.reconciler._observe()
        store.nodes = read
        clock.advance(0.01)
        observer.reconciler._observe()  # a has not beaten again in these 10 ms
        assert not observer.liveness.is_dead("a") and observer.liveness.dead() == []
        clock.advance(1.0)
        observer.reconciler._observe()  # now a's beat has stood still for 1.01 s > 0.2 s x 5
        assert observer.liveness.is_dead("a")
    finally:
        observer.board.close(unlink=True)


def test_a_row_missing_from_a_stalled_read_counts_as_missing_from_when_the_read_returned(store_config, store):
    """The mirror case: a row absent from a read that stalled in flight (deleted, and the node
    not yet re-written by its next beat) was absent only as of the read's return."""
    import json

    from fabricjobs.clock import ManualClock
    from fabricjobs.config import load_config
    from fabricjobs.node.node import Node
    from fabricjobs.store.base import NodeRow

    clock = ManualClock()
    observer = Node(load_config(store_config), name="b", clock=clock, store=store)
    try:
        store.write_node(NodeRow(name="a", incarnation="i1", dc="DC1", host="h", pid=1, started=clock.now(),
                                 version="x", beat=7, info=json.dumps({"heartbeat_ms": 400, "miss": 5})))
        observer.reconciler._observe()
        store.delete_node(next(r for r in store.nodes() if r.name == "a"))
        read = store.nodes
        store.nodes = lambda timeout=None: (clock.advance(2.4), read())[1]  # paused mid-read
        observer.reconciler._observe()
        store.nodes = read
        assert not observer.liveness.is_dead("a")
        clock.advance(0.01)
        observer.reconciler._observe()
        assert not observer.liveness.is_dead("a")  # missing for 10 ms, not 2.41 s
        clock.advance(1.5)
        observer.reconciler._observe()
        assert not observer.liveness.is_dead("a")  # judged by its own threshold (0.4 s x 5 = 2 s)
        clock.advance(0.6)
        observer.reconciler._observe()
        assert observer.liveness.is_dead("a")
    finally:
        observer.board.close(unlink=True)


def test_the_next_verdict_is_when_a_silent_node_may_first_be_judged_dead():
    """The node's loop reads the nodes again at that moment instead of at its next periodic
    pass, so a crash is noticed one read after the threshold (docs/explanation/nodes.md), not a period later."""
    import json

    from fabricjobs.clock import ManualClock
    from fabricjobs.node.liveness import Liveness
    from fabricjobs.store.base import NodeRow

    clock = ManualClock()
    live = Liveness("me", clock, default_threshold=3.0)
    assert live.next_verdict() is None  # nobody watched

    def row(beat: int, state: str = "running") -> NodeRow:
        return NodeRow(name="a", incarnation="i1", dc="DC1", host="h", pid=1, started=clock.now(), version="x",
                       beat=beat, state=state, info=json.dumps({"heartbeat_ms": 200, "miss": 5}))

    t0 = clock.monotonic()
    live.observe([row(1)])
    assert live.next_verdict() == pytest.approx(t0 + 1.0)  # a's own threshold: 200 ms x 5
    clock.advance(0.6)
    live.observe([row(2)])  # it beat: the verdict moves with it
    assert live.next_verdict() == pytest.approx(t0 + 1.6)
    clock.advance(1.0)
    live.observe([row(2)])  # read exactly at the verdict time: not yet dead
    assert not live.is_dead("a") and live.next_verdict() == pytest.approx(t0 + 1.6)
    clock.advance(0.002)
    live.observe([row(2)])  # the read the loop makes just after it
    assert live.is_dead("a") and live.next_verdict() is None  # judged: nothing left to wait for
    assert live.dead() == ["a"]
    live.observe([row(3)])
    assert not live.is_dead("a")
    live.observe([row(4, state="stopped")])
    assert live.is_dead("a") and live.next_verdict() is None  # a clean stop is dead at once
    live.is_dead("ghost")  # an owner with no row: judged after the default threshold
    assert live.next_verdict() == pytest.approx(clock.monotonic() + 3.0)


def test_a_read_of_some_nodes_rows_judges_those_nodes_only():
    """When the whole-table read fails (on Cassandra, a range read waiting out a cut-off
    replica), the node reads the rows of the nodes it watches one by one. Those are judged on
    that read; a node it did not ask about is judged on nothing newer than the last whole read,
    and a name asked with no row counts as gone, as in a whole read."""
    import json

    from fabricjobs.clock import ManualClock
    from fabricjobs.node.liveness import Liveness
    from fabricjobs.store.base import NodeRow

    clock = ManualClock()
    live = Liveness("me", clock, default_threshold=1.0)

    def row(name: str, beat: int) -> NodeRow:
        return NodeRow(name=name, incarnation="i1", dc="DC1", host="h", pid=1, started=clock.now(), version="x",
                       beat=beat, state="running", info=json.dumps({"heartbeat_ms": 200, "miss": 5}))

    live.observe([row("me", 1), row("a", 1), row("b", 1), row("c", 1)])
    assert live.watched() == ["a", "b", "c"]
    for beat in (2, 3, 4):  # whole reads fail from here; a and c are read alone, b is not asked
        clock.advance(0.6)
        live.observe([row("a", 1)], asked=["a", "c"])  # a stands still; c has no row any more
    assert live.is_dead("a") and live.is_dead("c")  # both covered by reads 1.8 s apart
    assert not live.is_dead("b")  # no read since the whole one has shown b's beat: not judged
    assert not live.is_dead("newcomer")  # an owner never read: not judged on reads that did not ask
    live.observe([row("a", 2)], asked=["a"])
    assert not live.is_dead("a")  # it beat again
    clock.advance(0.5)
    live.observe([row("a", 2), row("b", 1)])  # a whole read again: b's beat stood still 2.3 s
    assert live.is_dead("b") and not live.is_dead("a")
    assert live.is_dead("newcomer")  # no row in the whole reads 2.3 s apart: longer than the default threshold


def test_while_the_whole_read_fails_the_pass_judges_each_node_whose_row_it_read_in_time():
    """The reconcile pass's fallback: the rows of the watched nodes, one at a time, within one
    deadline (the whole read's timeout). A node whose row read failed or came too late is not
    judged on it; the others are; and the whole read is not tried again for 5 s."""
    import dataclasses
    import json

    from fabricjobs.clock import ManualClock
    from fabricjobs.config import load_config
    from fabricjobs.errors import StoreError
    from fabricjobs.node.liveness import Liveness
    from fabricjobs.node.parts import ReconcileParts
    from fabricjobs.node.reconcile import Reconciler
    from fabricjobs.node.settings import NodeSettings
    from fabricjobs.store.base import NodeRow

    clock = ManualClock()
    settings = dataclasses.replace(NodeSettings.from_config(load_config(None)), heartbeat_interval=0.2,
                                   heartbeat_miss=5)  # dead after 1 s; the whole read's timeout: 1 s

    def row(name: str) -> NodeRow:
        return NodeRow(name=name, incarnation="i1", dc="DC1", host="h", pid=1, started=clock.now(), version="x",
                       beat=1, state="running", info=json.dumps({"heartbeat_ms": 200, "miss": 5}))

    class Store:  # on Cassandra: a range read waiting out a cut-off replica; single rows mostly answer
        whole_reads = 0
        asked: list = []

        def nodes(self, timeout=None):
            self.whole_reads += 1
            raise StoreError("Cassandra: OperationTimedOut (the whole read)")

        def node(self, name, timeout=None):
            self.asked.append((name, timeout))
            clock.advance({"a": 0.1, "b": 0.6, "c": 0.2, "d": 0.2}[name])
            if name == "b":
                raise StoreError("Cassandra: OperationTimedOut (b's row)")
            return row(name)

    store = Store()
    live = Liveness("me", clock, default_threshold=1.0)
    live.observe([row("a"), row("b"), row("c"), row("d"), row("e"), row("me")])  # the last whole read
    parts = ReconcileParts(store=store, executor=None, scheduler=None, liveness=live, affinity=None, board=None,
                           clock=clock, metrics=None, signals=None, doorbell=None)
    reconciler = Reconciler("me", settings, parts)
    clock.advance(1.5)  # nobody has beaten since
    assert reconciler._observe()
    assert [n for n, _ in store.asked] == ["a", "b", "c", "d"]  # e: out of time (1.1 s of the 1 s gone)
    assert [t for _, t in store.asked] == pytest.approx([1.0, 0.9, 0.3, 0.1])  # each gets what is left
    assert live.is_dead("a") and live.is_dead("c") and live.is_dead("d")  # read: beat unchanged for 1.5 s
    assert not live.is_dead("b") and not live.is_dead("e")  # not read: judged on nothing newer than before
    store.asked.clear()
    clock.advance(1.0)
    assert reconciler._observe() and store.whole_reads == 1  # within 5 s: straight to the rows
    clock.advance(5.0)
    reconciler._observe()
    assert store.whole_reads == 2  # and once more after


def test_the_loop_looks_again_at_the_verdict_time_but_never_chases_a_past_one():
    """Found in review: while reads of the nodes failed, the verdict time stayed in the past
    and the loop ran full passes back to back, without its back-off after an error."""
    from fabricjobs.node.node import _VERDICT_GAP, next_full_pass

    assert next_full_pass(10.0, None, 5.0) == 10.0
    assert next_full_pass(10.0, 7.0, 5.0) == 7.0 + _VERDICT_GAP  # a peer may be dead at 7: look then
    assert next_full_pass(10.0, 12.0, 5.0) == 10.0  # the periodic pass comes first anyway
    assert next_full_pass(10.0, 4.0, 5.0) == 10.0  # past: its read failed; no busy loop
