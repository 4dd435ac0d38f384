"""Which Cassandra hosts a request tries first: the driver's load-balancing policy, with the
hosts that left requests unanswered lately put last. A silently cut-off host keeps its
connections open, so the driver itself would go on sending it a share of every request.
"""

from __future__ import annotations

import logging
import time
from typing import Callable

log = logging.getLogger("fabricjobs.store.cassandra")


class Unanswered:
    """Hosts that let a request time out lately: every query plan tries them last for a
    while. A host cut off by a silent partition (no reset, no refusal: its packets just stop)
    keeps its connections open, so the driver never marks it down; its connection heartbeat
    notices after a minute or so. Until then one request in three (RF 3) waited out the
    request timeout, and a reconcile pass of a dozen requests stalled for a minute
    (tests/test_partitions.py). The first timeout puts a host last for ``PENALTY`` seconds; one
    again soon after its penalty ended doubles it, up to ``MAX_PENALTY``: a host still cut off
    costs one timed-out request per window, not one per request.

    A host beaten by a speculative copy of a request (``slow``) is only put behind the hosts
    that answer, for ``SLOW_PENALTY`` seconds, and ahead of the ones that timed out: on a
    loaded cluster every host is slower than the delay now and then, and demoting each fully
    would leave the cut-off one no further back than the rest.

    A host that answers a request (``answered``) is no longer tried last: on a loaded cluster a
    beat's short timeout (tests/test_partitions.py: 0.25 s) ran out on each host now and then,
    all three ended up last, and the cut-off one was back first in one plan in three."""

    PENALTY = 10.0
    MAX_PENALTY = 80.0
    SLOW_PENALTY = 2.0

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._until: dict[str, float] = {}
        self._penalty: dict[str, float] = {}
        self._slow_until: dict[str, float] = {}
        self._clock = clock

    def timed_out(self, host) -> None:
        name, now = str(host), self._clock()
        until = self._until.get(name)
        if until is not None and until > now:
            return  # already tried last (requests sent before it was)
        penalty = self.PENALTY
        if until is not None and now - until < self._penalty.get(name, self.PENALTY):
            penalty = min(self._penalty.get(name, self.PENALTY) * 2, self.MAX_PENALTY)  # still not answering
        self._penalty[name] = penalty
        self._until[name] = now + penalty
        log.warning("Cassandra host %s left a request unanswered: trying it last for %.0f s", name, penalty)

    def answered(self, host) -> None:
        if self._until and self._until.pop(str(host), None) is not None:
            log.info("Cassandra host %s answers again: no longer tried last", host)

    def slow(self, host) -> None:
        self._slow_until[str(host)] = self._clock() + self.SLOW_PENALTY

    def suspect(self, host) -> bool:
        until = self._until.get(str(host))
        return until is not None and until > self._clock()

    def _rank(self, host, now: float) -> int:
        name = str(host)
        if self._until.get(name, 0.0) > now:
            return 2
        return 1 if self._slow_until.get(name, 0.0) > now else 0

    def order(self, hosts) -> list:
        """``hosts`` (a query plan): answering hosts first, then slow ones, then the ones that
        timed out, each group in the plan's order."""
        hosts = list(hosts)
        if not self._until and not self._slow_until:
            return hosts
        now = self._clock()
        return sorted(hosts, key=lambda h: self._rank(h, now))  # stable: the plan's order within a rank

    def learn(self, exc: BaseException) -> None:
        """Penalize the hosts a client-side timeout names (the driver's OperationTimedOut)."""
        if type(exc).__name__ != "OperationTimedOut":
            return
        hosts = [h for h, e in (getattr(exc, "errors", None) or {}).items() if type(e).__name__ == "OperationTimedOut"
                 or "timeout" in str(e).lower()]
        last = getattr(exc, "last_host", None)
        for host in hosts + ([last] if last is not None else []):
            self.timed_out(host)


def policy_avoiding(child, unanswered: Unanswered):
    """``child`` (a driver load-balancing policy) whose query plans put ``unanswered``'s
    suspects last."""
    from cassandra.policies import LoadBalancingPolicy

    class AvoidUnanswered(LoadBalancingPolicy):
        def populate(self, cluster, hosts):
            child.populate(cluster, hosts)

        def distance(self, host):
            return child.distance(host)

        def make_query_plan(self, working_keyspace=None, query=None):
            return iter(unanswered.order(child.make_query_plan(working_keyspace, query)))

        def check_supported(self):
            child.check_supported()

        def on_up(self, host):
            child.on_up(host)

        def on_down(self, host):
            child.on_down(host)

        def on_add(self, host):
            child.on_add(host)

        def on_remove(self, host):
            child.on_remove(host)

    policy = AvoidUnanswered()
    policy.child = child  # what it orders (TokenAwarePolicy, DCAwareRoundRobinPolicy)
    return policy
