"""Imported by the fork server alone (worker/pool.py preloads it): the fork server becomes the
reaper of what a worker leaves behind when the kernel ends it (see reaper.py), so the node can
still find and end those processes."""

import warnings

from .reaper import become_subreaper

become_subreaper()
# Such orphans end as the fork server's children, which its loop reaps and warns about (it
# expects only workers): they are expected here.
warnings.filterwarnings("ignore", message="forkserver: waitpid returned unexpected pid")
