"""What a node's parts tell each other without holding each other.

The reconcile loop, the scheduler, the executor and the heartbeat are built one after the
other, each from the parts it uses; none is handed the Node. What flows back (wake the loop,
run a full pass, publish the running tasks, a job ended here) and the two states every part
reads (fenced: no lease; stopping: shutting down) live here, built first.
"""

from __future__ import annotations

import threading


class Signals:
    def __init__(self) -> None:
        self.wakeup = threading.Event()  # the loop: run a claim pass now
        self.full = threading.Event()  # ... a full pass
        self.stop = threading.Event()  # the loop ends
        self.tasks_changed = threading.Event()  # the heartbeat: publish the running tasks soon
        self.parents_changed = threading.Event()  # a job ended here: blocked children may be free
        self.fenced = False  # the lease lapsed, or another instance took the name: act on nothing
        self.stopping = False  # shutting down: no new claims

    def wake(self) -> None:
        """Run a claim pass now (a slot freed, a job came due)."""
        self.wakeup.set()

    def wake_full(self) -> None:
        """Run a full pass now (a shell changed something)."""
        self.full.set()
        self.wakeup.set()

    def publish_tasks(self) -> None:
        self.tasks_changed.set()

    def job_final(self, row: object = None) -> None:
        """A job here reached a final status: its children (if any) may be free now."""
        self.parents_changed.set()
        self.wakeup.set()
