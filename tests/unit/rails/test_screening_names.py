"""Unit tests for bankrail.rails.screening.name_skeleton, the one form in which AML screening
compares names: names that look alike (case, accents, spacing, punctuation, invisible
characters, compatibility forms, look-alike letters of other scripts) have one skeleton, and
names that look different keep different ones."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bankrail.rails.screening import is_listed, name_skeleton

EVIL_CORP = name_skeleton("Evil Corp")


@pytest.mark.parametrize(
    "look_alike",
    [
        "Evil\u200b Corp",  # zero-width space
        "Ev\u200dil Corp",  # zero-width joiner
        "\u0415vil Corp",  # Cyrillic capital Ie
        "Ev\u00adil Corp",  # soft hyphen
        "Evil Corp.",  # punctuation
        "Evil\u2060 Corp\ufe0f",  # word joiner, variation selector
        "E\u200cvil Corp\ufeff",  # zero-width non-joiner, byte order mark
        "EVIL  CORP",
        " evil\tcorp\n",
        "Evil\u00a0Corp",  # no-break space
        "Evil\u3000Corp",  # ideographic space
        "\uff25\uff56\uff49\uff4c \uff23\uff4f\uff52\uff50",  # full-width
        "\u00c9vil C\u00f6rp",  # accents
        "Evi\u0301l Corp",  # a combining accent
        "\u0395vil \u0421orp",  # Greek capital Epsilon, Cyrillic capital Es
        "\u0435vil \u0441\u043erp",  # Cyrillic small ie, es, o
        "Evi\u05c0 Corp",  # Hebrew paseq: punctuation that looks like an l
        "Evil, Corp!",
        "\u201cEvil Corp\u201d",
        "EviI Corp",  # Latin capital I for the small l
        "Evi\u04c0 Corp",  # Cyrillic palochka
        "Evi\u0399 Corp",  # Greek capital Iota
        "Evi\u0406 Corp",  # Cyrillic capital Byelorussian-Ukrainian I
        "Evi1 Corp",  # digit one
    ],
)
def test_a_look_alike_of_a_name_has_its_skeleton(look_alike: str) -> None:
    assert name_skeleton(look_alike) == EVIL_CORP
    assert is_listed(look_alike, {EVIL_CORP})


@pytest.mark.parametrize(
    ("one", "other"),
    [
        ("John Smith", "JOHN SMITH"),
        ("José Müller", "JOSE MULLER"),
        ("José Müller", "Jose\u0301 Mu\u0308ller"),
        ("Zoë Ångström", "zoe angstrom"),
        ("François  Côté", "francois cote"),
        ("Straße", "STRASSE"),
        ("paypal", "\u0440\u0430ypal"),  # Cyrillic er and a
        ("Smith", "Srnith"),  # r n looks like m
        ("ISIS", "lSlS"),  # capital I and small l
        ("Bill", "BiII"),
        ("\u2126mega", "\u03c9mega"),  # Ohm sign and Greek omega: a capital's fold maps further
    ],
)
def test_names_that_look_alike_have_one_skeleton(one: str, other: str) -> None:
    assert name_skeleton(one) == name_skeleton(other)


@pytest.mark.parametrize(
    ("one", "other"),
    [
        ("John Smith", "Jon Smith"),
        ("Evil Corp", "Evil Group"),
        ("Evil Corp", "Devil Corp"),
        ("Anna", "Anne"),
    ],
)
def test_names_that_look_different_keep_different_skeletons(one: str, other: str) -> None:
    assert name_skeleton(one) != name_skeleton(other)
    assert not is_listed(other, {name_skeleton(one)})


@pytest.mark.parametrize("blank", ["", "   ", "\u200b", "...", "\u00ad\u200d"])
def test_a_name_of_nothing_visible_has_an_empty_skeleton(blank: str) -> None:
    assert name_skeleton(blank) == ""


@given(st.text(max_size=40))
def test_the_skeleton_is_a_fixed_point_without_outer_or_double_spaces(name: str) -> None:
    once = name_skeleton(name)
    assert name_skeleton(once) == once
    assert once == once.strip()
    assert "  " not in once
