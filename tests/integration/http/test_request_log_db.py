"""The request log's writer and retention (http/request_log.py, jobs/pruning.py) on the
suite's PostgreSQL: entries are written in batches off the request, a full buffer drops and
counts instead of waiting, closing writes what is buffered, and the pruning job deletes what
is older than the retention on the service clock."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import uuid
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import asyncpg
import pytest
import pytest_asyncio
from prometheus_client import REGISTRY
from starlette.requests import Request
from starlette.responses import Response

from bankrail.config import Settings
from bankrail.core.clock import ServiceClock
from bankrail.core.pagination import Window
from bankrail.db.pool import connect
from bankrail.http.request_log import BODY_LIMIT, CLAIMS, NOT_STORED, RequestLog, WriterSettings
from bankrail.http.request_log_writer import Entry, WriterProcess, _copy, _Documents, record
from bankrail.jobs.pruning import Pruner
from bankrail.merchants.request_log import RequestLogFilter, list_entries
from bankrail.security.tokens import AccessClaims
from bankrail.worker import retentions

pytestmark = pytest.mark.asyncio(loop_scope="session")

MERCHANT = uuid.uuid4()
CLAIMED = AccessClaims(
    client_id="sandbox-client",
    merchant_id=MERCHANT,
    scopes=frozenset({"payments"}),
    audiences=frozenset({"payments"}),
    expires_at=ServiceClock().now() + timedelta(hours=1),
)


def _request(path: str, body: bytes = b"", media: bytes = b"application/json") -> Request:
    sent = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive() -> dict[str, Any]:
        return sent.pop() if sent else {"type": "http.disconnect"}

    scope = {
        "type": "http",
        "method": "POST",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "headers": [
            (b"authorization", b"Bearer secret-token"),
            (b"content-type", media),
        ],
        "server": ("test", 80),
        CLAIMS: CLAIMED,
    }
    return Request(scope, receive)  # type: ignore[arg-type]


async def _answer(request: Request) -> Response:
    await request.body()  # as the pipeline reads it: the log keeps the body the route read
    return Response(b'{"id": "p-1"}', status_code=201, media_type="application/json")


Journals = Callable[..., RequestLog]


@pytest_asyncio.fixture(loop_scope="session")
async def journals(database: str) -> AsyncIterator[Journals]:
    """Make request logs writing to the test's database (each `RequestLog(...)` with these
    options); each is closed at the end, its writer process stopped."""
    made: list[RequestLog] = []

    def journal(clock: ServiceClock | None = None, **options: Any) -> RequestLog:
        made.append(RequestLog(WriterSettings(database), clock or ServiceClock(), **options))
        return made[-1]

    yield journal
    for journal_made in made:
        await journal_made.close()


def _dropped(reason: str = "full") -> float:
    """The entries the log has dropped in this process for `reason` (full or error)."""
    return (
        REGISTRY.get_sample_value("bankrail_request_log_entries_dropped_total", {"reason": reason})
        or 0.0
    )


async def _forget(pool: asyncpg.Pool) -> None:
    """Delete this module's entries (the other tests expect none at their start)."""
    await pool.execute("DELETE FROM request_log WHERE merchant_id = $1", MERCHANT)


async def _rows(pool: asyncpg.Pool) -> list[Any]:
    return await pool.fetch(
        "SELECT * FROM request_log WHERE merchant_id = $1 ORDER BY created_at", MERCHANT
    )


async def test_a_full_buffer_drops_and_counts_and_close_writes_the_rest(
    pool: asyncpg.Pool, journals: Journals
) -> None:
    journal = journals(capacity=2, batch=10, interval=60)
    before = _dropped()
    for n in range(3):
        answer = await journal.record(_request(f"/v3/payments/{n}", b'{"a": 1}'), _answer)
        assert answer.status_code == 201
    assert _dropped() == before + 1
    assert await _rows(pool) == []  # nothing written on the request's way

    journal.start()
    await journal.close()

    rows = await _rows(pool)
    assert [row["path"] for row in rows] == ["/v3/payments/0", "/v3/payments/1"]
    assert rows[0]["request"] == {
        "headers": {"authorization": "[redacted]", "content-type": "application/json"},
        "body": {"a": 1},
    }
    assert rows[0]["object_ids"] == ["p-1"]
    assert rows[0]["status"] == 201


async def test_the_pruning_job_deletes_entries_past_the_retention_in_service_time(
    pool: asyncpg.Pool, journals: Journals
) -> None:
    clock = ServiceClock()
    journal = journals(clock)
    await journal.record(_request("/v3/payouts/old"), _answer)
    await journal.flush()
    clock.set_offset(timedelta(days=6))
    await journal.record(_request("/v3/payouts/recent"), _answer)
    await journal.flush()

    settings = Settings()
    assert settings.request_log_retention == 7 * 86400
    pruner = Pruner(pool, clock, retentions(settings), interval=0)
    clock.set_offset(timedelta(days=7, seconds=1))
    await pruner.run()
    assert [row["path"] for row in await _rows(pool)] == ["/v3/payouts/recent"]
    clock.set_offset(timedelta(days=13, seconds=1))
    await pruner.run()
    assert await _rows(pool) == []


async def test_a_body_postgresql_cannot_hold_as_json_is_kept_as_json_without_the_nul(
    pool: asyncpg.Pool, journals: Journals
) -> None:
    journal = journals()
    sent = b'{"reference": "a\\u0000b", "beneficiary": {"account_holder_name": "Ada Lovelace"}}'
    await journal.record(_request("/v3/payouts/nul", sent), _answer)
    assert await journal.flush() == 1
    rows = {row["path"]: row for row in await _rows(pool)}
    # Not kept as text: that would keep the name the rule masks in a JSON body.
    assert rows["/v3/payouts/nul"]["request"]["body"] == {
        "reference": "ab",
        "beneficiary": {"account_holder_name": "[masked]"},
    }
    await _forget(pool)


async def test_gets_answered_alike_each_keep_the_answer_redacted(
    pool: asyncpg.Pool, journals: Journals
) -> None:
    journal = journals()
    settled = b'{"status": "settled", "id": "p-1", "user": {"name": "Ada", "email": "a@b.c"}}'

    def answering(body: bytes) -> Callable[[Request], Any]:
        async def answer(request: Request) -> Response:
            return Response(body, media_type="application/json")

        return answer

    for path, body in (
        ("a", settled),
        ("b", settled),
        ("c", b'{"status": "failed"}'),
        ("d", settled),
    ):
        request = _request(f"/v3/payments/{path}")
        request.scope["method"] = "GET"
        await journal.record(request, answering(body))
    assert await journal.flush() == 4
    kept = {row["path"][-1]: row["response"]["body"] for row in await _rows(pool)}
    masked = {"status": "settled", "id": "p-1", "user": {"name": "[masked]", "email": "[masked]"}}
    assert kept == {"a": masked, "b": masked, "c": {"status": "failed"}, "d": masked}
    await _forget(pool)


PERSONAL = (
    b'{"beneficiary": {"account_holder_name": "Ada Lovelace", "iban": "GB33BUKB20201555555555",'
    b' "address": {"city": "London"}}, "user": {"email": "ada@example.com"}}'
)


async def test_personal_data_sent_in_a_body_that_is_not_json_is_never_kept(
    pool: asyncpg.Pool, journals: Journals
) -> None:
    journal = journals()
    # A JSON document sent as text/plain (the route refuses it, the log still keeps it).
    await journal.record(_request("/v3/payouts/plain", PERSONAL, b"text/plain"), _answer)
    # Nearly JSON (a trailing comma): the rule cannot read its names.
    await journal.record(_request("/v3/payouts/broken", PERSONAL[:-1] + b",}"), _answer)
    # A bare JSON string: free text under no name.
    await journal.record(_request("/v3/payouts/string", b'"Ada Lovelace GB33BUKB2020"'), _answer)
    form = b"client_secret=s3cr3t&account_holder_name=Ada+Lovelace&iban=GB33BUKB20201555555555&x=1"
    await journal.record(
        _request("/v3/payouts/form", form, b"application/x-www-form-urlencoded"), _answer
    )
    assert await journal.flush() == 4
    rows = {row["path"]: row["request"]["body"] for row in await _rows(pool)}
    assert rows["/v3/payouts/plain"] == {
        "beneficiary": {
            "account_holder_name": "[masked]",
            "iban": "••••5555",
            "address": "[masked]",
        },
        "user": {"email": "[masked]"},
    }
    for path in ("/v3/payouts/broken", "/v3/payouts/string"):
        assert rows[path].startswith("[masked]"), rows[path]
        assert "Lovelace" not in rows[path]
        assert "GB33" not in rows[path]
    assert rows["/v3/payouts/form"] == (
        "client_secret=[redacted]&account_holder_name=[masked]&iban=••••5555&x=1"
    )
    await _forget(pool)


async def test_a_body_over_the_limit_is_kept_as_its_size_and_the_buffer_is_bounded_in_bytes(
    pool: asyncpg.Pool, journals: Journals
) -> None:
    big = b'{"reference": "' + b"x" * BODY_LIMIT + b'"}'
    journal = journals(buffer_bytes=BODY_LIMIT)
    before = _dropped()
    await journal.record(_request("/v3/payouts/big", big), _answer)
    small = b'{"reference": "' + b"y" * (BODY_LIMIT // 2) + b'"}'
    await journal.record(_request("/v3/payouts/half-1", small), _answer)
    await journal.record(_request("/v3/payouts/half-2", small), _answer)  # over the budget
    assert _dropped() == before + 1
    assert await journal.flush() == 2
    rows = {row["path"]: row["request"]["body"] for row in await _rows(pool)}
    kept = rows["/v3/payouts/big"]
    assert kept == f"[not kept: {len(big)} bytes, over the {BODY_LIMIT}-byte limit]"
    assert rows["/v3/payouts/half-1"] == {"reference": "y" * (BODY_LIMIT // 2)}
    assert "/v3/payouts/half-2" not in rows
    # Written: the budget is free again.
    await journal.record(_request("/v3/payouts/half-3", small), _answer)
    assert await journal.flush() == 1
    await _forget(pool)


async def test_request_headers_count_against_the_buffer_budget(
    pool: asyncpg.Pool, journals: Journals
) -> None:
    journal = journals(buffer_bytes=64 * 1024)
    before = _dropped()
    for n in range(4):
        request = _request(f"/v3/payouts/headers-{n}")
        request.scope["headers"] = [
            *request.scope["headers"],
            # Each value its own object, as a server parses them (one object repeated would
            # be copied once).
            *((b"x-padding-%d" % i, bytes([97 + i]) * 1000) for i in range(20)),
        ]
        await journal.record(request, _answer)
    assert _dropped() == before + 1  # three of ~21 KB fit in 64 KiB, the fourth does not
    assert await journal.flush() == 3
    await _forget(pool)


async def test_an_entry_whose_values_cannot_be_copied_is_dropped_and_counted_not_the_answer(
    pool: asyncpg.Pool, journals: Journals, caplog: pytest.LogCaptureFixture
) -> None:
    """No ASGI server hands a header as anything but bytes; if one did, the capture's copy
    would refuse it: the request is answered as the route answered it, the entry is
    dropped and counted (logged once, not once a request), and the log goes on."""
    journal = journals(interval=60)
    before = _dropped("error")
    for _ in range(2):
        odd = _request("/v3/payouts/odd")
        odd.scope["headers"] = [*odd.scope["headers"], (b"x-odd", object())]
        answer = await journal.record(odd, _answer)
        assert answer.status_code == 201
    assert _dropped("error") == before + 2
    refusals = [r for r in caplog.records if "could not be captured" in r.getMessage()]
    assert len(refusals) == 1
    await journal.record(_request("/v3/payouts/plain"), _answer)
    assert await journal.flush() == 1
    assert [row["path"] for row in await _rows(pool)] == ["/v3/payouts/plain"]
    await _forget(pool)


async def test_an_object_is_found_by_its_id_whatever_the_case_of_a_uuid_and_as_it_is_otherwise(
    pool: asyncpg.Pool, journals: Journals
) -> None:
    created = uuid.uuid4()
    answers = {
        "/v3/payouts": f'{{"id": "{str(created).upper()}"}}'.encode(),
        "/v3/mandates": b'{"id": "Mandate-ABC"}',
    }

    async def answer(request: Request) -> Response:
        return Response(answers[request.url.path], status_code=201, media_type="application/json")

    journal = journals(interval=60)
    for path in answers:
        await journal.record(_request(path, b"{}"), answer)
    await journal.flush()
    try:

        async def found(object_id: str) -> list[str]:
            window = Window(since=None, until=None, limit=10, cursor=None)
            filters = RequestLogFilter(object_id=object_id)
            async with pool.acquire() as conn:
                rows, _next = await list_entries(conn, MERCHANT, window, filters)
            return [row["path"] for row in rows]

        # A UUID names the same object in any case; another id only as it was answered.
        assert await found(str(created)) == ["/v3/payouts"]
        assert await found(str(created).upper()) == ["/v3/payouts"]
        assert await found("Mandate-ABC") == ["/v3/mandates"]
        assert await found("mandate-abc") == []
        assert [row["object_ids"] for row in await _rows(pool)] == [
            [str(created)],
            ["Mandate-ABC"],
        ]
    finally:
        await _forget(pool)


async def test_an_entry_the_database_or_the_encoder_refuses_costs_its_batch_nothing(
    pool: asyncpg.Pool, journals: Journals
) -> None:
    """A client cannot hide its requests, or anyone's, by sending what PostgreSQL or the JSON
    encoder refuses: a body nested past orjson's limit of 254 levels (or past the redaction's
    recursion limit), a NUL in the path. Each such entry is kept without its bodies, the
    others of its batch whole."""
    deep = b"[" * 300 + b"]" * 300
    deeper = b'{"a":' * 1000 + b"1" + b"}" * 1000
    journal = journals(interval=60)
    before = _dropped("error")
    for path, body in (
        ("/v3/payments/1", b'{"a": 1}'),
        ("/v3/payments/2", deep),
        ("/v3/payments/\x00", b'{"b": 2}'),
        ("/v3/payments/3", deeper),
        ("/v3/payments/4", b'{"c": 3}'),
    ):
        await journal.record(_request(path, body), _answer)
    try:
        assert await journal.flush() == 5
        rows = await _rows(pool)
        assert [row["path"] for row in rows] == [
            "/v3/payments/1",
            "/v3/payments/2",
            "/v3/payments/",
            "/v3/payments/3",
            "/v3/payments/4",
        ]
        bodies = [row["request"]["body"] for row in rows]
        assert bodies == [{"a": 1}, NOT_STORED, {"b": 2}, NOT_STORED, {"c": 3}]
        assert rows[1]["response"]["body"] == NOT_STORED
        assert rows[4]["response"]["body"] == {"id": "p-1"}
        assert rows[1]["request"]["headers"]["authorization"] == "[redacted]"
        assert _dropped("error") == before
    finally:
        await _forget(pool)


async def test_an_entry_postgresql_refuses_is_kept_bare_and_the_rest_of_its_batch_whole(
    pool: asyncpg.Pool, database: str
) -> None:
    """The writer's last resort: a value PostgreSQL refuses (here a NUL in a header, which
    no HTTP server here passes on) fails the batch's COPY; its entries are then written one
    by one, the refused one again without its headers and bodies."""
    conn = await connect(database, jsonb_encoded=True)
    now = ServiceClock().now()

    def entry(path: str, headers: list[tuple[bytes, bytes]]) -> Entry:
        return Entry(
            MERCHANT.bytes,
            "sandbox-client",
            now + timedelta(microseconds=int(path[-1])),  # in the order of their paths
            "GET",
            path,
            200,
            1.0,
            False,
            headers,
            b"",
            [(b"content-type", b"application/json")],
            b'{"id": "p-1"}',
        )

    fine = [(b"accept", b"application/json")]
    try:
        written = await _copy(
            conn,
            [
                entry("/v3/payments/1", fine),
                entry("/v3/payments/2", [(b"accept", b"application/\x00json")]),
                entry("/v3/payments/3", fine),
            ],
            _Documents(),
        )
        assert written == 3
        rows = await _rows(pool)
        assert [row["path"] for row in rows] == [
            "/v3/payments/1",
            "/v3/payments/2",
            "/v3/payments/3",
        ]
        bare = {"headers": {}, "body": NOT_STORED}
        assert (rows[1]["request"], rows[1]["response"]) == (bare, bare)
        assert rows[1]["status"] == 200
        for kept in (rows[0], rows[2]):
            assert kept["request"]["headers"] == {"accept": "application/json"}
            assert kept["response"]["body"] == {"id": "p-1"}
    finally:
        await conn.close()
        await _forget(pool)


def _running(pid: int) -> bool:
    """Whether `pid` runs (a zombie, dead but not yet reaped, does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


async def test_the_writer_is_a_process_of_its_own_that_outlives_sigterm_and_is_replaced(
    pool: asyncpg.Pool, journals: Journals
) -> None:
    """Parsing, redacting and writing run in a process of their own; it ends when the log
    closes, not on a signal to the process group, and one that died is replaced."""
    journal = journals(interval=60)
    assert journal.writer_pid is None  # started on the first batch
    await journal.record(_request("/v3/payouts/a", b"{}"), _answer)
    assert await journal.flush() == 1
    writer = journal.writer_pid
    assert writer is not None
    assert writer != os.getpid()
    assert _running(writer)
    try:
        # Its answer to the next batch comes after the signal was delivered to it.
        os.kill(writer, signal.SIGTERM)
        await journal.record(_request("/v3/payouts/b", b"{}"), _answer)
        assert await journal.flush() == 1
        assert journal.writer_pid == writer

        os.kill(writer, signal.SIGKILL)
        while _running(writer):
            await asyncio.sleep(0.01)  # polling for the kernel to end it
        await journal.record(_request("/v3/payouts/c", b"{}"), _answer)
        assert await journal.flush() == 1
        replacement = journal.writer_pid
        assert replacement not in (None, writer)
        assert [row["path"] for row in await _rows(pool)] == [
            "/v3/payouts/a",
            "/v3/payouts/b",
            "/v3/payouts/c",
        ]

        await journal.close()
        assert journal.writer_pid is None
        assert replacement is not None
        assert not _running(replacement)
    finally:
        await _forget(pool)


@contextlib.asynccontextmanager
async def _silent_database() -> AsyncIterator[WriterSettings]:
    """Settings of a writer whose database accepts the connection and never answers."""
    accepted: list[asyncio.StreamWriter] = []

    def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer)  # and never answer

    silent = await asyncio.start_server(accept, "127.0.0.1", 0)
    port = silent.sockets[0].getsockname()[1]
    try:
        yield WriterSettings(f"postgresql://nobody@127.0.0.1:{port}/nothing")
    finally:
        for writer in accepted:
            writer.close()
        silent.close()
        await silent.wait_closed()


async def test_a_stop_waits_for_a_database_that_does_not_answer_only_so_long() -> None:
    """A stop hands the writer what is buffered and waits, but not forever: against a
    database that never answers, it gives up after its time (the batch the background task
    was writing included) and counts what was not written."""
    async with _silent_database() as settings:
        journal = RequestLog(settings, ServiceClock(), interval=60, close_seconds=1)
        before = _dropped("error")
        for n in range(3):
            await journal.record(_request(f"/v3/payouts/silent-{n}", b"{}"), _answer)
        journal.start()  # woken by the stop, its turn takes the three entries
        async with asyncio.timeout(10):
            await journal.close()
        assert _dropped("error") == before + 3
        assert journal.writer_pid is None


async def test_a_writer_that_does_not_answer_is_replaced_and_one_that_keeps_failing_waits() -> None:
    """A batch not answered within its time is counted as not written and its writer
    killed; from the second writer in a row that ends young, the next one starts only after
    a pause (no interpreter started every batch meanwhile)."""
    entry = record(
        Entry(
            MERCHANT.bytes,
            "client",
            ServiceClock().now(),
            "GET",
            "/v3/payouts/x",
            200,
            1.0,
            False,
            [],
            b"",
            [],
            None,
        )
    )
    async with _silent_database() as settings:
        writer = WriterProcess(settings, batch_seconds=0.5)
        try:
            with pytest.raises(ConnectionError, match="did not answer"):
                await writer.write([entry])
            first = writer.pid
            assert first is None  # killed, nothing running
            with pytest.raises(ConnectionError, match="did not answer"):
                await writer.write([entry])
            # Two writers ended young in a row: the next waits for its pause.
            with pytest.raises(ConnectionError, match="being restarted"):
                await writer.write([entry])
            assert writer.pid is None
        finally:
            await writer.close()
