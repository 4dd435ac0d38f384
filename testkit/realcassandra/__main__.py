"""Command line of the real-Cassandra runner (scripts/cassandra runs it with the project's venv).

    start [--nodes N] [--dcs D] [--dir DIR] ...
                                        start a fresh cluster; when ready, the last line on stdout
                                        is HOSTS=<ip>[,<ip>...] PORT=<port>
    stop [--dir DIR] [--wipe]           stop what start started (by pid, from DIR/cluster.json)
    status [--dir DIR]                  one line per node (DC, state, pid, RSS), then HOSTS=... PORT=...
    start-node I | stop-node I | restart-node I | kill-node I [--signal KILL|STOP|CONT]
    nodetool [--dir DIR] I ARGS...      nodetool against node I (options before I)
    resolve [--version V]               fetch the jars with Maven (once); print their directory

I is a node's 0-based index in HOSTS, or its address. Progress goes to stderr.

Data centres: one, "datacenter1" (what a stock node calls its DC), unless --dcs D: then node i
is in DC "dc<i % D + 1>" (--nodes 3 --dcs 2: dc1 = nodes 0 and 2, dc2 = node 1), each node's
cassandra-rackdc.properties says so (GossipingPropertyFileSnitch), the first node of each DC is
a seed, and start prints one DC=<dc>:<ip>[,<ip>...] line per DC before the HOSTS= line. A
keyspace on it: NetworkTopologyStrategy with a factor per DC, e.g. dc1=1, dc2=1.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import time
from pathlib import Path

from . import DEFAULT_VERSION, CassandraCluster, CassandraError, resolve

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_DIR = ROOT / ".run" / "cassandra"


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _ready_line(c: CassandraCluster) -> str:
    return f"HOSTS={','.join(c.hosts)} PORT={c.port}"


def _node(c: CassandraCluster, which: str) -> int:
    if which in c.hosts:
        return c.hosts.index(which)
    try:
        i = int(which)
    except ValueError:
        raise CassandraError(f"no node {which!r}: give an index 0..{len(c.hosts) - 1} "
                             f"or one of {', '.join(c.hosts)}") from None
    if not 0 <= i < len(c.hosts):
        raise CassandraError(f"no node {i}: the indices are 0..{len(c.hosts) - 1}")
    return i


def _signal(name: str) -> signal.Signals:
    name = name.upper()
    try:
        return signal.Signals[name if name.startswith("SIG") else "SIG" + name]
    except KeyError:
        raise CassandraError(f"no signal {name!r}") from None


def _mb(n: int | None) -> str:
    return "-" if n is None else f"{n / 2**20:.0f} MB"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="scripts/cassandra", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--dir", type=Path, default=DEFAULT_DIR,
                        help=f"the cluster's directory (default {DEFAULT_DIR})")
    p = sub.add_parser("start", parents=[common], help="start a fresh cluster")
    p.add_argument("--nodes", type=int, default=1)
    p.add_argument("--dcs", type=int, default=1,
                   help="data centres, nodes dealt round-robin: node i in dc<i %% D + 1> "
                        "(default 1: every node in datacenter1)")
    p.add_argument("--version", default=DEFAULT_VERSION)
    p.add_argument("--port", type=int, help="CQL port (default: a free one)")
    p.add_argument("--storage-port", type=int, help="inter-node port (default: a free one)")
    p.add_argument("--first-address", default="127.0.0.1")
    p.add_argument("--tombstone-warn", type=int)
    p.add_argument("--tombstone-failure", type=int)
    p.add_argument("--auth", action="store_true",
                   help="PasswordAuthenticator + CassandraAuthorizer (user cassandra/cassandra)")
    p.add_argument("--paxos", choices=("v1", "v2"), default="v2")
    p.add_argument("--heap", default="768m")
    p.add_argument("--jvm-opt", action="append", default=[], metavar="OPTION",
                   help="an extra JVM option (repeatable): --jvm-opt=-XX:TieredStopAtLevel=1")
    p.add_argument("--unsafe-system", action="store_true",
                   help="faster DDL, but a SIGKILLed node may forget recent schema changes")
    p.add_argument("--timeout", type=float, default=300.0)
    p = sub.add_parser("stop", parents=[common], help="stop the cluster started in DIR")
    p.add_argument("--timeout", type=float, default=60.0)
    p.add_argument("--wipe", action="store_true", help="also delete DIR")
    sub.add_parser("status", parents=[common], help="the nodes' states")
    for name in ("start-node", "stop-node", "restart-node"):
        p = sub.add_parser(name, parents=[common])
        p.add_argument("node")
        p.add_argument("--timeout", type=float, default=180.0)
    p = sub.add_parser("kill-node", parents=[common])
    p.add_argument("node")
    p.add_argument("--signal", default="KILL", help="KILL (default), STOP, CONT, TERM, ...")
    p = sub.add_parser("nodetool", parents=[common])
    p.add_argument("node")
    p.add_argument("args", nargs=argparse.REMAINDER)
    p = sub.add_parser("resolve")
    p.add_argument("--version", default=DEFAULT_VERSION)
    args = ap.parse_args(argv)
    if args.cmd == "start" and not 1 <= args.dcs <= args.nodes:
        ap.error(f"--dcs {args.dcs}: from 1 to --nodes ({args.nodes}), each DC needs a node")
    logging.basicConfig(level=logging.ERROR)  # the driver's reconnection chatter is expected

    try:
        if args.cmd == "resolve":
            print(resolve(args.version))
            return 0
        if args.cmd == "start":
            c = CassandraCluster(
                args.dir, args.nodes, first_address=args.first_address, native_port=args.port,
                storage_port=args.storage_port, tombstone_warn=args.tombstone_warn,
                tombstone_failure=args.tombstone_failure, authenticator=args.auth,
                paxos_variant=args.paxos, heap=args.heap, version=args.version,
                jvm_options=args.jvm_opt, unsafe_system=args.unsafe_system, dcs=args.dcs)
            _say(f"resolving Cassandra {args.version} with Maven ...")
            resolve(args.version)
            _say(f"starting {args.nodes} node(s) in {c.dir}"
                 + (f", data centres {', '.join(c.datacenters())}" if args.dcs > 1 else "") + " ...")
            t0 = time.monotonic()
            c.start(timeout=args.timeout)
            _say(f"ready after {time.monotonic() - t0:.1f} s; logs: {c.dir}/node*/logs/system.log")
            if args.dcs > 1:
                for dc in c.datacenters():
                    print(f"DC={dc}:{','.join(c.dc_hosts(dc))}")
            print(_ready_line(c), flush=True)
            return 0
        c = CassandraCluster.attach(args.dir)
        if args.cmd == "stop":
            c.stop(timeout=args.timeout, wipe=args.wipe)
            _say(f"stopped the cluster in {args.dir}" + (" and deleted it" if args.wipe else ""))
        elif args.cmd == "status":
            for i, host in enumerate(c.hosts):
                print(f"node {i} {host} {c.datacenter(i)} {c.state(i)} pid={c.pid(i) or '-'} "
                      f"rss={_mb(c.rss(i))}")
            print(_ready_line(c))
            return 0 if all(c.state(i) == "running" for i in range(len(c.hosts))) else 3
        elif args.cmd == "start-node":
            c.start_node(_node(c, args.node), timeout=args.timeout)
        elif args.cmd == "stop-node":
            c.stop_node(_node(c, args.node), timeout=args.timeout)
        elif args.cmd == "restart-node":
            i = _node(c, args.node)
            c.stop_node(i)
            c.start_node(i, timeout=args.timeout)
        elif args.cmd == "kill-node":
            c.kill_node(_node(c, args.node), _signal(args.signal))
        elif args.cmd == "nodetool":
            sys.stdout.write(c.nodetool(_node(c, args.node), *args.args))
    except CassandraError as e:
        _say(f"scripts/cassandra {args.cmd}: {e}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
