"""AML screening of beneficiary names against the operator's list."""

from __future__ import annotations

import unicodedata

from bankrail.db.pool import Connection


def normalise_name(name: str) -> str:
    """The form names are compared in: no accents, case-folded, single spaces."""
    decomposed = unicodedata.normalize("NFKD", name)
    stripped = "".join(ch for ch in decomposed if not unicodedata.combining(ch))
    return " ".join(stripped.casefold().split())


async def replace_screening_list(conn: Connection, names: list[str]) -> list[str]:
    """Make `names` the whole screening list; returns it as stored."""
    unique = {normalise_name(n): n.strip() for n in names if normalise_name(n)}
    await conn.execute("DELETE FROM screening_list")
    await conn.executemany(
        "INSERT INTO screening_list (normalised_name, name) VALUES ($1, $2)", list(unique.items())
    )
    return sorted(unique.values())


async def screening_list(conn: Connection) -> list[str]:
    """The names on the list."""
    return [r["name"] for r in await conn.fetch("SELECT name FROM screening_list ORDER BY name")]


async def is_screened_out(conn: Connection, beneficiary_name: str) -> bool:
    """True when the beneficiary's name is on the screening list."""
    return bool(
        await conn.fetchval(
            "SELECT true FROM screening_list WHERE normalised_name = $1",
            normalise_name(beneficiary_name),
        )
    )
