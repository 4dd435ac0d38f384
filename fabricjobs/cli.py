"""The ``fabricjobs`` command line: the outermost edge, wiring arguments to the layers inside.

    fabricjobs [--config PATH] node [--name NAME] [--node-id PATH]   run a node in the foreground
    fabricjobs [--config PATH] shell [-e CMDS | -f FILE] [--format table|json|csv]
                                                                     the command shell
    fabricjobs [--config PATH] ps [--all] [--node NODE]              tasks running on a node / every node
    fabricjobs [--config PATH] kill NODE TASK                        end a task on a node
    fabricjobs [--config PATH] nodes                                 the cluster's nodes
    fabricjobs [--config PATH] web [--bind HOST:PORT] [--tls-cert PEM --tls-key PEM]
                                                                     serve the HTTP API
    fabricjobs [--config PATH] token create NAME --role ROLE | list | revoke NAME
                                                                     the HTTP API's tokens
    fabricjobs [--config PATH] config                                show the effective configuration
    fabricjobs [--config PATH] cassandra-schema                      the CQL of the Cassandra schema
    fabricjobs [--config PATH] export-jobs                           the job definitions as statements
    fabricjobs init DIR                                              a new node directory
    fabricjobs [--config PATH] --version                             release, Python, store and schema
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys

from .config import KEYS, Config, find_config, load_config, parse_name
from .errors import CommandError, ConfigError, FabricJobsError, StoreUnavailable, message_of, not_utf8


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="fabricjobs", description="Cluster job scheduler with a SQL-like command shell.")
    p.add_argument("--config", metavar="PATH", help="config.ini (default: $FABRICJOBS_CONFIG, else ./config.ini, else built-in defaults)")
    p.add_argument("--version", action="store_true",
                   help="print the release, the Python, the configured store and its schema version, and exit")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.add_parser("config", help="print the effective configuration and exit")
    init = sub.add_parser("init", help="write a new node directory: a commented config.ini, node.id, a jobs folder "
                                       "with an example job")
    init.add_argument("directory", metavar="DIR", help="made if missing; files already there are never overwritten")
    init.add_argument("--examples", action="store_true",
                      help="also write the example jobs the documentation uses (Customer.py, Files.py, echoArg.sh) "
                           "and a directory for listeners to watch")

    shell = sub.add_parser("shell", help="the command shell (interactive on a terminal; else runs -e/-f/stdin)")
    src = shell.add_mutually_exclusive_group()
    src.add_argument("-e", dest="commands", metavar="CMDS", help="run these commands and exit")
    src.add_argument("-f", dest="file", metavar="FILE", help="run the commands in FILE and exit")
    shell.add_argument("--format", choices=["table", "json", "csv"], default="table", help="output format")
    shell.add_argument("--continue-on-error", action="store_true", help="keep running a script after a failed statement")
    shell.add_argument("--node", help="the node PS shows (default: the one node running on this host, else all)")
    shell.add_argument("--started-jobs", metavar="FILE",
                       help="with -e/-f/stdin: append to FILE a JSON line (type, name, uid) per job a "
                            "STARTJOB or RESUMEJOB started")

    ps = sub.add_parser("ps", help="tasks running on this host's node (--all: every live node)")
    ps.add_argument("--all", action="store_true", help="every live node")
    ps.add_argument("--node", help="this node (default: the one node running on this host, else all)")
    ps.add_argument("--format", choices=["table", "json", "csv"], default="table")
    kill = sub.add_parser("kill", help="end a task on a node (it counts as a failed try)")
    kill.add_argument("node", help="the node's name (NODES, PS ALL)")
    kill.add_argument("task", type=int, help="the task's number on that node (PS)")
    sub.add_parser("export-jobs", help="print the calendars and live jobs as statements that make them again "
                                       "(a backup of the job definitions: fabricjobs shell -f restores it)")
    sub.add_parser("cassandra-schema", help="print the CQL that creates the Cassandra keyspace and schema (for "
                                            "CREATE_SCHEMA = false; needs [cassandra] REPLICATION)")
    nodes = sub.add_parser("nodes", help="the cluster's nodes: state, last beat, running, capacity")
    nodes.add_argument("--format", choices=["table", "json", "csv"], default="table")

    web = sub.add_parser("web", help="serve the HTTP API and the web console (docs/guides/http-api.md); loopback unless --bind says otherwise")
    web.add_argument("--bind", metavar="HOST:PORT", help="default: [web] BIND (127.0.0.1:9470)")
    web.add_argument("--tls-cert", metavar="PEM", help="serve HTTPS with this certificate (default: [web] TLS_CERT_FILE)")
    web.add_argument("--tls-key", metavar="PEM", help="the certificate's private key, without a passphrase "
                                                      "(default: [web] TLS_KEY_FILE); a pair that cannot be loaded "
                                                      "exits 2 before anything is served")
    web.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    token = sub.add_parser("token", help="API tokens of fabricjobs web: create, list, revoke")
    actions = token.add_subparsers(dest="action", metavar="ACTION", required=True)
    create = actions.add_parser("create", help="print a new token once; only its hash is stored")
    create.add_argument("name")
    create.add_argument("--role", required=True, choices=["viewer", "operator", "admin"])
    actions.add_parser("list", help="the tokens' names, roles and creation times")
    revoke = actions.add_parser("revoke", help="forget a token; it is refused from the next request on")
    revoke.add_argument("name")

    node = sub.add_parser("node", help="run a node in the foreground (SIGTERM / Ctrl-C stops it cleanly)")
    node.add_argument("--name", help="node id (default: [node] NAME, else the host name)")
    node.add_argument("--node-id", metavar="PATH", help="node.id file (default: [node] NODE_ID_FILE)")
    node.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    node.add_argument("--log-format", default=None, choices=["text", "json", "fabric"],
                      help="json: one object per line with node, job key and epoch; fabric: Fabric's lines, with "
                           "[LID...] (default: [node] LOG_FORMAT)")
    node.add_argument("--clock-offset", type=float, default=0.0, metavar="SECONDS",
                      help="run this node's wall clock ahead (or behind) by SECONDS: a testing aid for clock skew")
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


def cmd_init(args: argparse.Namespace) -> int:
    from .scaffold import init_directory

    import shlex

    written = init_directory(args.directory, examples=args.examples)
    config = shlex.quote(str(written[0]))  # (commands to paste: a directory may hold a space or a quote)
    print(f"fabricjobs: wrote {', '.join(str(p) for p in written)}")
    print("next:")
    print(f"  fabricjobs --config {config} node")
    print(f"  fabricjobs --config {config} shell -e \"startjob user_job name='Hello.hello' args='{{\\\"who\\\": \\\"you\\\"}}';\"")
    return 0


def cmd_node(args: argparse.Namespace) -> int:
    from .clock import SystemClock
    from .config import load_node_id
    from .node.node import Node
    from .worker.pool import start_fork_server

    from .logs import setup_logging
    from .sdnotify import notify

    # Workers are forked from it: before any thread, and before the config (credentials
    # included) is read, so that no worker holds it. See worker/zygote.py.
    start_fork_server()
    cfg = load(args)
    if args.name is not None:  # (checked as [node] NAME is: a job's AFFINITY must be able to name it)
        try:
            args.name = parse_name(args.name)
            if not args.name:
                raise ValueError("it is empty")
        except ValueError as exc:
            raise ConfigError(f"--name: {exc}") from None
    log_format = args.log_format or cfg.get("node", "LOG_FORMAT").lower()
    setup_logging(args.log_level.upper(), log_format, args.name or cfg.node_name)
    if args.node_id and not os.path.exists(args.node_id):  # (a missing [node] NODE_ID_FILE means ANY only)
        raise ConfigError(f"--node-id: no such file {args.node_id!r}")
    node_id = load_node_id(args.node_id) if args.node_id else None
    node = Node(cfg, name=args.name, node_id=node_id, clock=SystemClock(offset=args.clock_offset),
                log_format=log_format)
    node.install_signal_handlers()
    node.start()  # its first heartbeat is written when this returns
    notify("READY=1", f"STATUS=node {node.name} running ({cfg.store_backend} store)", f"MAINPID={os.getpid()}")
    _tune_gc()
    node.run()
    return 0


def _tune_gc() -> None:
    """A node's garbage is almost all freed by reference counting: its start-up objects
    (modules, config, parts) live as long as it does, and a run leaves no reference cycle. Out
    of the cyclic collector's way with them (gc.freeze), and collect young objects every
    10,000 allocations rather than 700: one node draining 5,000 runs made 120 collections,
    0.12 s of its CPU; now 3, 0.02 s."""
    import gc

    gc.freeze()
    gc.set_threshold(10_000, 10, 10)


def cmd_shell(args: argparse.Namespace) -> int:
    from .client import Client
    from .schedule import resolve_zone
    from .shell.script import run_text

    cfg = load(args)
    from .store import open_store

    client = Client(open_store(cfg), cfg, owns_store=True)
    client.session.node = args.node
    zone = resolve_zone(cfg.get("node", "TIME_ZONE") or None)
    try:
        if args.commands is not None:
            text = args.commands
        elif args.file is not None:
            try:
                text = open(args.file, encoding="utf-8-sig").read()  # (a BOM, as some editors write, is no statement)
            except OSError as exc:
                print(f"fabricjobs: cannot read {args.file}: {exc.strerror}", file=sys.stderr)
                return 2
            except UnicodeDecodeError as exc:
                print(f"fabricjobs: cannot read {args.file}: {not_utf8(exc)}", file=sys.stderr)
                return 2
        elif not sys.stdin.isatty():
            text = sys.stdin.read().removeprefix("\ufeff")
        else:
            from .shell.repl import run_repl

            return run_repl(client, fmt=args.format, zone=zone)
        try:
            record = open(args.started_jobs, "a", encoding="utf-8") if args.started_jobs else contextlib.nullcontext()
        except OSError as exc:
            print(f"fabricjobs: cannot write {args.started_jobs}: {exc.strerror}", file=sys.stderr)
            return 2
        with record as started:
            return run_text(client, text, sys.stdout, sys.stderr, fmt=args.format,
                            continue_on_error=args.continue_on_error, zone=zone, started=started)
    finally:
        client.close()


def _one_command(args: argparse.Namespace, command, fmt: str = "table") -> int:
    """Run one typed command (ops shortcuts: ps, kill, nodes) and print its result."""
    from .client import Client
    from .schedule import resolve_zone
    from .shell.output import render
    from .store import open_store

    cfg = load(args)
    client = Client(open_store(cfg), cfg, owns_store=True)
    client.session.node = getattr(args, "node_filter", None)
    try:
        result = client.execute(command)
    except CommandError as exc:  # as in the shell: one line, status 1 (2 is for usage and config)
        print(f"fabricjobs: {message_of(exc)}", file=sys.stderr)
        return 1
    finally:
        client.close()
    print(render(result, fmt, zone=resolve_zone(cfg.get("node", "TIME_ZONE") or None)))
    return 0


def cmd_ps(args: argparse.Namespace) -> int:
    from .commands.statements import Ps

    args.node_filter = args.node
    return _one_command(args, Ps(all=args.all), args.format)


def cmd_kill(args: argparse.Namespace) -> int:
    from .commands.statements import Kill

    return _one_command(args, Kill(node=args.node, task=args.task))


def cmd_nodes(args: argparse.Namespace) -> int:
    from .commands.statements import Nodes

    return _one_command(args, Nodes(), args.format)


def cmd_web(args: argparse.Namespace) -> int:
    from .web.server import ListenError, options, serve

    cfg = load(args)
    try:
        serve(cfg, options(cfg, args.bind, args.tls_cert, args.tls_key, args.log_level))
    except ListenError as exc:
        print(f"fabricjobs web: {exc}", file=sys.stderr)
        return 1
    return 0


def cmd_token(args: argparse.Namespace) -> int:
    from .web.tokens import Role, TokenFile

    tokens = TokenFile(load(args).get("web", "TOKENS_FILE"))
    if args.action == "create":
        token = tokens.create(args.name, Role(args.role))
        print(token)
        print(f"fabricjobs: token {args.name!r} ({args.role}) stored as a hash in {tokens.path}; "
              "it is shown only this once", file=sys.stderr)
    elif args.action == "list":
        from tabulate import tabulate

        rows = [(t.name, t.role.value, t.created) for t in tokens.entries()]
        print(tabulate(rows, headers=("name", "role", "created"), tablefmt="psql") if rows else "(no tokens)")
    elif not tokens.revoke(args.name):
        print(f"fabricjobs: no token named {args.name!r} in {tokens.path}", file=sys.stderr)
        return 1
    else:
        print(f"token {args.name!r} revoked")
    return 0


def cmd_export_jobs(args: argparse.Namespace) -> int:
    from .export import export_script
    from .store import open_store

    store = open_store(load(args))
    try:
        sys.stdout.write(export_script(store))
    finally:
        store.close()
    return 0


def cmd_cassandra_schema(args: argparse.Namespace) -> int:
    from .store.cassandra import schema_cql

    cfg = load(args)
    replication = cfg.get("cassandra", "REPLICATION")
    if not replication.strip():
        raise ConfigError("cassandra-schema prints the CREATE KEYSPACE statement too, so it needs [cassandra] "
                          "REPLICATION in the config it reads (e.g. REPLICATION = NetworkTopologyStrategy:DC1=3; "
                          "the keyspace's replication when it exists already)")
    print(schema_cql(cfg.get("cassandra", "KEYSPACE"), replication))
    return 0


COMMANDS = {
    "cassandra-schema": cmd_cassandra_schema, "export-jobs": cmd_export_jobs,
    "config": cmd_config, "init": cmd_init, "node": cmd_node, "shell": cmd_shell, "ps": cmd_ps, "kill": cmd_kill, "nodes": cmd_nodes,
    "web": cmd_web, "token": cmd_token,
}


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.command and not args.version:
        parser.print_help()
        return 2
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
    service = args.command in ("node", "web")  # (a service logs; a user's command speaks on the terminal)
    if not service:
        from .logs import divert_driver_logs

        divert_driver_logs()
    try:
        if args.version:
            from .about import version_text

            print(version_text(load(args)))
            return 0
        return COMMANDS[args.command](args)
    except StoreUnavailable as exc:  # it may answer again: a command that failed, not a refusal
        print(f"fabricjobs: {message_of(exc)}", file=sys.stderr)
        return 1
    except FabricJobsError as exc:
        print(f"fabricjobs: {message_of(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # output piped into `head` and the like
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as exc:
        if service:
            raise  # a service's traceback belongs in its log (its stderr)
        from .shell.script import report_internal_error

        report_internal_error(exc, sys.stderr, f"fabricjobs {args.command or '--version'}")
        return 1
