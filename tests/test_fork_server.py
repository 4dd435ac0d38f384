"""A node's fork server and resource tracker are forks of the node (worker/zygote.py), not
fresh interpreters that import fabricjobs again, and they go when the node dies."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from fabricjobs.model import Status
from fabricjobs.worker.reaper import descendants, parent_of
from harness import wait_for

pytestmark = pytest.mark.slow


def _cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")[:-1]
    except OSError:
        return []


def _children(pid: int) -> list[int]:
    return [p for p in descendants(pid) if parent_of(p) == pid]


def test_the_fork_server_is_a_fork_of_the_node_runs_its_jobs_and_ends_with_it(cluster):
    node = cluster.start_node("node-a")
    cluster.fetch("startjob user_job name='Probe.echo' uid='z1' args='{\"value\": 1}';")
    job = cluster.wait_job("USER_JOB", "Probe.echo", "z1", lambda j: j.archived)
    assert job.status is Status.PROCESSED

    helpers = _children(node.pid)
    # A Python started afresh by multiprocessing would show its own command line
    # ("-c from multiprocessing.forkserver import main; ..."); a fork shows the node's.
    assert len(helpers) == 2, [(p, _cmdline(p)) for p in helpers]
    assert all(_cmdline(p) == _cmdline(node.pid) for p in helpers), [_cmdline(p) for p in helpers]
    server = [p for p in helpers if _children(p)]  # the fork server: the workers (idle for 60 s) are its children
    assert len(server) == 1 and set(descendants(node.pid)) - set(helpers) == set(descendants(server[0]))

    everything = descendants(node.pid)
    os.kill(node.pid, signal.SIGKILL)  # the node alone: its helpers and workers must see it go
    wait_for(lambda: not any(_cmdline(p) for p in everything), 15,
             lambda: f"the node's helpers and workers to exit: {[p for p in everything if _cmdline(p)]} still run")


_PROBE = r"""
import json, os, sys
from multiprocessing import util
from fabricjobs.worker.zygote import run_forking

r, w = os.pipe()
stray = os.open(os.devnull, os.O_RDONLY)  # a descriptor of the parent's the helper must not keep
command = ("import json, os, sys; "
           "os.write(%d, json.dumps([sys.argv, os.getppid(), sorted(int(f) for f in os.listdir('/proc/self/fd'))]).encode()); "
           "sys.exit(3)" % w)
pids = []
assert run_forking(lambda: pids.append(util.spawnv_passfds(sys.executable, [sys.executable, "-c", command, "a", "b"], [w])))
os.close(w)
seen = json.loads(os.read(r, 65536))
_, status = os.waitpid(pids[0], 0)
print(json.dumps({"argv": seen[0], "parent": seen[1], "me": os.getpid(), "fds": seen[2], "w": w, "stray": stray,
                  "code": os.waitstatus_to_exitcode(status)}))
"""


def test_a_helper_forked_at_the_seam_gets_the_command_its_argv_and_only_its_descriptors():
    """worker/zygote.py's seam on its own, in a fresh one-thread process: the command after
    ``-c`` runs in a fork (its parent is the caller), with the arguments after it as its argv
    (Python 3.14 appends the parent's argv there), descriptors 0-2 and those passed only, and
    its exit code is the command's."""
    out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout)
    assert seen["argv"] == ["-c", "a", "b"] and seen["parent"] == seen["me"] and seen["code"] == 3
    # /proc/self/fd lists the descriptor listdir itself opened as well: one more than kept.
    kept = [fd for fd in seen["fds"] if fd in (0, 1, 2, seen["w"])]
    assert kept == sorted({0, 1, 2, seen["w"]}) and seen["stray"] not in seen["fds"] and len(seen["fds"]) == 5, seen


_NESTED = r"""
import multiprocessing, sys
from multiprocessing import forkserver
from fabricjobs.worker.zygote import run_forking


def job():
    # What a user job may do in its worker: start a process the forkserver way.
    child = multiprocessing.get_context("forkserver").Process(target=print, args=("nested",))
    child.start()
    child.join(20)
    sys.exit(child.exitcode)


if __name__ == "__main__":
    assert run_forking(forkserver.ensure_running)
    worker = multiprocessing.get_context("forkserver").Process(target=job)
    worker.start()
    worker.join(30)
    print("worker exit", worker.exitcode)
    if worker.exitcode is None:
        worker.kill()
"""


def test_a_worker_of_a_forked_fork_server_can_start_a_forkserver_process_itself(tmp_path):
    """The fork server is forked while multiprocessing holds its start lock: a worker that
    inherited it held would wait on it for ever as soon as its job started a process the
    forkserver way (a ProcessPoolExecutor with that context, say)."""
    script = tmp_path / "nested.py"
    script.write_text(_NESTED)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=90)
    assert out.returncode == 0 and "worker exit 0" in out.stdout, (out.stdout, out.stderr[-2000:])
    assert "nested" in out.stdout


def test_a_fork_server_whose_node_exited_before_its_watch_began_ends_too():
    """A node refused at start (an unsafe jobs directory) exits right after forking its fork
    server, which may only then start watching: it must watch the node it was forked from, not
    its parent by then (init), or it waited for ever, holding the node's stdout and stderr (a
    shell's `$(fabricjobs node)` never returned; tests/test_job_trust.py timed out on it)."""
    script = (
        "import os, time\n"
        "from fabricjobs.worker import node_watch\n"
        "node_watch.NODE = os.getpid()\n"  # as pool.start_fork_server sets it before the fork
        "if os.fork():\n"
        "    os._exit(2)\n"  # the node, refused
        "while os.getppid() == node_watch.NODE:\n"
        "    time.sleep(0.01)\n"
        "node_watch.start()\n"  # the fork server's preload, late
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=20)
    assert done.returncode == 2 and done.stderr == ""
