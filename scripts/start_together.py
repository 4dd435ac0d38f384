#!/usr/bin/env python3
"""Rounds of fabricjobs nodes started at the same instant on an empty keyspace of a multi-node
Apache Cassandra (docs/explanation/cassandra-queue.md, "Starting together").

    .venv/bin/python scripts/start_together.py [--rounds 10] [--nodes 3] [--cassandra-nodes 3]

Starts a Cassandra of --cassandra-nodes nodes on loopback (testkit/realcassandra; or
--cassandra-hosts for a running one), then for each round: a new keyspace name, --nodes
`fabricjobs node` processes launched together against it (RF = the Cassandra nodes, QUORUM /
SERIAL), and checks that every node came up, that every Cassandra node has the same schema
(every table with one id, the fixed one), and that 20 jobs ran once each. Prints a line per
round and the count of good rounds; exits 1 if any round failed. The suite runs one such round
(tests/test_partitions.py).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # fabricjobs and the test kit (testkit/)

from fabricjobs.client import Client  # noqa: E402
from fabricjobs.model import JobKey, Status  # noqa: E402
from fabricjobs.store.cassandra.schema import table_id  # noqa: E402
from testkit.rig import Rig, RigError, wait_for, write_config  # noqa: E402

JOBS = 20


def schema_seen(hosts: list[str], port: int, keyspace: str) -> dict[str, tuple]:
    """Per Cassandra node: its schema version and its tables' ids in ``keyspace``."""
    from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile
    from cassandra.policies import WhiteListRoundRobinPolicy

    seen = {}
    for host in hosts:
        profile = ExecutionProfile(load_balancing_policy=WhiteListRoundRobinPolicy([host]))
        with Cluster([host], port=port, protocol_version=5, schema_metadata_enabled=False, token_metadata_enabled=False,
                     execution_profiles={EXEC_PROFILE_DEFAULT: profile}) as c:
            s = c.connect()
            version = s.execute("SELECT schema_version FROM system.local").one().schema_version
            ids = {r.table_name: r.id for r in s.execute(
                "SELECT table_name, id FROM system_schema.tables WHERE keyspace_name = %s", (keyspace,))}
            seen[host] = (version, ids)
    return seen


def one_round(n: int, hosts: list[str], port: int, nodes: int, tmp: Path) -> str | None:
    """One round; None if it went right, else what went wrong."""
    keyspace = "fj_" + uuid.uuid4().hex[:12]
    where = tmp / f"round{n}"
    where.mkdir()
    log = where / "runs.jsonl"
    config = write_config(where / "config.ini", {
        "jobs": {"USER_JOBS_DIR": str(ROOT / "tests" / "jobs"), "RECONCILE_INTERVAL_MS": 200},
        "heartbeat": {"FABRIC_HEARTBEAT_INTERVAL_MS": 500, "FABRIC_HEARTBEAT_MISS": 8},
        "store": {"BACKEND": "cassandra"},
        "cassandra": {"HOSTS": ",".join(hosts), "PORT": port, "KEYSPACE": keyspace, "PROTOCOL_VERSION": 5,
                      "REPLICATION": f"SimpleStrategy:{len(hosts)}", "CONSISTENCY": "QUORUM"},
    })
    rig = Rig(where, config)
    try:
        launched = [rig.spawn(f"n{i + 1}") for i in range(nodes)]
        for node in launched:
            try:
                rig.wait_started(node, 180)
            except RigError as exc:
                return f"node {node.name} did not come up: {str(exc)[-600:]}"
        seen = schema_seen(hosts, port, keyspace)
        versions = {v for v, _ in seen.values()}
        if len(versions) != 1:
            return f"the Cassandra nodes disagree on the schema: {versions}"
        ids = [i for _, i in seen.values()]
        if any(i != ids[0] for i in ids) or any(ids[0][t] != table_id(keyspace, t) for t in ids[0]):
            return f"tables with other ids than the fixed ones: {ids}"
        with Client.from_config(config) as client:
            args = json.dumps({"log": str(log)})
            keys = [JobKey("USER_JOB", "Probe.record", f"j{i:02d}") for i in range(JOBS)]
            client.fetch("".join(f"startjob user_job name='Probe.record' uid='{k.uid}' args='{args}';" for k in keys))
            wait_for(lambda: all((j := client.store.get(k)) is not None and j.status is Status.PROCESSED for k in keys),
                     120, "every job to be PROCESSED", check=rig.check_nodes)
        ran = sorted(json.loads(line)["key"] for line in log.read_text().splitlines() if line.strip())
        if ran != sorted(str(k) for k in keys):
            return f"jobs did not run once each: {len(ran)} runs of {JOBS} jobs"
        return None
    except RigError as exc:
        return str(exc)[-600:]
    finally:
        rig.kill_all()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--nodes", type=int, default=3, help="fabricjobs nodes per round")
    p.add_argument("--cassandra-nodes", type=int, default=3)
    p.add_argument("--cassandra-hosts", help="host,host:port of a running cluster instead of starting one")
    args = p.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="fj-start-together-"))
    cassandra = None
    if args.cassandra_hosts:
        hosts = [h.split(":")[0] for h in args.cassandra_hosts.split(",")]
        port = int(args.cassandra_hosts.split(",")[0].partition(":")[2] or 9042)
    else:
        from testkit.realcassandra import CassandraCluster, available

        if (why := available()) is not None:
            print(f"no Apache Cassandra here: {why}")
            return 2
        began = time.monotonic()
        cassandra = CassandraCluster(tmp / "cassandra", nodes=args.cassandra_nodes, heap="768m").start()
        hosts, port = cassandra.hosts, cassandra.port
        print(f"Cassandra: {args.cassandra_nodes} nodes at {', '.join(hosts)}:{port}, ready in "
              f"{time.monotonic() - began:.0f} s")
    good = 0
    try:
        for n in range(1, args.rounds + 1):
            began = time.monotonic()
            problem = one_round(n, hosts, port, args.nodes, tmp)
            took = time.monotonic() - began
            good += problem is None
            print(f"round {n}: {'ok' if problem is None else 'FAILED: ' + problem} ({took:.0f} s)", flush=True)
    finally:
        if cassandra is not None:
            cassandra.stop(wipe=True)
    print(f"{good} of {args.rounds} rounds: all {args.nodes} nodes up on an empty keyspace, one schema, "
          f"{JOBS} jobs run once")
    return 0 if good == args.rounds else 1


if __name__ == "__main__":
    sys.exit(main())
