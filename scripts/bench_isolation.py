"""`scripts/bench.py isolation`: what a run that misbehaves costs its node
(docs/guides/run-isolation.md).

* End a run that left 50 daemons (each forked twice into a session of its own, holding the
  worker's descriptors): seconds from KILL, and from STOPJOB of a job that ends when asked,
  until the run has ended and the last daemon is gone; with run cgroups and without
  ([jobs] RUN_CGROUPS = OFF).
* Print 1 GiB of short lines ("y"), from a USER_JOB and from a PROCESS job (`yes | head -c`):
  MB/s from the run's start to its end, beside what `yes | head -c 1G | cat` takes here; the
  peak RSS of the node and of every process of its group, and how much the store and the
  node's log grew.

Goals: the run with 50 daemons ends within 2 s of KILL; 1 GiB of short lines ends within 3x
the time `cat` takes; the node's peak RSS < 150 MB; the store grows by at most
MAX_OUTPUT_BYTES + RUN_LOG_MAX_BYTES + 1 MB (its own pages); the node's log by < 64 KB.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

from tabulate import tabulate

from bench_node import BenchError, wait_for
from testkit.rig import process_alive, write_config

GIB = 1 << 30
DAEMONS = 50

JOBS = '''\
"""Jobs that misbehave (written by scripts/bench_isolation.py)."""
import os
import sys
import time

from fabricjobs.jobs.context import current_job


def daemons(pidfile: str, count: int = 50, cooperative: bool = False):
    """Leaves ``count`` daemons behind (double fork, setsid, sleep 300 s), their pids in
    ``pidfile``; then waits for the stop (``cooperative``) or without looking."""
    pids = []
    for _ in range(count):
        r, w = os.pipe()
        child = os.fork()
        if child == 0:
            os.setsid()
            if os.fork() == 0:
                os.write(w, b"%d\\n" % os.getpid())
                time.sleep(300)
            os._exit(0)
        os.waitpid(child, 0)
        os.close(w)
        pids.append(int(os.read(r, 64)))
        os.close(r)
    with open(pidfile + ".tmp", "w") as f:
        f.write("\\n".join(map(str, pids)))
    os.rename(pidfile + ".tmp", pidfile)
    job = current_job()
    while not (cooperative and job.is_aborted()):
        time.sleep(0.01)


def chatter(size: int):
    """Prints ``size`` bytes of "y" lines to stdout, 64 KiB at a write."""
    block = b"y\\n" * 32768
    out = sys.stdout.buffer
    left = size
    while left > 0:
        out.write(block[:left])
        left -= len(block)
    out.flush()
'''

FLOOD = "#!/bin/sh\nyes | head -c \"$1\"\n"


def _prepare(rig, mode: str) -> None:
    """The jobs module, a PROCESS jobs directory and the run cgroups mode in the rig's config."""
    (rig.tmp / "jobs" / "Isolate.py").write_text(JOBS)
    process = rig.tmp / "process"
    process.mkdir()
    (process / "flood.sh").write_text(FLOOD)
    (process / "flood.sh").chmod(0o755)
    rig.settings["jobs"].update({"PROCESS_JOBS_DIR": str(process), "RUN_CGROUPS": mode, "STOP_GRACE_SEC": 10})
    write_config(rig.config_path, rig.settings)


def _end_with_daemons(rig, node, how: str) -> dict:
    """Start the daemons job, end it by ``how`` (kill or stop); seconds until the run ended
    and until the last daemon was gone."""
    uid = f"{how}-{time.monotonic_ns()}"
    pidfile = rig.tmp / f"{uid}.pids"
    args = json.dumps({"pidfile": str(pidfile), "count": DAEMONS, "cooperative": how == "stop"})
    client = rig.client
    client.fetch(f"startjob user_job name='Isolate.daemons' uid='{uid}' args='{args}';")
    pids = wait_for(lambda: pidfile.exists() and [int(p) for p in pidfile.read_text().split()], 60,
                    "the job's daemons", check=rig.check_nodes)
    if how == "kill":
        task = wait_for(lambda: next((r["task"] for r in client.fetch("ps;")
                                      if r["description"].endswith("Isolate.daemons")), None), 20,
                        "the run in PS", check=rig.check_nodes)
        began = time.monotonic()
        client.fetch(f"kill '{node.name}' {task};")
    else:
        began = time.monotonic()
        client.fetch(f"stopjob user_job name='Isolate.daemons' uid='{uid}';")
    ended = gone = None
    deadline = began + 60
    while (ended is None or gone is None) and time.monotonic() < deadline:
        now = time.monotonic()
        row = client.store.get(_key(uid))
        if ended is None and (row is None or row.archived or row.tries >= 1 and row.status.value != "IN_PROCESS"):
            ended = now - began
        if gone is None and not any(process_alive(p) for p in pids):
            gone = now - began
        time.sleep(0.005)
    if how == "kill":
        client.fetch(f"stopjob user_job name='Isolate.daemons' uid='{uid}';")  # (its retry)
    left = [p for p in pids if process_alive(p)]
    return {"ended_s": ended, "daemons_gone_s": gone, "daemons": len(pids), "left": len(left)}


def _key(uid: str):
    from fabricjobs.model import JobKey

    return JobKey("USER_JOB", "Isolate.daemons", uid)


def _peak_kb(pid: int) -> int:
    try:
        return int(re.search(r"VmHWM:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text()).group(1))
    except (OSError, AttributeError):
        return 0


def _store_bytes(rig) -> int:
    db = Path(rig.settings["store"]["SQLITE_PATH"])
    return sum(p.stat().st_size for p in db.parent.glob(db.name + "*"))


def _flood(rig, node, kind: str) -> dict:
    """1 GiB of short lines from one run of ``kind``: MB/s, peak RSS, store and log growth."""
    from fabricjobs.worker.reaper import descendants

    uid = f"flood-{kind}-{time.monotonic_ns()}"
    statement = (f"startjob user_job name='Isolate.chatter' uid='{uid}' args='{{\"size\": {GIB}}}';" if kind == "USER_JOB"
                 else f"startjob process name='flood.sh' uid='{uid}' args='{{\"0\": \"{GIB}\"}}';")
    name = "Isolate.chatter" if kind == "USER_JOB" else "flood.sh"
    store0, log0 = _store_bytes(rig), node.log_path.stat().st_size
    rig.client.fetch(statement)
    from fabricjobs.model import JobKey

    key = JobKey(kind, name, uid)
    row = wait_for(lambda: (lambda r: r if r is not None and r.archived else None)(rig.client.store.get(key)), 300,
                   f"the {kind} that prints 1 GiB", check=rig.check_nodes)
    if row.status.value != "PROCESSED":
        raise BenchError(f"the {kind} that prints 1 GiB ended {row.status.value}: {row.error_msg}")
    took = (row.end_time - row.start_time).total_seconds()
    time.sleep(1.5)  # the node's last live-log flush of the run
    group = [node.pid, *descendants(node.pid)]
    return {"seconds": took, "mb_per_s": GIB / 1e6 / took, "node_peak_rss_mb": _peak_kb(node.pid) / 1024,
            "group_peak_rss_mb": max(_peak_kb(p) for p in group) / 1024,
            "store_growth_kb": (_store_bytes(rig) - store0) / 1024, "log_growth_kb": (node.log_path.stat().st_size - log0) / 1024}


def _cat_seconds() -> float:
    began = time.monotonic()
    subprocess.run(f"yes | head -c {GIB} | cat > /dev/null", shell=True, check=True)
    return time.monotonic() - began


def cmd_isolation(args, backend, print_goals, verdict, progress) -> dict:
    out: dict = {"modes": {}}
    for mode in ("AUTO", "OFF"):
        rig = backend.rig({}, label=f"bench-isolation-{mode.lower()}", keep=args.keep)
        try:
            _prepare(rig, mode)
            node = rig.start_node("iso")
            rig.wait_ready(["iso"])
            row = next(r for r in rig.client.store.nodes() if r.name == "iso")
            isolated = json.loads(row.info or "{}").get("isolation", "?")  # (NODES DETAILS shows it)
            progress(f"isolation ({mode}): {isolated}")
            result: dict = {"isolated_by": isolated}
            for how in ("kill", "stop"):
                progress(f"isolation ({mode}): a run with {DAEMONS} daemons, ended by {how.upper()}")
                result[how] = _end_with_daemons(rig, node, how)
            if mode == "AUTO":
                for kind in ("USER_JOB", "PROCESS"):
                    progress(f"isolation: 1 GiB of short lines from a {kind}")
                    result[kind] = _flood(rig, node, kind)
            out["modes"][mode] = result
        finally:
            rig.close()
    out["cat_s"] = _cat_seconds()
    _report(args, out, print_goals, verdict)
    return out


def _report(args, out: dict, print_goals, verdict) -> None:
    print(f"\n== isolation: a run with {DAEMONS} daemons ended; 1 GiB of short lines printed (one node, SQLite)")
    rows = []
    for mode, r in out["modes"].items():
        for how in ("kill", "stop"):
            e = r[how]
            rows.append([mode, how.upper(), _s(e["ended_s"]), _s(e["daemons_gone_s"]), f"{e['left']} of {e['daemons']}"])
    print(tabulate(rows, headers=["RUN_CGROUPS", "ended by", "run ended (s)", "last daemon gone (s)", "daemons left"],
                   disable_numparse=True))
    for mode, r in out["modes"].items():
        print(f"  {mode}: runs isolated by {r['isolated_by']}")
    auto = out["modes"]["AUTO"]
    rows = [[kind, f"{auto[kind]['seconds']:.2f}", f"{auto[kind]['mb_per_s']:,.0f}", f"{auto[kind]['node_peak_rss_mb']:.0f}",
             f"{auto[kind]['group_peak_rss_mb']:.0f}", f"{auto[kind]['store_growth_kb']:,.0f}",
             f"{auto[kind]['log_growth_kb']:,.1f}"] for kind in ("USER_JOB", "PROCESS")]
    rows.append(["(yes | head -c 1G | cat)", f"{out['cat_s']:.2f}", f"{GIB / 1e6 / out['cat_s']:,.0f}", "", "", "", ""])
    print(tabulate(rows, headers=["1 GiB from", "run (s)", "MB/s", "node peak RSS MB", "peak RSS of any process MB",
                                  "store growth KB", "node log growth KB"], disable_numparse=True))
    kills = [r["kill"]["daemons_gone_s"] for r in out["modes"].values()]
    floods = [auto[k]["seconds"] for k in ("USER_JOB", "PROCESS")]
    goals = [
        [f"a run with {DAEMONS} daemons ends within 2 s of KILL", f"{max(k or 99 for k in kills):.2f} s",
         verdict(all(k is not None and k < 2 for k in kills))],
        ["1 GiB of short lines within 3x cat", f"{max(floods):.2f} s (cat {out['cat_s']:.2f} s)",
         verdict(max(floods) <= 3 * out["cat_s"])],
        ["node peak RSS < 150 MB", f"{max(auto[k]['node_peak_rss_mb'] for k in ('USER_JOB', 'PROCESS')):.0f} MB",
         verdict(all(auto[k]["node_peak_rss_mb"] < 150 for k in ("USER_JOB", "PROCESS")))],
        ["store grows by < MAX_OUTPUT_BYTES + 1 MB", f"{max(auto[k]['store_growth_kb'] for k in ('USER_JOB', 'PROCESS')):,.0f} KB",
         verdict(all(auto[k]["store_growth_kb"] < 5 * 1024 for k in ("USER_JOB", "PROCESS")))],
        ["node log grows by < 64 KB", f"{max(auto[k]['log_growth_kb'] for k in ('USER_JOB', 'PROCESS')):.1f} KB",
         verdict(all(auto[k]["log_growth_kb"] < 64 for k in ("USER_JOB", "PROCESS")))],
    ]
    print_goals(args, goals)
    out["goals"] = {g[0]: {"measured": g[1], "met": g[2] == "met"} for g in goals}


def _s(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"
