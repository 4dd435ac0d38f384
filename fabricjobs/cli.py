"""The ``fabricjobs`` command line: the outermost edge, wiring arguments to the layers inside.

    fabricjobs [--config PATH] config          show the effective configuration
    fabricjobs --version
"""

from __future__ import annotations

import argparse
import logging
import sys

from . import __version__
from .config import KEYS, Config, find_config, load_config
from .errors import FabricJobsError


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="fabricjobs", description="Cluster job scheduler with a SQL-like command shell.")
    p.add_argument("--config", metavar="PATH", help="config.ini (default: $FABRICJOBS_CONFIG, else ./config.ini, else built-in defaults)")
    p.add_argument("--version", action="version", version=f"fabricjobs {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.add_parser("config", help="print the effective configuration and exit")
    return p


def load(args: argparse.Namespace) -> Config:
    return load_config(find_config(args.config))


def cmd_config(args: argparse.Namespace) -> int:
    cfg = load(args)
    print(f"# source: {cfg.source or 'built-in defaults'}")
    section = None
    for k in KEYS:
        if k.section != section:
            section = k.section
            print(f"\n[{section}]")
        value = cfg.get(k.section, k.name)
        if isinstance(value, tuple):
            value = ", ".join(value)
        if k.name == "PASSWORD" and value:
            value = "********"
        print(f"{k.name} = {value}")
    return 0


COMMANDS = {"config": cmd_config}


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.command:
        parser.print_help()
        return 2
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
    try:
        return COMMANDS[args.command](args)
    except FabricJobsError as exc:
        print(f"fabricjobs: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # output piped into `head` and the like
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
