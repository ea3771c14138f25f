"""AML screening of beneficiary names against the operator's list.

A name is screened out when its skeleton (`name_skeleton`) is the skeleton of a listed name:
the one rule of every payout, whatever its API or loop. The list is stored with each name's
skeleton (`screening_list.normalised_name`), so that the database only compares skeletons
that this module computed; the skeletons are computed again, at a process's start, when they
were made by another version of the rule or of its Unicode data (`refresh_screening_list`).
"""

from __future__ import annotations

from collections.abc import Collection

import icu

from bankrail.db.pool import Connection

__all__ = [
    "SKELETON_VERSION",
    "is_listed",
    "name_skeleton",
    "refresh_screening_list",
    "replace_screening_list",
    "screening_list",
]

# The rule's own revision, and the ICU and Unicode versions whose data it uses: a stored
# skeleton made under another is made again (`refresh_screening_list`).
SKELETON_VERSION = f"r2-icu{icu.ICU_VERSION}-unicode{icu.UNICODE_VERSION}"


def _code_points(property_name: str) -> list[int]:
    """Every code point with an ICU property (ICU's Unicode version, not Python's)."""
    found = icu.UnicodeSet(f"[:{property_name}:]")
    return [
        code
        for i in range(found.getRangeCount())
        for code in range(ord(found.getRangeStart(i)), ord(found.getRangeEnd(i)) + 1)
    ]


_NFKC = icu.Normalizer2.getNFKCInstance()
_NFKD = icu.Normalizer2.getNFKDInstance()
_SPOOF = icu.SpoofChecker()
# Tables for str.translate (a lookup per character, in C).
_DROP_INVISIBLE = {
    **dict.fromkeys(_code_points("Cc")),  # control characters...
    **{code: code for code in _code_points("White_Space")},  # ...but tabs and newlines stay
    **dict.fromkeys(_code_points("Default_Ignorable_Code_Point")),
}
_DROP_MARKS = dict.fromkeys(_code_points("Nonspacing_Mark"))
_DROP_PUNCTUATION_PLAIN_SPACES = {
    **dict.fromkeys(_code_points("Punctuation")),
    **dict.fromkeys(_code_points("White_Space"), " "),
}
# After case folding a capital I and a small l, which UTS #39 takes for one another, would
# differ (`EviI` is `evii`, `Evil` is `evil`): the last step writes every `i` as `l`.
_I_AS_L = {ord("i"): "l"}
_MAX_ROUNDS = 4  # casefold and skeleton settle in two rounds for every name seen; a bound


def _small(ch: str) -> str:
    """The small form of a character: a letter that looks like a Latin capital (Greek
    capital Epsilon, Cyrillic capital Ie) is that capital's small letter, since its own small
    form may look like nothing Latin; otherwise its case fold."""
    if not ch.isascii():
        prototype = str(_SPOOF.getSkeleton(0, ch))
        if prototype.isascii() and prototype.isupper():
            return prototype.lower()
    return str(icu.UnicodeString(ch).foldCase())


def _fold(text: str) -> str:
    """Case folded, decomposed (compatibility forms too: a prototype may be one), accents
    dropped, confusables mapped to their prototype."""
    small = text.lower() if text.isascii() else "".join(_small(ch) for ch in text)
    bare = _NFKD.normalize(small).translate(_DROP_MARKS)
    return str(_SPOOF.getSkeleton(0, bare))


def name_skeleton(name: str) -> str:
    """The form in which screening compares names: two names that look alike have the same.

    NFKC (compatibility forms: full-width letters, ligatures); default-ignorable code points
    and control characters removed (zero-width spaces and joiners, soft hyphens, variation
    selectors); case folded (a capital that looks like a Latin capital as that capital);
    accents dropped; Unicode confusables mapped to their prototype (the UTS #39 skeleton, by
    ICU: a Cyrillic small ie is a Latin `e`), repeated until nothing changes (a prototype may
    be a capital); then punctuation removed, whitespace collapsed to single spaces, and `i`
    written as `l` (a capital I looks like a small l, and case folding made it an i). Not for
    display: `Smith` becomes `srnlth`, as `Srnith` and `SrnIth` do.
    """
    text = _NFKC.normalize(name).translate(_DROP_INVISIBLE)
    for _ in range(_MAX_ROUNDS):
        folded = _fold(text)
        if folded == text:
            break
        text = folded
    words = text.translate(_DROP_PUNCTUATION_PLAIN_SPACES).translate(_I_AS_L).split(" ")
    return " ".join(filter(None, words))


def is_listed(name: str, listed_skeletons: Collection[str]) -> bool:
    """True when `name` looks like a name of the list, given as its names' skeletons."""
    return name_skeleton(name) in listed_skeletons


async def replace_screening_list(conn: Connection, names: list[str]) -> list[str]:
    """Make `names` the whole screening list, in one transaction (a payout accepted meanwhile
    sees the old list or the new one, never none); returns it as stored: each name once per
    skeleton, trimmed, sorted."""
    unique = {skeleton: n.strip() for n in names if (skeleton := name_skeleton(n))}
    async with conn.transaction():
        # One replacement at a time (two would insert the same skeletons); readers never wait.
        await conn.execute("LOCK TABLE screening_list IN SHARE ROW EXCLUSIVE MODE")
        await conn.execute("DELETE FROM screening_list")
        await conn.executemany(
            "INSERT INTO screening_list (normalised_name, name, skeleton_version)"
            " VALUES ($1, $2, $3)",
            [(skeleton, name, SKELETON_VERSION) for skeleton, name in unique.items()],
        )
    return sorted(unique.values())


async def refresh_screening_list(conn: Connection) -> bool:
    """Compute the stored skeletons again if any was made by another version of the rule (an
    upgrade of Bankrail, ICU or Unicode); True when it did. Every process calls it as it
    starts, after the migrations."""
    stale = (
        "SELECT EXISTS (SELECT 1 FROM screening_list WHERE skeleton_version IS DISTINCT FROM $1)"
    )
    if not await conn.fetchval(stale, SKELETON_VERSION):
        return False
    async with conn.transaction():
        await conn.execute("LOCK TABLE screening_list IN SHARE ROW EXCLUSIVE MODE")
        if not await conn.fetchval(stale, SKELETON_VERSION):
            return False  # another process did it while this one waited for the lock
        await replace_screening_list(conn, await screening_list(conn))
    return True


async def screening_list(conn: Connection) -> list[str]:
    """The names on the list."""
    return [r["name"] for r in await conn.fetch("SELECT name FROM screening_list ORDER BY name")]
