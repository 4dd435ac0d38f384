"""Jobs that misbehave in ways a node must survive (tests/test_fencing.py)."""

import os
import re
import time

from fabricjobs.jobs.context import current_job


def _line(log, text):
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(fd, (text + "\n").encode())
    os.close(fd)


def hog(log: str, n: int = 30):
    """Holds the GIL in one C call for a long time (catastrophic regex backtracking)."""
    job = current_job()
    _line(log, f"{job.node} start {os.getpid()} {time.time()}")
    re.match(r"(a+)+$", "a" * n + "b")
    _line(log, f"{job.node} end {os.getpid()} {time.time()}")


def surrogate():
    """Fails with an exception whose text is not valid UTF-8 (a lone surrogate)."""
    raise ValueError("bad byte \udcff from a decoded file name")


def spawn(pidfile: str, wait: bool = False):
    """Starts a child process (the seed's jobs shell out) and returns at once, or waits."""
    import subprocess

    child = subprocess.Popen(["sleep", "45"])
    with open(pidfile + ".tmp", "w") as f:
        f.write(str(child.pid))
    os.rename(pidfile + ".tmp", pidfile)
    job = current_job()
    while wait and not job.is_aborted():
        time.sleep(0.05)
    return {"child": child.pid}


def shell_out(log: str):
    """Blocks in a child process and never looks at is_aborted() (a seed job shelling out);
    appends "node child-pid" to ``log`` first, so a test can find each run's child."""
    import subprocess

    child = subprocess.Popen(["sleep", "45"])
    _line(log, f"{current_job().node} {child.pid}")
    child.wait()


def shell_out_and_hog(log: str, n: int = 30):
    """Starts a child, then holds the GIL past its lease, so that only the kernel's dead-man
    timer can end its worker: the child must not outlive that worker."""
    import subprocess

    child = subprocess.Popen(["sleep", "45"])
    _line(log, f"{current_job().node} {child.pid}")
    re.match(r"(a+)+$", "a" * n + "b")


def leaves_a_thread(seconds: float = 3600.0):
    """Returns while a thread of its own (not a daemon) prints on, for an hour."""
    import threading

    def ghost():
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            os.write(1, b"ghost line of a run that has ended\n")
            time.sleep(0.1)

    threading.Thread(target=ghost, name="ghost").start()
    return {"worker": os.getpid()}


def changes_its_process():
    """Changes what the next run of its worker would inherit."""
    import sys

    os.chdir("/")
    os.environ["PATH"] = "/nonexistent"
    os.umask(0)
    sys.path.insert(0, "/nonexistent")


def reports_its_process():
    import sys

    mask = os.umask(0o022)
    os.umask(mask)
    return {"cwd": os.getcwd(), "path": os.environ.get("PATH"), "umask": mask, "sys_path_0": sys.path[0]}
