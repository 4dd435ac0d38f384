"""fabricjobs: a cluster job scheduler with a SQL-like command shell.

Application code talks to it through :class:`fabricjobs.Client` (imported lazily, so that
``import fabricjobs`` stays cheap for job code running in worker processes).
"""

from __future__ import annotations

__version__ = "0.2.0.dev0"

__all__ = ["Client", "__version__"]


def __getattr__(name: str):
    if name == "Client":
        from .client import Client

        return Client
    raise AttributeError(name)
