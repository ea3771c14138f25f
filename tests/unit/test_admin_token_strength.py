"""The production operator token must be strong: long, varied and without a pattern
(`admin_token_is_strong`, checked by `Settings.problems`)."""

from __future__ import annotations

import random
import secrets
import string

import pytest

from bankrail.config import Settings, admin_token_is_strong

URL_SAFE = string.ascii_letters + string.digits + "-_"

WEAK = {
    "empty": "",
    "one-character": "a" * 40,
    "ten-digits-four-times": "0123456789" * 4,
    "twelve-characters-three-times": "0123456789ab" * 3,
    "repeated-then-one-more": "0123456789ab" * 3 + "Z",
    "repeated-then-a-random-tail": "0123456789ab" * 3 + "Qx7-Vb",
    "repeated-cut-short": ("0123456789abcdefgh" * 3)[:40],
    "alphabet-run": "abcdefghijklmnopqrstuvwxyz0123456789",
    "run-down": "zyxwvutsrqponmlkjihgfedcba9876543210",
    "doubled-letters": "aabbccddeeffgghhiijjkkllmmnnooppqq",
    "random-but-short": secrets.token_urlsafe(16),
}


@pytest.mark.parametrize("token", list(WEAK.values()), ids=list(WEAK))
def test_weak_tokens_are_refused(token: str) -> None:
    assert not admin_token_is_strong(token)
    problems = Settings(mode="production", admin_token=token).problems()
    assert len(problems) == 1
    assert problems[0].startswith("production mode needs a strong BANKRAIL_ADMIN_TOKEN")


def test_random_tokens_are_accepted() -> None:
    draw = random.Random(26)  # fixed: the same tokens every run
    for _ in range(2000):
        assert admin_token_is_strong("".join(draw.choice(URL_SAFE) for _ in range(43)))
        assert admin_token_is_strong("".join(draw.choice("0123456789abcdef") for _ in range(64)))
    assert admin_token_is_strong(secrets.token_urlsafe(32))
    assert admin_token_is_strong("admin-" + secrets.token_urlsafe(32))  # what init generates


def test_sandbox_mode_takes_any_token() -> None:
    assert Settings(mode="sandbox", admin_token="0123456789ab" * 3).problems() == []
    assert Settings(mode="sandbox").problems() == []
