"""The screening list on real PostgreSQL (bankrail.rails.screening): each listed name is stored
with its skeleton and the version of the rule that made it, and skeletons made by another
version (rows written before migration 0020, or by another release of the rule or of ICU's
data) are made again when a process starts, so that the database only ever compares
skeletons of this release."""

from __future__ import annotations

import asyncpg

from bankrail.rails.screening import (
    SKELETON_VERSION,
    name_skeleton,
    refresh_screening_list,
    replace_screening_list,
    screening_list,
)


async def _rows(pool: asyncpg.Pool) -> list[tuple[str, str, str | None]]:
    async with pool.acquire() as conn:
        rows = await conn.fetch(
            "SELECT normalised_name, name, skeleton_version FROM screening_list ORDER BY name"
        )
    return [(r["normalised_name"], r["name"], r["skeleton_version"]) for r in rows]


async def test_the_list_is_stored_with_each_names_skeleton_once(pool: asyncpg.Pool) -> None:
    async with pool.acquire() as conn:
        stored = await replace_screening_list(
            conn, ["Evil Corp", " Evil Corp. ", "\u0415vil Corp", "Bad Co", "\u200b", ""]
        )
        assert stored == sorted(stored)
        assert len(stored) == 2  # the look-alikes of Evil Corp are one entry; blanks none
        assert await screening_list(conn) == stored
    assert {(skeleton, version) for skeleton, _, version in await _rows(pool)} == {
        (name_skeleton("Evil Corp"), SKELETON_VERSION),
        (name_skeleton("Bad Co"), SKELETON_VERSION),
    }


async def test_skeletons_of_another_version_are_made_again_at_start(pool: asyncpg.Pool) -> None:
    async with pool.acquire() as conn:
        # As the release before 0020 left them: accents and case only, no version.
        await conn.executemany(
            "INSERT INTO screening_list (normalised_name, name) VALUES ($1, $2)",
            [("evil corp", "Evil Corp"), ("john smith", "John Smith")],
        )
        assert await refresh_screening_list(conn) is True
        assert await refresh_screening_list(conn) is False  # nothing left to do
    assert await _rows(pool) == [
        (name_skeleton("Evil Corp"), "Evil Corp", SKELETON_VERSION),
        (name_skeleton("John Smith"), "John Smith", SKELETON_VERSION),
    ]
    assert name_skeleton("John Smith") != "john smith"  # the old form would never match


async def test_a_list_of_this_version_is_left_alone(pool: asyncpg.Pool) -> None:
    async with pool.acquire() as conn:
        await replace_screening_list(conn, ["Evil Corp"])
        before = await _rows(pool)
        assert await refresh_screening_list(conn) is False
    assert await _rows(pool) == before
