"""Server-side CQL errors: each carries its native-protocol error code and knows how to write
its body (the code-specific fields after ``<code><message>``)."""

from __future__ import annotations

from cassandra import ConsistencyLevel
from cassandra.protocol import write_byte, write_int, write_short, write_string

SERVER_ERROR = 0x0000
PROTOCOL_ERROR = 0x000A
BAD_CREDENTIALS = 0x0100
UNAVAILABLE = 0x1000
OVERLOADED = 0x1001
WRITE_TIMEOUT = 0x1100
READ_TIMEOUT = 0x1200
WRITE_FAILURE = 0x1500
CAS_WRITE_UNKNOWN = 0x1700  # protocol v5 only; sent bare to test the driver's handling
SYNTAX_ERROR = 0x2000
UNAUTHORIZED = 0x2100
INVALID = 0x2200
CONFIG_ERROR = 0x2300
ALREADY_EXISTS = 0x2400
UNPREPARED = 0x2500


class CqlError(Exception):
    code = INVALID

    def __init__(self, message: str, code: int | None = None):
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code

    def write_extra(self, f) -> None:
        """Write the error-specific fields that follow the message."""


class InvalidRequest(CqlError):
    code = INVALID


class SyntaxError_(CqlError):
    code = SYNTAX_ERROR


class ConfigurationError(CqlError):
    code = CONFIG_ERROR


class ProtocolError(CqlError):
    code = PROTOCOL_ERROR


class AlreadyExists(CqlError):
    code = ALREADY_EXISTS

    def __init__(self, keyspace: str, table: str = ""):
        msg = (f'Cannot add already existing table "{table}" to keyspace "{keyspace}"' if table
               else f'Cannot add existing keyspace "{keyspace}"')
        super().__init__(msg)
        self.keyspace, self.table = keyspace, table

    def write_extra(self, f):
        write_string(f, self.keyspace)
        write_string(f, self.table)


class Unprepared(CqlError):
    code = UNPREPARED

    def __init__(self, query_id: bytes):
        super().__init__(f"Prepared query with ID {query_id.hex()} not found (either the query was "
                         "not prepared on this host (maybe the host has been restarted?) or you have "
                         "prepared too many queries and it has been evicted from the internal cache)")
        self.query_id = query_id

    def write_extra(self, f):
        write_short(f, len(self.query_id))
        f.write(self.query_id)


class WriteTimeout(CqlError):
    code = WRITE_TIMEOUT

    def __init__(self, write_type: str, consistency: int, received: int = 0, block_for: int = 1):
        super().__init__(f"Operation timed out - received only {received} responses.")
        self.write_type, self.consistency = write_type, consistency
        self.received, self.block_for = received, block_for

    def write_extra(self, f):
        write_short(f, self.consistency)
        write_int(f, self.received)
        write_int(f, self.block_for)
        write_string(f, self.write_type)


class WriteFailure(CqlError):
    """A write that replicas answered with a failure (protocol v4 body: no reason map)."""
    code = WRITE_FAILURE

    def __init__(self, write_type: str, consistency: int, received: int = 0, block_for: int = 1, failures: int = 1):
        super().__init__(f"Operation failed - received {received} responses and {failures} failures")
        self.write_type, self.consistency = write_type, consistency
        self.received, self.block_for, self.failures = received, block_for, failures

    def write_extra(self, f):
        write_short(f, self.consistency)
        write_int(f, self.received)
        write_int(f, self.block_for)
        write_int(f, self.failures)
        write_string(f, self.write_type)


class CasWriteUnknown(CqlError):
    """Protocol v5 CAS_WRITE_UNKNOWN (0x1700), sent as-is even on a v4 connection."""
    code = CAS_WRITE_UNKNOWN

    def __init__(self, consistency: int, received: int = 0, block_for: int = 1):
        super().__init__(f"CAS operation result is unknown - proposal accepted by {received} "
                         "but not a quorum.")
        self.consistency, self.received, self.block_for = consistency, received, block_for

    def write_extra(self, f):
        write_short(f, self.consistency)
        write_int(f, self.received)
        write_int(f, self.block_for)


class ReadTimeout(CqlError):
    code = READ_TIMEOUT

    def __init__(self, consistency: int, received: int = 0, block_for: int = 1):
        super().__init__(f"Operation timed out - received only {received} responses.")
        self.consistency, self.received, self.block_for = consistency, received, block_for

    def write_extra(self, f):
        write_short(f, self.consistency)
        write_int(f, self.received)
        write_int(f, self.block_for)
        write_byte(f, 0)


class Unavailable(CqlError):
    code = UNAVAILABLE

    def __init__(self, consistency: int, required: int = 1, alive: int = 0):
        name = ConsistencyLevel.value_to_name.get(consistency, str(consistency))
        super().__init__(f"Cannot achieve consistency level {name}")
        self.consistency, self.required, self.alive = consistency, required, alive

    def write_extra(self, f):
        write_short(f, self.consistency)
        write_int(f, self.required)
        write_int(f, self.alive)


class Overloaded(CqlError):
    code = OVERLOADED

    def __init__(self):
        super().__init__("Server is in overloaded state. Cannot accept more requests at this point")


class BadCredentials(CqlError):
    code = BAD_CREDENTIALS


def unsupported(what: str) -> InvalidRequest:
    """A feature Cassandra has but this test double does not implement."""
    return InvalidRequest(f"{what} is not supported by the CQL test server (a test double, not Cassandra)")
