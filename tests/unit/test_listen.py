"""The pieces of `bankrail listen` that need no server (src/bankrail/_listen.py): reading
server-sent events, the listener id kept in the data directory, the `--events` filter."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from bankrail._listen import ServerEvent, listener_id, parse_event_types, parse_events
from bankrail._shell import ShellError


def test_server_sent_events_are_read_field_by_field() -> None:
    stream = [
        "retry: 1000",
        ": attached",
        "",
        "id: 7",
        "event: webhook",
        'data: {"a": 1}',
        "",
        ": still attached",
        "",
        "data: one",
        "data:two",
        "",
        "event: reconnect",
        "data: {}",
        "",
    ]
    assert list(parse_events(iter(stream))) == [
        ServerEvent("webhook", "7", '{"a": 1}'),
        ServerEvent("message", None, "one\ntwo"),
        ServerEvent("reconnect", None, "{}"),
    ]


def test_an_event_cut_off_before_its_blank_line_is_not_read() -> None:
    assert list(parse_events(iter(["event: webhook", 'data: {"a"']))) == []


def test_the_listener_id_is_made_once_and_kept(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    made = listener_id(None, data_dir)
    assert (data_dir / "listener-id").read_text().strip() == str(made)
    assert listener_id(None, data_dir) == made
    given = uuid.uuid4()
    assert listener_id(str(given), data_dir) == given
    assert listener_id(None, data_dir) == made  # a given id is not kept


def test_a_listener_id_must_be_a_uuid(tmp_path: Path) -> None:
    with pytest.raises(ShellError, match="must be a UUID"):
        listener_id("laptop", tmp_path)


def test_the_events_filter() -> None:
    assert parse_event_types(None) is None
    assert parse_event_types(" , ") is None
    assert parse_event_types("payment_settled, payout_executed") == [
        "payment_settled",
        "payout_executed",
    ]
