"""The request log's writer process (docs/operations.md, "Request log").

Each API process with the request log on hands the entries it captured (http/request_log.py)
to a process of its own, started on first use: this module. It parses each entry's bodies,
redacts them by the one rule (core/redaction.py) and writes a batch in one binary `COPY` on a
connection of its own, then answers how many entries it kept. The API process only copies
each entry's values into one `marshal` record as it captures it, and sends a batch of them
to a socket: parsing, redacting and encoding an entry cost a GET by id a third of its API
CPU when they ran on the API's event loop, and this process runs them on another core
(docs/performance.md, "The request log").

The serving process is the only client: the channel is a socket pair it made, so what comes
through it is trusted (its pickled settings, then records of plain values). The writer exits
when its end closes, whatever signal its process group receives meanwhile, so that a
graceful stop can hand it the last entries.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import marshal
import os
import pickle
import re
import signal
import socket
import struct
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple
from urllib.parse import parse_qsl

import asyncpg
import orjson
from asyncpg.pgproto import pgproto

from bankrail.core.children import reap, spawn_module
from bankrail.core.ids import new_id_bytes
from bankrail.core.logs import configure_logging
from bankrail.core.redaction import MASKED, redact, redact_headers, redact_json, redact_value
from bankrail.db.pool import connect, encode_jsonb

__all__ = [
    "BODY_LIMIT",
    "NICENESS",
    "NOT_STORED",
    "Entry",
    "WriterProcess",
    "WriterSettings",
    "object_ids",
    "object_key",
    "record",
]

# Named, not `__name__`: run as `python -m`, this module is `__main__`.
log = logging.getLogger("bankrail.http.request_log_writer")

BODY_LIMIT = 256 * 1024
"""The largest body (bytes) an entry keeps; a larger one is kept as a note of its size, so
that neither the buffer nor the table holds megabytes per request."""

_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")

# One COPY per batch, in the binary format (jsonb as the writer encoded it): PostgreSQL
# parses no arrays and no statement, which an INSERT ... unnest(...) of the same rows made it do.
_COLUMNS = (
    "id",
    "merchant_id",
    "created_at",
    "method",
    "path",
    "status",
    "duration_ms",
    "client_id",
    "idempotency_key",
    "replayed",
    "request",
    "response",
    "object_ids",
)


class Entry(NamedTuple):
    """One request as the pipeline saw it, unparsed: what the API process hands over (as a
    `record`)."""

    merchant_id: bytes  # the UUID's 16 bytes
    client_id: str
    created_at: datetime
    method: str
    path: str
    status: int
    duration_ms: float
    replayed: bool
    request_headers: list[tuple[bytes, bytes]]
    # The body, or its size in bytes when it is over BODY_LIMIT (not kept).
    request_body: bytes | int
    response_headers: list[tuple[bytes, bytes]]
    response_body: bytes | int | None


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def record(entry: Entry) -> bytes:
    """`entry` as the API process hands it over: its values in a plain tuple, the time as
    microseconds since the epoch, in `marshal`'s format (`_entry_of` reads it back).

    The capture (http/request_log.py) makes the same tuple itself, on each request's path."""
    micros = (entry.created_at - _EPOCH) // _MICROSECOND
    return marshal.dumps((*entry[:2], micros, *entry[3:]))


def _entry_of(values: tuple[Any, ...]) -> Entry:
    """The Entry of a `record`'s values."""
    merchant_id, client_id, micros, *rest = values
    return Entry(merchant_id, client_id, _EPOCH + timedelta(microseconds=micros), *rest)


def object_key(object_id: str) -> str:
    """How the log keeps and looks up an object's id: a UUID lower-cased (`ABC…` and `abc…`
    are the same UUID), any other id as it is."""
    return object_id.lower() if _UUID.fullmatch(object_id) else object_id


def object_ids(path: str, method: str, status: int, answer: Any) -> list[str]:
    """The ids an entry names (each as `object_key` keeps it): every UUID in its path, and
    the `id` of the object a successful POST's answer created."""
    found = [match.lower() for match in _UUID.findall(path)]
    if method == "POST" and 200 <= status < 300 and isinstance(answer, dict):
        created = answer.get("id")
        if isinstance(created, str) and created:
            key = object_key(created)
            if key not in found:
                found.append(key)
    return found


def _header(headers: list[tuple[bytes, bytes]], name: bytes) -> bytes | None:
    """The first value of the header `name` (lower-case, as ASGI names them)."""
    for sent, value in headers:
        if sent.lower() == name:
            return value
    return None


def _media(headers: list[tuple[bytes, bytes]]) -> bytes:
    """The body's media type, lower-case, without parameters (b"" when not said)."""
    value = _header(headers, b"content-type")
    return b"" if value is None else value.partition(b";")[0].strip().lower()


def _is_json(media: bytes) -> bool:
    return media == b"application/json" or media.endswith(b"+json")


def _without_nul(value: Any) -> Any:
    """`value` with every NUL character taken out of its texts (PostgreSQL's jsonb holds
    none)."""
    if isinstance(value, str):
        return value.replace("\x00", "")
    if isinstance(value, list):
        return [_without_nul(item) for item in value]
    if isinstance(value, dict):
        return {_without_nul(k): _without_nul(v) for k, v in value.items()}
    return value


def _form(raw: bytes) -> str:
    """A form body (`a=1&b=2`) with the rule applied to each field by its name."""
    pairs = parse_qsl(raw.decode("utf-8", "replace"), keep_blank_values=True)
    return "&".join(f"{name}={redact_value({name: value})[name]}" for name, value in pairs)


def _body(raw: bytes | int | None, headers: list[tuple[bytes, bytes]], *, sent: bool) -> Any:
    """A body as the log keeps it, redacted: JSON as JSON, a form by its fields, other text as
    a string, nothing as null, one over BODY_LIMIT as a note of its size.

    The rule goes by field names, so a body the client `sent` is read as JSON whatever its
    Content-Type said (a JSON document sent as text/plain has its names masked too), and one
    that is neither JSON with names nor a form (free text, a bare JSON string) is not kept:
    it may hold anything, a name or an IBAN included, under no name the rule knows. An
    answer is Bankrail's own: its text is kept (credentials redacted)."""
    if raw is None or raw == b"":
        return None
    if isinstance(raw, int):
        return f"[not kept: {raw} bytes, over the {BODY_LIMIT}-byte limit]"
    media = _media(headers)
    if sent or _is_json(media):
        try:
            value = redact_json(raw)
        except orjson.JSONDecodeError:
            pass
        else:
            if not (sent and isinstance(value, str)):
                return _without_nul(value) if b"\\u0000" in raw else value
    if media == b"application/x-www-form-urlencoded":
        return _without_nul(_form(raw))
    if sent:
        return f"{MASKED} {len(raw)} bytes, not JSON: not kept"
    return redact(raw.decode("utf-8", "replace").replace("\x00", ""))


_LISTING = b'{"items":'


def _answer(seen: Entry) -> Any:
    """The answer as the log keeps it: a successful listing as its items' ids and its
    pagination, since each item can be read again by id (walking fifty documents to redact
    them was half of a page's cost, and storing them tripled PostgreSQL's); any other answer
    whole, redacted."""
    raw = seen.response_body
    if (
        isinstance(raw, bytes)
        and seen.method == "GET"
        and 200 <= seen.status < 300
        and raw.startswith(_LISTING)
    ):
        try:
            page = orjson.loads(raw)
        except orjson.JSONDecodeError:
            page = None
        if isinstance(page, dict) and isinstance(page.get("items"), list):
            kept: dict[str, Any] = {
                "items": [
                    redact_value({"id": item.get("id")}) if isinstance(item, dict) else None
                    for item in page["items"]
                ]
            }
            if "pagination" in page:
                kept["pagination"] = redact_value(page["pagination"])
            return kept
    return _body(raw, seen.response_headers, sent=False)


NOT_STORED = "[not kept: the log could not store this body]"
"""What an entry keeps of a body PostgreSQL or the JSON encoder refused (nested past their
limits, say), so that the rest of the entry, and the rest of its batch, are kept."""


class _Memo:
    """Documents by what they were made from, bounded: past `most` of them, or `most_bytes`
    of what they were made from, it starts again empty."""

    def __init__(self, most: int, most_bytes: int) -> None:
        self._most = most
        self._most_bytes = most_bytes
        self.held_bytes = 0
        self.kept: dict[tuple[Any, ...], tuple[bytes, Any]] = {}

    def keep(self, key: tuple[Any, ...], document: tuple[bytes, Any], size: int) -> None:
        """Remember `document` under `key`; `size`: the bytes it was made from."""
        if len(self.kept) >= self._most or self.held_bytes + size > self._most_bytes:
            self.kept.clear()
            self.held_bytes = 0
        self.kept[key] = document
        self.held_bytes += size


class _Documents:
    """The `request` and `response` columns of entries, redacted and encoded (jsonb's binary
    format), remembered for what repeats: a GET that answers as an earlier one did (a client
    polling a payment until it settles) reuses that answer's document, found by what was
    answered (the body, whether it succeeded, the headers); a request that sent no body with
    the same headers as an earlier one (the same client polling) reuses that request's. What
    the rule makes of either depends on nothing else, so one remembered is the same whoever
    sent it. Each memo holds at most `most` documents, and the answers' memo the documents
    of `most_bytes` of raw answers at most (the requests' of as many bytes of raw headers).
    The raw headers a request's document is found by (a bearer token among
    them) stay in this process's memory only, as the answers' raw bodies do."""

    def __init__(self, most: int = 1024, most_bytes: int = 8 * 1024 * 1024) -> None:
        self.answers = _Memo(most, most_bytes)
        self.requests = _Memo(most, most_bytes)

    def request(self, seen: Entry) -> bytes:
        """The entry's `request` column."""
        if seen.request_body != b"":
            return encode_jsonb(_request(seen))
        try:
            key = tuple(seen.request_headers)
            kept = self.requests.kept.get(key)
        except TypeError:  # headers that do not hash (not the (name, value) tuples ASGI gives)
            return encode_jsonb(_request(seen))
        if kept is None:
            kept = (encode_jsonb(_request(seen)), None)
            self.requests.keep(key, kept, sum(len(name) + len(value) for name, value in key))
        return kept[0]

    def response(self, seen: Entry) -> tuple[bytes, Any]:
        """The entry's `response` column, and its answer's body as the log keeps it."""
        raw = seen.response_body
        if seen.method != "GET" or not isinstance(raw, bytes):
            return _encoded_response(seen)
        try:
            key = (raw, 200 <= seen.status < 300, *seen.response_headers)
            kept = self.answers.kept.get(key)
        except TypeError:
            return _encoded_response(seen)
        if kept is None:
            kept = _encoded_response(seen)
            self.answers.keep(key, kept, len(raw))
        return kept


def _request(seen: Entry, body: Any = None) -> dict[str, Any]:
    """The request's headers and body, redacted; `body` in place of its body when given."""
    return {
        "headers": redact_headers(seen.request_headers),
        "body": _body(seen.request_body, seen.request_headers, sent=True) if body is None else body,
    }


def _response(seen: Entry, body: Any = None) -> dict[str, Any]:
    """The answer's headers and body, redacted; `body` in place of its body when given."""
    return {
        "headers": redact_headers(seen.response_headers),
        "body": _answer(seen) if body is None else body,
    }


def _encoded_response(seen: Entry) -> tuple[bytes, Any]:
    response = _response(seen)
    return encode_jsonb(response), response["body"]


def _row(
    seen: Entry, row_id: bytes, request: bytes, response: bytes, answer: Any
) -> tuple[Any, ...]:
    """The entry as the table keeps it (`_COLUMNS`, in order) under the id `row_id` (16
    bytes), with its `request` and `response` columns (encoded) and its answer's body as
    kept (`answer`, for the id of what it created)."""
    key = _header(seen.request_headers, b"idempotency-key")
    # PostgreSQL's text holds no NUL; a client may send one in the path (`%00`).
    path = seen.path.replace("\x00", "") if "\x00" in seen.path else seen.path
    return (
        # asyncpg's own UUID: made from bytes at a tenth of the cost of the standard one.
        pgproto.UUID(row_id),  # time-ordered: a batch's ids land together at the end of the index
        pgproto.UUID(seen.merchant_id),
        seen.created_at,
        seen.method,
        path,
        seen.status,
        round(seen.duration_ms, 3),
        seen.client_id,
        key.decode("latin-1").replace("\x00", "") if key is not None else None,
        seen.replayed,
        request,
        response,
        object_ids(path, seen.method, seen.status, answer),
    )


def _without_bodies(seen: Entry, row_id: bytes) -> tuple[Any, ...]:
    """The entry's row with both bodies as `NOT_STORED`."""
    request = encode_jsonb(_request(seen, NOT_STORED))
    return _row(seen, row_id, request, encode_jsonb(_response(seen, NOT_STORED)), NOT_STORED)


_BARE = encode_jsonb({"headers": {}, "body": NOT_STORED})


def _bare(seen: Entry, row_id: bytes) -> tuple[Any, ...]:
    """The entry's row with neither its headers nor its bodies (both documents `_BARE`):
    what is left to keep of one whose documents PostgreSQL refused."""
    return _row(seen, row_id, _BARE, _BARE, NOT_STORED)


# What one entry's own content makes its encoding fail with: a body nested past the
# redaction's recursion limit, or past the JSON encoder's (254 levels).
_ENCODING_ERRORS = (RecursionError, orjson.JSONEncodeError)


def _entry(seen: Entry, row_id: bytes, documents: _Documents) -> tuple[Any, ...]:
    """The entry's row; without its bodies when they cannot be redacted or encoded."""
    try:
        response, answer = documents.response(seen)
        return _row(seen, row_id, documents.request(seen), response, answer)
    except _ENCODING_ERRORS:
        return _without_bodies(seen, row_id)


# What one entry's own content makes a write fail with: PostgreSQL refusing a value (a
# data exception), or a value asyncpg cannot send as its column's type.
_ENTRY_ERRORS = (asyncpg.exceptions.DataError, TypeError, ValueError)


async def _copy(conn: asyncpg.Connection, entries: list[Entry], documents: _Documents) -> int:
    """Write the entries' rows in one COPY (on a connection of `connect(...,
    jsonb_encoded=True)`); when an entry's content makes it fail, entry by entry, one
    refused kept again without its headers and bodies. Returns how many were written."""
    ids = new_id_bytes(len(entries))
    rows = [_entry(seen, row_id, documents) for seen, row_id in zip(entries, ids, strict=True)]
    try:
        await conn.copy_records_to_table("request_log", records=rows, columns=_COLUMNS)
        return len(rows)
    except _ENTRY_ERRORS:
        log.warning("a request-log batch was refused: writing its entries one by one")
    kept = 0
    for seen, row_id, row in zip(entries, ids, rows, strict=True):
        for attempt in (row, _bare(seen, row_id)):
            try:
                await conn.copy_records_to_table("request_log", records=[attempt], columns=_COLUMNS)
            except _ENTRY_ERRORS:
                continue
            kept += 1
            break
    return kept


# The channel: each frame its length, then the frame. The serving process sends its
# settings (a pickled WriterSettings), the writer answers `_READY` once nothing but its
# serving process can end it, then each batch (a list of `record`s, marshalled) is answered
# with (kept, refused). marshal's format is the interpreter's own: the writer runs on the
# serving process's (`spawn_module`).
_LENGTH = struct.Struct("!I")
_READY = b"R"
_ANSWER = struct.Struct("!II")

BATCH_SECONDS = 60.0
"""How long the serving process waits for the writer to answer a batch: past it the writer
is taken to be stuck (a database that stopped answering mid-COPY, say), killed and replaced,
and the batch counted as not written."""

_READY_SECONDS = 30.0  # for a new writer to start (import, read its settings)
_LIVED_SECONDS = 10.0  # a writer that died younger than this is restarted after a pause
_MOST_PAUSE = 30.0  # seconds: the longest pause before starting another writer

NICENESS = 19
"""The writer's CPU priority, as nice(1) counts it: the lowest. Its work never holds a request
up, so on a machine whose cores are all busy the requests' processes run first and the writer
takes the time they leave (docs/performance.md, "The writer's priority"); a writer that falls
behind meanwhile fills the serving process's bounded buffer, past which entries are dropped
and counted."""


@dataclass(frozen=True, slots=True)
class WriterSettings:
    """What the writer takes from its serving process: where to write (the DSN, and the
    statement cache size: 0 behind a transaction pooler, db/pool.py) and how to log (as the
    serving process does, core/logs.py: JSON lines in production, the host's name)."""

    dsn: str = field(repr=False)  # it may hold a password
    statement_cache_size: int = 100
    production: bool = False
    host: str | None = None


async def _read_frame(reader: asyncio.StreamReader) -> bytes:
    (length,) = _LENGTH.unpack(await reader.readexactly(_LENGTH.size))
    return await reader.readexactly(length)


class _Writer:
    """The writer's side: one connection, opened when needed and again after it failed."""

    def __init__(self, settings: WriterSettings) -> None:
        self._settings = settings
        self._conn: asyncpg.Connection | None = None
        self._documents = _Documents()

    async def write(self, entries: list[Entry]) -> int:
        """Write a batch; returns how many entries were kept (all of them, unless the
        database was out of reach: none, logged)."""
        if not entries:
            return 0
        try:
            if self._conn is None or self._conn.is_closed():
                self._conn = await connect(
                    self._settings.dsn,
                    statement_cache_size=self._settings.statement_cache_size,
                    jsonb_encoded=True,
                )
            return await _copy(self._conn, entries, self._documents)
        except Exception:
            log.exception("could not write %d request-log entries", len(entries))
            await self.close()
            return 0

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.close(timeout=5)


async def _serve(sock: socket.socket) -> None:
    """The writer's loop: write each batch as it comes and answer it, until the serving
    process closes its end."""
    reader, writer = await asyncio.open_connection(sock=sock)
    journal: _Writer | None = None
    try:
        # The socket pair's other end is the serving process that started this one: trusted.
        settings: WriterSettings = pickle.loads(await _read_frame(reader))  # noqa: S301
        configure_logging(settings.production, settings.host)
        journal = _Writer(settings)
        writer.write(_READY)
        while True:
            frame = await _read_frame(reader)
            batch = marshal.loads(frame)  # noqa: S302 - from the trusted end, as above
            entries = [_entry_of(marshal.loads(one)) for one in batch]  # noqa: S302
            kept = await journal.write(entries)
            writer.write(_ANSWER.pack(kept, len(entries) - kept))
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        return  # the serving process closed its end, or exited
    except Exception:
        # Through the process log's handler (redacted, JSON in production), not a bare
        # traceback on stderr.
        log.exception("the request-log writer failed")
        raise SystemExit(1) from None
    finally:
        if journal is not None:
            await journal.close()
        writer.transport.abort()


class WriterProcess:
    """The writer process of one serving process: started on the first `write`, replaced
    when it dies or stops answering (after a pause that grows while new ones die young)."""

    def __init__(self, settings: WriterSettings, *, batch_seconds: float = BATCH_SECONDS) -> None:
        self._settings = settings
        self._batch_seconds = batch_seconds
        self._process: subprocess.Popen[bytes] | None = None
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._started_at = 0.0
        self._young_deaths = 0  # writers in a row that ended within _LIVED_SECONDS
        self._not_before = 0.0  # monotonic: no writer is started before it

    @property
    def pid(self) -> int | None:
        """The writer's process id while it runs."""
        return self._process.pid if self._writer is not None and self._process else None

    async def write(self, entries: list[bytes]) -> tuple[int, int]:
        """Hand `entries` (each an Entry's `record`) to the writer and wait until it has
        written them: (kept, refused). Raises ConnectionError when no writer could take them
        (it could not be started, died, or did not answer within `batch_seconds`: it is
        replaced for the next call). One call at a time; cancelled, it ends the writer (what
        the writer was answering is then unknown)."""
        if self._process is not None and self._process.poll() is not None:
            self._end("it exited")  # since its last batch
        if self._writer is None:
            await self._start()
        assert self._reader is not None
        assert self._writer is not None
        frame = marshal.dumps(entries)
        try:
            async with asyncio.timeout(self._batch_seconds):
                self._writer.write(_LENGTH.pack(len(frame)))
                self._writer.write(frame)
                await self._writer.drain()
                kept, refused = _ANSWER.unpack(await self._reader.readexactly(_ANSWER.size))
        except TimeoutError as exc:
            self._end(f"it did not answer a batch within {self._batch_seconds} s")
            raise ConnectionError("the request-log writer did not answer") from exc
        except (asyncio.IncompleteReadError, ConnectionError) as exc:
            self._end("it exited")
            raise ConnectionError("the request-log writer exited") from exc
        except BaseException:
            self._end("its batch was cancelled")
            raise
        return kept, refused

    async def close(self, *, wait: float = 10.0) -> None:
        """Stop the writer (it exits when its end of the channel closes, after the batch it
        is writing) and wait for it, `wait` seconds at most before killing it."""
        writer, self._reader, self._writer = self._writer, None, None
        if writer is not None:
            writer.transport.abort()  # the end of the channel: the writer's last read ends
        await self._reap(wait)

    async def _start(self) -> None:
        await self._reap(0)
        if time.monotonic() < self._not_before:
            raise ConnectionError("the request-log writer is being restarted")
        settings = pickle.dumps(self._settings, protocol=pickle.HIGHEST_PROTOCOL)
        # Twice at most: a signal sent to the whole group ends a writer that is still
        # starting (before it ignores such signals); the one started after it is not.
        for _attempt in range(2):
            process, reader, writer = await spawn_module(__name__)
            self._process = process
            try:
                writer.write(_LENGTH.pack(len(settings)) + settings)
                async with asyncio.timeout(_READY_SECONDS):
                    ready = await reader.readexactly(len(_READY))
            except (asyncio.IncompleteReadError, ConnectionError, TimeoutError):
                ready = b""
            except BaseException:
                writer.transport.abort()
                process.kill()
                raise
            if ready == _READY:
                self._reader, self._writer = reader, writer
                self._started_at = time.monotonic()
                return
            writer.transport.abort()
            await self._reap(0)
        self._pause_before_next()
        raise ConnectionError("the request-log writer could not be started")

    def _end(self, why: str) -> None:
        """Give up on the running writer (`why`): close the channel and kill it; it is
        reaped before the next one starts."""
        writer, self._reader, self._writer = self._writer, None, None
        if writer is not None:
            writer.transport.abort()
        process = self._process
        if process is None:
            return
        if process.poll() is None:
            process.kill()
        log.warning(
            "the request-log writer (pid %s, exit code %s) ended: %s; starting another",
            process.pid,
            process.poll(),
            why,
        )
        if time.monotonic() - self._started_at < _LIVED_SECONDS:
            self._pause_before_next()
        else:
            self._young_deaths = 0

    def _pause_before_next(self) -> None:
        """One more writer ended young: from the second in a row, wait before starting the
        next (0.5 s, doubled each time, 30 s at most), so that a writer that cannot run
        does not cost an interpreter's start every batch."""
        self._young_deaths += 1
        if self._young_deaths > 1:
            pause = min(0.5 * 2 ** (self._young_deaths - 2), _MOST_PAUSE)
            self._not_before = time.monotonic() + pause

    async def _reap(self, wait: float) -> None:
        """Wait for the last writer to exit, `wait` seconds at most, then kill it."""
        process, self._process = self._process, None
        if process is not None:
            await reap(process, wait)


def _main() -> None:
    # Raising one's own niceness needs no privilege; where the system refuses it anyway, the
    # writer runs at its parent's priority, as it did before.
    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, 0, NICENESS)
    # The serving process decides when the writer ends (by closing the channel once it has
    # handed over what it buffered); a Ctrl-C or SIGTERM sent to the whole group must not
    # end the writer first. It answers `_READY` only once these are ignored.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    asyncio.run(_serve(socket.socket(fileno=int(sys.argv[1]))))


if __name__ == "__main__":
    _main()
