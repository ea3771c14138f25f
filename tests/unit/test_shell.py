"""`bankrail api`'s pieces that need no server: bodies from `--data`, and what is printed."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from bankrail._shell import ShellError, render, request_body


def test_data_is_inline_json_or_a_file(tmp_path: Path) -> None:
    body = tmp_path / "payout.json"
    body.write_bytes(b'{"amount_in_minor": 1}')

    assert request_body(None) is None
    assert request_body('{"a": 1}') == b'{"a": 1}'
    assert request_body(f"@{body}") == b'{"amount_in_minor": 1}'
    with pytest.raises(ShellError, match="cannot read"):
        request_body(f"@{tmp_path / 'absent.json'}")


def test_json_is_indented_on_a_terminal_and_exact_elsewhere() -> None:
    answer = httpx.Response(201, content=b'{"id":"p1","status":"authorizing"}')

    assert render(answer, pretty=False) == 'HTTP 201\n{"id":"p1","status":"authorizing"}'
    assert render(answer, pretty=True) == 'HTTP 201\n{\n  "id": "p1",\n  "status": "authorizing"\n}'


def test_a_body_that_is_not_json_or_no_body_at_all() -> None:
    assert render(httpx.Response(202, text="http://x/return?id=1"), pretty=True) == (
        "HTTP 202\nhttp://x/return?id=1"
    )
    assert render(httpx.Response(204), pretty=True) == "HTTP 204"
