"""Native protocol v4 framing and message bodies, server side. Uses the driver's
``cassandra.protocol`` read/write helpers; the driver's message classes are one-directional
(requests encode, responses decode), so responses are written here."""

from __future__ import annotations

import io
import struct

from cassandra.protocol import (read_binary_longstring, read_binary_string, read_byte, read_int,
                                read_longstring, read_short, read_string, read_stringlist, read_stringmap,
                                write_int, write_short, write_string, write_stringmultimap)

from .engine import QueryOptions, Rows, SchemaChange, SetKeyspace, Void
from .errors import CqlError, ProtocolError
from .values import UNSET, write_type_option

VERSION = 4
HEADER = struct.Struct(">BBhBi")
# opcodes
ERROR, STARTUP, READY, AUTHENTICATE, OPTIONS, SUPPORTED, QUERY, RESULT, PREPARE, EXECUTE, REGISTER = (
    0x00, 0x01, 0x02, 0x03, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0A, 0x0B)
BATCH, AUTH_RESPONSE, AUTH_SUCCESS = 0x0D, 0x0F, 0x10
OPCODE_NAMES = {STARTUP: "STARTUP", OPTIONS: "OPTIONS", QUERY: "QUERY", PREPARE: "PREPARE", EXECUTE: "EXECUTE",
                REGISTER: "REGISTER", BATCH: "BATCH", AUTH_RESPONSE: "AUTH_RESPONSE"}
COMPRESSED = 0x01
# query flags
F_VALUES, F_SKIP_META, F_PAGE_SIZE, F_PAGING_STATE, F_SERIAL, F_TIMESTAMP, F_NAMES = 0x01, 0x02, 0x04, 0x08, 0x10, 0x20, 0x40
# rows metadata flags
M_GLOBAL, M_HAS_MORE, M_NO_METADATA = 0x0001, 0x0002, 0x0004


def recv_exact(sock, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise EOFError
        buf += chunk
    return bytes(buf)


def read_frame(sock):
    """Returns (version, flags, stream, opcode, body)."""
    version, flags, stream, opcode, length = HEADER.unpack(recv_exact(sock, HEADER.size))
    if length < 0 or length > 256 * 1024 * 1024:
        raise ProtocolError(f"Invalid frame body length {length}")
    return version, flags, stream, opcode, recv_exact(sock, length) if length else b""


def frame(stream: int, opcode: int, body: bytes, version: int = VERSION) -> bytes:
    return HEADER.pack(0x80 | version, 0, stream, opcode, len(body)) + body


# ---- request bodies -----------------------------------------------------------------------

def read_value(f):
    n = read_int(f)
    if n == -1:
        return None
    if n == -2:
        return UNSET
    if n < -2:
        raise ProtocolError(f"Invalid value length {n}")
    return f.read(n)


def read_query_params(f) -> QueryOptions:
    opts = QueryOptions(consistency=read_short(f))
    flags = read_byte(f) & 0xFF
    if flags & F_VALUES:
        n = read_short(f)
        for _ in range(n):
            if flags & F_NAMES:
                read_string(f)  # named values: the driver never sends them; bind positionally
            opts.values.append(read_value(f))
    opts.skip_metadata = bool(flags & F_SKIP_META)
    if flags & F_PAGE_SIZE:
        opts.page_size = read_int(f)
    if flags & F_PAGING_STATE:
        opts.paging_state = read_binary_longstring(f)
    if flags & F_SERIAL:
        opts.serial_consistency = read_short(f)
    if flags & F_TIMESTAMP:
        opts.timestamp = struct.unpack(">q", f.read(8))[0]
    return opts


def parse_query(body: bytes):
    f = io.BytesIO(body)
    return read_longstring(f), read_query_params(f)


def parse_execute(body: bytes):
    f = io.BytesIO(body)
    return read_binary_string(f), read_query_params(f)


def parse_prepare(body: bytes) -> str:
    return read_longstring(io.BytesIO(body))


def parse_batch(body: bytes):
    """Returns (batch_type, [(is_prepared, query_or_id, values)], QueryOptions)."""
    f = io.BytesIO(body)
    btype = read_byte(f) & 0xFF
    items = []
    for _ in range(read_short(f)):
        kind = read_byte(f)
        q = read_binary_string(f) if kind == 1 else read_longstring(f)
        values = [read_value(f) for _ in range(read_short(f))]
        items.append((kind == 1, q, values))
    opts = QueryOptions(consistency=read_short(f))
    flags = read_byte(f) & 0xFF
    if flags & F_SERIAL:
        opts.serial_consistency = read_short(f)
    if flags & F_TIMESTAMP:
        opts.timestamp = struct.unpack(">q", f.read(8))[0]
    return btype, items, opts


def parse_startup(body: bytes) -> dict:
    return read_stringmap(io.BytesIO(body))


def parse_register(body: bytes) -> list:
    return read_stringlist(io.BytesIO(body))


def parse_auth_response(body: bytes) -> bytes:
    f = io.BytesIO(body)
    n = read_int(f)
    return f.read(n) if n > 0 else b""


# ---- response bodies ----------------------------------------------------------------------

def supported_body() -> bytes:
    f = io.BytesIO()
    write_stringmultimap(f, {"CQL_VERSION": ["3.4.5"], "COMPRESSION": [], "PROTOCOL_VERSIONS": ["4/v4"]})
    return f.getvalue()


def authenticate_body(authenticator: str) -> bytes:
    f = io.BytesIO()
    write_string(f, authenticator)
    return f.getvalue()


def auth_success_body() -> bytes:
    return struct.pack(">i", -1)


def error_body(err: CqlError) -> bytes:
    f = io.BytesIO()
    write_int(f, err.code)
    write_string(f, err.message)
    err.write_extra(f)
    return f.getvalue()


def _write_specs(f, specs: list, flags: int, extra_before_specs=b""):
    """Writes <flags><count>[extra][global table spec]<specs> for metadata."""
    tables = {(s[0], s[1]) for s in specs}
    glob = len(tables) == 1
    write_int(f, flags | (M_GLOBAL if glob and specs else 0))
    write_int(f, len(specs))
    f.write(extra_before_specs)
    if glob and specs:
        ks, table = next(iter(tables))
        write_string(f, ks)
        write_string(f, table)
    for ks, table, name, ctype in specs:
        if not glob:
            write_string(f, ks)
            write_string(f, table)
        write_string(f, name)
        write_type_option(f, ctype)


def _write_value(f, ctype, value):
    if value is None:
        write_int(f, -1)
    else:
        from .values import to_bytes
        b = to_bytes(ctype, value)
        write_int(f, len(b))
        f.write(b)


def result_body(result) -> bytes:
    f = io.BytesIO()
    if isinstance(result, Void):
        write_int(f, 1)
    elif isinstance(result, Rows):
        write_int(f, 2)
        flags = M_HAS_MORE if result.paging_state is not None else 0
        paging = b""
        if result.paging_state is not None:
            paging = struct.pack(">i", len(result.paging_state)) + result.paging_state
        if result.no_metadata:
            write_int(f, flags | M_NO_METADATA)
            write_int(f, len(result.specs))
            f.write(paging)
        else:
            _write_specs(f, result.specs, flags, paging)
        write_int(f, len(result.rows))
        types = [s[3] for s in result.specs]
        for row in result.rows:
            for t, v in zip(types, row):
                _write_value(f, t, v)
    elif isinstance(result, SetKeyspace):
        write_int(f, 3)
        write_string(f, result.keyspace)
    elif isinstance(result, SchemaChange):
        write_int(f, 5)
        write_string(f, result.change)
        write_string(f, result.target)
        write_string(f, result.keyspace)
        if result.name is not None:
            write_string(f, result.name)
    else:
        raise TypeError(result)
    return f.getvalue()


def prepared_body(query_id: bytes, bind_specs: list, pk_indexes: list, result_specs: list) -> bytes:
    f = io.BytesIO()
    write_int(f, 4)
    write_short(f, len(query_id))
    f.write(query_id)
    pk = struct.pack(">i", len(pk_indexes)) + b"".join(struct.pack(">H", i) for i in pk_indexes)
    _write_specs(f, bind_specs, 0, pk)
    _write_specs(f, result_specs, 0 if result_specs else M_NO_METADATA)
    return f.getvalue()
