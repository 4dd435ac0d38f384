"""Test kit: the cluster rig (rig.py) that the test suite, the benchmarks and the chaos soak
use to run real node processes on a shared store. Nothing in the daemon imports it."""
