"""`fabricjobs node`, except that the process SIGSTOPs itself once, right after its first claim
is committed and before the run is handed to a worker: a pause at the worst moment.

On SQLite it first takes the store's writer mutex, so that no other thread of the node (the
heartbeat, say) is frozen inside a write transaction holding the file's one write lock, which
would stall every other node (a known limit of the embedded store, not what this is about)."""

import os
import signal
import sys

if __name__ == "__main__":
    from fabricjobs.node import executor

    original = executor.Executor._launch
    state = {"paused": False}

    def launch(self, *runs):
        if runs and not state["paused"]:
            state["paused"] = True
            writer = getattr(self.store, "_writer", None)
            held = writer is not None and writer.acquire(timeout=5)
            try:
                os.kill(os.getpid(), signal.SIGSTOP)
            finally:
                if held:
                    writer.release()
        return original(self, *runs)

    executor.Executor._launch = launch
    from fabricjobs.cli import main

    sys.exit(main(sys.argv[1:]))
