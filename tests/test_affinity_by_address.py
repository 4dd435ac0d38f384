"""The Fabric course's AFFINITY naming a node by IP address, through ``fabricjobs shell`` on two
real nodes."""

from __future__ import annotations

import json
import re

from harness import module_two_nodes

cluster = module_two_nodes("affinitybyad")


def test_affinity_names_a_node_by_ip_address(cluster, tmp_path):
    """The course: AFFINITY is "the node or DC (IP address) where the job can run". A third
    node with [node] ADDRESSES of its own; a job naming one of them runs there, in any of the
    address's spellings; an address no node has leaves the job waiting, with no candidate."""
    config = tmp_path / "local-3.ini"
    text = cluster.config_path.read_text()
    addresses = "ADDRESSES = 10.250.0.3, fd00:250::3\n"
    config.write_text(text.replace("[node]\n", "[node]\n" + addresses, 1) if "[node]\n" in text else text + "\n[node]\n" + addresses)
    node = cluster.start_node("local-3", config=config)
    try:
        r = cluster.shell("-e", "startjob user_job name='Probe.noop' uid='ip4' affinity='10.250.0.3';"
                                "startjob user_job name='Probe.noop' uid='ip6' affinity='{\"Affinity\":[\"FD00:250:0::3\"]}';"
                                "startjob user_job name='Probe.noop' uid='nowhere' affinity='10.250.0.99';"
                                "waitjob user_job 'Probe.noop' with uid='ip4' timeout 20;"
                                "waitjob user_job 'Probe.noop' with uid='ip6' timeout 20;")
        assert r.returncode == 0, r.stderr
        for uid in ("ip4", "ip6"):
            (run,) = json.loads(cluster.shell("--format", "json", "-e", f"jobhistory user_job 'Probe.noop' with uid='{uid}';").stdout)
            assert (run["Node"], run["Result"]) == ("local-3", "OK")
        (waiting,) = json.loads(cluster.shell("--format", "json", "-e", "jobstatus user_job 'Probe.noop' with uid='nowhere';").stdout)
        assert (waiting["Status"], waiting["Ownership Candidates Num"]) == ("WAITING", 0)
        details = cluster.shell("-e", "nodes details;").stdout
        assert re.search(r"node +\| local-3\n(?:.*\n)*?addresses +\| 10\.250\.0\.3, FD00:250::3\n", details), details
        bad = cluster.shell("-e", "startjob user_job name='Probe.noop' uid='bad' affinity='10.250.0.3/24';")
        assert bad.returncode == 1 and "bad affinity name '10.250.0.3/24'" in bad.stderr
    finally:
        cluster.shell("-e", "stopjob user_job name='Probe.noop' uid='nowhere';")
        node.end()
