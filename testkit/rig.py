"""The cluster rig: real ``fabricjobs node`` processes on one store, started, stopped, killed,
paused and watched the same way by the tests (tests/harness.py), the benchmarks
(scripts/bench_node.py, scripts/bench.py) and the chaos soak (scripts/chaos.py).

The backend is whatever the config.ini names; the rig only starts processes and reads /proc.
Each node runs in a session (and process group) of its own, so that one signal reaches the node,
its fork server and its workers, and a SIGKILL of the group leaves nothing behind. Waits are on
conditions with deadlines (:func:`wait_for`), never sleeps that hope.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Callable, Iterable, Mapping, Sequence, TypeVar

T = TypeVar("T")


class RigError(AssertionError):
    """Something the rig waited for did not happen. An AssertionError: a test that waited in
    vain has failed, it has not crashed."""


class RigTimeout(RigError):
    """A condition did not come in time."""


class NodeExited(RigError):
    """A node that should be running has exited."""


def wait_for(predicate: Callable[[], T], timeout: float = 15.0, what: str | Callable[[], str] = "condition",
             interval: float = 0.02, *, check: Callable[[], None] | None = None,
             not_yet: tuple[type[BaseException], ...] = ()) -> T:
    """Poll ``predicate`` until it returns a true value and return that value. ``check`` runs
    before each poll and may raise (a node that died). An exception of a ``not_yet`` type from
    ``predicate`` counts as a false value (a store that times out under injected faults); the
    last one is named if the wait runs out."""
    deadline = time.monotonic() + timeout
    last: object = None
    error = ""
    while True:
        if check is not None:
            check()
        try:
            last = predicate()
        except not_yet as exc:
            last, error = None, f" (last error: {exc})"
        if last:
            return last
        if time.monotonic() > deadline:
            desc = what() if callable(what) else what
            raise RigTimeout(f"timed out after {timeout:.1f} s waiting for {desc} (last value: {last!r}){error}")
        time.sleep(interval)


# -- config.ini ------------------------------------------------------------------------------------


def config_text(sections: Mapping[str, Mapping[str, object]]) -> str:
    lines = []
    for section, keys in sections.items():
        lines.append(f"[{section}]")
        lines.extend(f"{k} = {v}" for k, v in keys.items())
        lines.append("")
    return "\n".join(lines)


def write_config(path: Path, sections: Mapping[str, Mapping[str, object]]) -> Path:
    path.write_text(config_text(sections), encoding="utf-8")
    return path


def merged(*layers: Mapping[str, Mapping[str, object]]) -> dict[str, dict[str, object]]:
    """Config sections, later layers' keys over earlier ones'."""
    out: dict[str, dict[str, object]] = {}
    for layer in layers:
        for section, keys in layer.items():
            out.setdefault(section, {}).update(keys)
    return out


# -- processes, from /proc -------------------------------------------------------------------------


def stat_fields(pid: int | str) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (state ppid pgrp ... utime stime ...)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def process_state(pid: int) -> str | None:
    """The process state letter (R, S, T, Z...), None once the process is gone."""
    fields = stat_fields(pid)
    return fields[0] if fields else None


def process_alive(pid: int) -> bool:
    """Whether ``pid`` is a running (or stopped) process, not a zombie: /proc, no signal sent."""
    return process_state(pid) not in (None, "Z", "X")


def group_stats(pgid: int) -> dict[int, list[str]]:
    """pid -> /proc stat fields (as :func:`stat_fields`) of every process in group ``pgid``."""
    out = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = stat_fields(entry)
            if fields is not None and int(fields[2]) == pgid:
                out[int(entry)] = fields
    return out


def _cpu(fields: list[str]) -> float:
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def group_cpu_seconds(pgid: int) -> float:
    """User + system CPU of every live process of group ``pgid`` (node, fork server, workers)."""
    return sum(_cpu(f) for f in group_stats(pgid).values())


def process_cpu_seconds(pid: int) -> float:
    fields = stat_fields(pid)
    return _cpu(fields) if fields else 0.0


def signal_group(pgid: int, sig: int) -> None:
    """``sig`` to every process of group ``pgid``; nothing if the group is gone."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def same_cpu_priority(pid: int) -> None:
    """Give a process started in a session of its own this process's CPU priority. With the
    kernel's autogroup scheduling every session is a CPU group of its own at nice 0, whatever
    the nice value of the process that started it; ./scripts/test runs most tests at a low
    priority so that the tests that assert latency bounds, run alongside, get the CPU when they
    ask for it, and their nodes must stay low too."""
    nice = os.getpriority(os.PRIO_PROCESS, 0)
    if nice <= 0:
        return
    try:
        with open(f"/proc/{pid}/autogroup", "w") as f:  # the whole session: node, fork server, workers
            f.write(str(nice))
    except OSError:
        pass  # no autogroups here: the inherited nice value already applies


def pythonpath_with(directory: Path | str, env: Mapping[str, str] = os.environ) -> str:
    """``env``'s PYTHONPATH with ``directory`` first: for a process that must import from a
    source tree or from a module written into a temporary directory."""
    return os.pathsep.join(filter(None, [str(directory), env.get("PYTHONPATH")]))


#: The ports free_port hands out: below Linux's ephemeral range (32768 up), where no outgoing
#: connection takes one between the check and the server's bind, and below the real
#: Cassandra's (realcassandra/cluster.py).
TEST_PORTS = range(10000, 20000)
_claimed: list[socket.socket] = []  # held open until this process ends


def free_port() -> int:
    """A port of 127.0.0.1 that no other process of the test run is handed, for a server a test
    starts. Each port is claimed by an abstract Unix socket named after it, which this process
    holds until it ends (and the kernel lets go of, however it ends): two pytest workers can
    otherwise be given the same port, and a test whose server failed to bind it then talks to
    the other's."""
    start = random.randrange(len(TEST_PORTS))
    for i in range(len(TEST_PORTS)):
        port = TEST_PORTS[(start + i) % len(TEST_PORTS)]
        claim = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            claim.bind(f"\0fabricjobs-test-port-{port}")
        except OSError:
            claim.close()
            continue  # another process of the run has it
        with socket.socket() as probe:  # and nothing else listens on it
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                claim.close()
                continue
        _claimed.append(claim)
        return port
    raise RigError(f"no free port left in {TEST_PORTS.start}-{TEST_PORTS.stop - 1}")


def scrape_metrics(port: int) -> dict[str, float]:
    """A node's Prometheus metrics: sample name (with labels) -> value."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


# -- nodes -----------------------------------------------------------------------------------------


class NodeProcess:
    """One ``fabricjobs node`` process, the leader of its own process group."""

    def __init__(self, name: str, proc: subprocess.Popen, log_path: Path) -> None:
        self.name = name
        self.proc = proc
        self.log_path = log_path
        self.killed = False  # killed on purpose (a failover): its death is not an error
        self.stopped = False  # SIGSTOPped right now

    @classmethod
    def spawn(cls, name: str, config: Path, log_path: Path, *, cwd: Path, args: Iterable[str] = (),
              env: Mapping[str, str] | None = None, log_level: str | None = None,
              prefix: Sequence[str] = (), main: Sequence[str] = ("-m", "fabricjobs")) -> "NodeProcess":
        """Start ``fabricjobs --config CONFIG node --name NAME ARGS...``, output to ``log_path``;
        ``prefix``: what runs it, e.g. a test host's ``ip netns exec NS`` (netns.Host.command);
        ``main``: what Python runs instead of ``-m fabricjobs`` (a script with a fault injected)."""
        command = [*prefix, sys.executable, *main, "--config", str(config), "node", "--name", name]
        if log_level is not None:
            command += ["--log-level", log_level]
        command += list(args)
        environ = dict(os.environ, PYTHONUNBUFFERED="1")
        environ.update(env or {})
        with open(log_path, "wb") as log_file:
            proc = subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    env=environ, cwd=cwd, start_new_session=True)
        same_cpu_priority(proc.pid)
        return cls(name, proc, log_path)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def signal(self, sig: int) -> None:
        """``sig`` to the node process alone (its workers keep running)."""
        try:
            os.kill(self.proc.pid, sig)
        except ProcessLookupError:
            pass

    def signal_group(self, sig: int) -> None:
        """``sig`` to the node, its fork server and its workers."""
        signal_group(self.proc.pid, sig)

    def kill_group(self) -> None:
        self.signal_group(signal.SIGKILL)

    def pause(self, group: bool = False) -> None:
        (self.signal_group if group else self.signal)(signal.SIGSTOP)
        self.stopped = True

    def resume(self, group: bool = False) -> None:
        (self.signal_group if group else self.signal)(signal.SIGCONT)
        self.stopped = False

    def wait_group_gone(self, timeout: float = 10.0) -> bool:
        """Until no process of the node's group is left (workers die after their node)."""
        deadline = time.monotonic() + timeout
        while group_alive(self.proc.pid):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.02)
        return True

    def end(self, timeout: float = 10.0) -> bool:
        """SIGKILL the group (SIGCONT first if paused: a stopped group would keep zombies) and
        wait until it is gone; whether it went within ``timeout``."""
        if self.stopped:
            self.resume(group=True)
        self.kill_group()
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return False
        return self.wait_group_gone(timeout / 2)


class Rig:
    """Node processes started from one config.ini, their logs in ``tmp``. ``kill_all()``
    leaves no process of theirs behind."""

    def __init__(self, tmp: Path, config_path: Path) -> None:
        self.tmp = tmp
        self.config_path = config_path
        self.nodes: dict[str, NodeProcess] = {}  # name -> its latest process
        self.started: list[NodeProcess] = []  # every process started, restarts included
        self._seq = 0

    def spawn(self, name: str, *, config: Path | None = None, args: Iterable[str] = (),
              env: Mapping[str, str] | None = None, log_level: str | None = None,
              prefix: Sequence[str] = ()) -> NodeProcess:
        """Start node ``name`` (again, after a restart: a new process and log); no wait.
        ``config``: a config.ini of its own for this node (same store)."""
        self._seq += 1
        log_path = self.tmp / f"node-{name}-{self._seq}.log"
        node = NodeProcess.spawn(name, config or self.config_path, log_path, cwd=self.tmp, args=args, env=env,
                                 log_level=log_level, prefix=prefix)
        self.nodes[name] = node
        self.started.append(node)
        return node

    def adopt(self, node: NodeProcess) -> NodeProcess:
        """A node process started by hand (a test's own command): watched and, at the end,
        killed like the ones :meth:`spawn` started."""
        self.nodes[node.name] = node
        self.started.append(node)
        return node

    def wait_started(self, node: NodeProcess, timeout: float = 60.0) -> None:
        """Until ``node`` logged the end of its start-up ("node NAME started", at INFO);
        NodeExited, with its whole log, if it exits first. The deadline is generous: on a real
        Cassandra beside a loaded machine a start-up (connect, schema check, first beat) took
        over 20 s in a fresh-clone run; a start that fails says so at once anyway."""
        def started() -> bool:
            if not node.alive():
                raise NodeExited(f"node {node.name} exited ({node.proc.returncode}):\n{node.log()}")
            return f"node {node.name} started" in node.log()

        wait_for(started, timeout, f"node {node.name} to start")

    def check_nodes(self) -> None:
        """NodeExited, with the end of its log, for a node that should be running and is not."""
        for node in self.nodes.values():
            if not node.killed and not node.alive():
                tail = "\n".join(node.log().splitlines()[-25:])
                raise NodeExited(f"node {node.name} exited with status {node.proc.returncode}; "
                                     f"end of its log:\n{tail}")

    def kill_all(self, timeout: float = 10.0) -> list[NodeProcess]:
        """SIGKILL every node's group and wait for them; the processes that would not go."""
        for node in self.started:
            if node.stopped:
                node.resume(group=True)
            node.kill_group()
        return [node for node in self.started if not node.end(timeout)]

    def cli(self, *args: str, input: str | None = None, timeout: float = 30.0) -> subprocess.CompletedProcess:
        """``fabricjobs --config <this rig's> ARGS...`` in a process of its own."""
        return subprocess.run(
            [sys.executable, "-m", "fabricjobs", "--config", str(self.config_path), *args],
            input=input, capture_output=True, text=True, timeout=timeout, cwd=self.tmp,
        )
