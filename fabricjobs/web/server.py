"""``fabricjobs web``: the API served by uvicorn, on loopback unless told otherwise.

uvicorn serves HTTPS itself when given a certificate and key (``--tls-cert``/``--tls-key`` or
``[web] TLS_CERT_FILE``/``TLS_KEY_FILE``); otherwise it speaks plain HTTP, for loopback or a
TLS-terminating proxy in front. Its access log shows method, path and status, never headers,
so tokens do not reach the log.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import sys
from dataclasses import dataclass

from ..config import Config, parse_bind
from ..errors import ConfigError

log = logging.getLogger("fabricjobs.web")

#: Server threads for requests (uvicorn's default pool has 40): a long-poll holds one for up to
#: a minute, so a few dozen waiting clients must not starve the others.
THREADS = 100


@dataclass(frozen=True)
class ServeOptions:
    bind: str  # HOST:PORT
    tls_cert: str = ""
    tls_key: str = ""
    log_level: str = "info"


def options(config: Config, bind: str | None, tls_cert: str | None, tls_key: str | None,
            log_level: str = "info") -> ServeOptions:
    """The command line over config.ini; a bad bind or half a TLS pair is a ConfigError."""
    chosen = bind or config.get("web", "BIND")
    try:
        parse_bind(chosen)
    except ValueError as exc:
        raise ConfigError(f"--bind: {exc}") from None
    cert = tls_cert if tls_cert is not None else config.get("web", "TLS_CERT_FILE")
    key = tls_key if tls_key is not None else config.get("web", "TLS_KEY_FILE")
    if bool(cert) != bool(key):
        raise ConfigError("HTTPS needs both a certificate and its key (--tls-cert and --tls-key, "
                          "or [web] TLS_CERT_FILE and TLS_KEY_FILE)")
    if cert:
        _check_tls_pair(cert, key)
    return ServeOptions(chosen, cert, key, log_level)


def _check_tls_pair(cert: str, key: str) -> None:
    """Load the pair as the server will, before anything is announced: a file that is missing,
    unreadable, not PEM, or a key that does not match is a ConfigError (one line, exit 2),
    not a failure of the server after it said where it serves. A key under a passphrase is
    refused rather than asked for (no one may be at a terminal)."""
    def no_passphrase() -> bytes:
        raise ConfigError(f"the TLS key {key} is encrypted: give a key without a passphrase")

    try:
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(cert, key, password=no_passphrase)
    except OSError as exc:
        if isinstance(exc, ssl.SSLError):
            reason = exc.reason or "not a PEM certificate and key"
            raise ConfigError(f"cannot use the TLS certificate {cert} with the key {key}: {reason} (both must be "
                              "PEM files, the key the certificate's own)") from None
        raise ConfigError(f"cannot read the TLS certificate or key ({cert}, {key}): "
                          f"{exc.strerror or exc}") from None


class ListenError(Exception):
    """The address cannot be listened on (in use, not this host's): the command failed, and
    may succeed once the address is free (exit status 1, docs/reference/cli.md)."""


def listen(host: str, port: int) -> socket.socket:
    """The server's socket, bound before anything is announced or opened: uvicorn binds its
    own only once serving starts, and ends the process with a status of its own on failure."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET  # (as uvicorn chooses)
    sock = None
    try:
        sock = socket.socket(family, socket.SOCK_STREAM)  # (fails where there is no IPv6)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        return sock
    except OSError as exc:
        if sock is not None:
            sock.close()
        shown = f"[{host}]" if ":" in host else host
        raise ListenError(f"cannot listen on {shown}:{port}: {exc.strerror or exc}") from None


def clear_text_warning(host: str, tls: bool) -> str | None:
    """What to say when tokens and session cookies would cross a network in clear: plain
    HTTP on an address that is not loopback."""
    if tls or _loopback(host):
        return None
    return (f"serving plain HTTP on {host}, which is not a loopback address: API tokens and console sessions "
            "cross the network in clear; give --tls-cert and --tls-key, or bind 127.0.0.1 behind a TLS proxy")


def _loopback(host: str) -> bool:
    import ipaddress

    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name: where it leads is not known here


def serve(config: Config, opts: ServeOptions) -> None:
    """Open the store and serve until SIGINT or SIGTERM."""
    import anyio.to_thread
    import uvicorn

    from ..store import open_store
    from .app import Api, KeepSegments, create_app
    from .tokens import TokenFile

    host, port = parse_bind(opts.bind)
    log.setLevel(opts.log_level.upper())  # its INFO lines (who changed what: audit.py) beside uvicorn's
    sock = listen(host, port)
    try:
        store = open_store(config)
    except BaseException:
        sock.close()
        raise
    api = Api(store, config, TokenFile(config.get("web", "TOKENS_FILE")))
    fastapi_app = create_app(api)
    fastapi_app.state.live.start()  # the console's shared view samples the queue from the start
    app = KeepSegments(fastapi_app)

    async def more_threads() -> None:
        anyio.to_thread.current_default_thread_limiter().total_tokens = THREADS

    server = uvicorn.Server(uvicorn.Config(
        app, host=host, port=port, log_level=opts.log_level, proxy_headers=False, server_header=False,
        ssl_certfile=opts.tls_cert or None, ssl_keyfile=opts.tls_key or None, lifespan="off",
    ))
    scheme = "https" if opts.tls_cert else "http"
    shown = f"[{host}]" if ":" in host else host
    print(f"fabricjobs web: console {scheme}://{shown}:{port}/, API {scheme}://{shown}:{port}/api/v1 "
          f"(tokens: {api.tokens.path})", file=sys.stderr, flush=True)
    warning = clear_text_warning(host, bool(opts.tls_cert))
    if warning:
        print(f"fabricjobs web: warning: {warning}", file=sys.stderr, flush=True)
        log.warning("%s", warning)

    async def main() -> None:
        await more_threads()
        await server.serve(sockets=[sock])

    try:
        asyncio.run(main())
    finally:
        fastapi_app.state.live.stop()
        store.close()
        sock.close()
