"""The metrics a node serves are exactly those its table declares (fabricjobs/node/metrics.py
METRICS), which is also what docs/reference/metrics.md lists."""

from __future__ import annotations

import re
import urllib.request

from fabricjobs.node.metrics import METRICS, Metrics
from testkit.rig import free_port


def test_a_scrape_shows_every_declared_metric_with_its_help_and_no_other():
    port = free_port()
    metrics = Metrics(port, "127.0.0.1", running=lambda: [("USER_JOB", "ANY", 2)], peer_ages=lambda: {"b": 0.5},
                      lease_remaining=lambda: 3.0)
    try:
        metrics.execution("USER_JOB", "OK")
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    finally:
        metrics.close()
    helps = dict(re.findall(r"^# HELP (\S+) (.*)$", text, re.M))
    served = {name.removesuffix("_total") for name in helps if not name.endswith("_created")}
    assert served == {m.name for m in METRICS}
    for m in METRICS:
        assert helps.get(m.exposed, helps.get(m.name)) == m.help
    assert 'fabricjobs_running_jobs{affinity="ANY",type="USER_JOB"} 2.0' in text
    assert 'fabricjobs_executions_total{result="OK",type="USER_JOB"} 1.0' in text
