"""Imported by the fork server alone (worker/pool.py preloads it): the fork server becomes the
reaper of what a worker leaves behind when the kernel ends it (see reaper.py), so the node can
still find and end those processes; it watches for its node's end and then ends all of them
(node_watch.py); and it loads once what every worker would otherwise load
on its first run (the entry-point table), for each fork to inherit. (Not in worker/process.py,
which the node imports too: there it cost every node's start-up 0.1-0.2 s.)"""

import signal
import warnings

from ..jobs.registry import _entry_points
from . import node_watch
from .reaper import become_subreaper

become_subreaper()
# A closed terminal hangs up the node's whole process group: the node stops cleanly (its runs
# given their grace), which the fork server and its workers (which inherit this) must outlive.
signal.signal(signal.SIGHUP, signal.SIG_IGN)
node_watch.start()  # when the node is gone, so is everything it started
# Such orphans end as the fork server's children, which its loop reaps and warns about (it
# expects only workers): they are expected here.
warnings.filterwarnings("ignore", message="forkserver: waitpid returned unexpected pid")
_entry_points()
