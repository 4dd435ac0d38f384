"""The daemon: reconcile loop, scheduler, executor, heartbeat (see :mod:`.node`)."""
