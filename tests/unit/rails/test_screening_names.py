"""Unit tests for bankrail.rails.screening.normalise_name."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bankrail.rails.screening import normalise_name


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("John Smith", "john smith"),
        ("JOHN SMITH", "john smith"),
        ("jOhN sMiTh", "john smith"),
        ("José Müller", "jose muller"),
        ("Zoë Ångström", "zoe angstrom"),
        ("François  Côté", "francois cote"),
        ("  John   Smith  ", "john smith"),
        ("John\tSmith\n", "john smith"),
        ("Straße", "strasse"),
        ("", ""),
        ("   ", ""),
    ],
)
def test_normalise_name(raw: str, expected: str) -> None:
    assert normalise_name(raw) == expected


def test_variants_of_one_name_compare_equal() -> None:
    variants = ["José Müller", "JOSE MULLER", " jose  muller ", "Jose\u0301 Mu\u0308ller"]
    assert len({normalise_name(v) for v in variants}) == 1


def test_different_names_stay_different() -> None:
    assert normalise_name("John Smith") != normalise_name("Jon Smith")


@given(st.text(max_size=40))
def test_normalisation_is_idempotent(name: str) -> None:
    once = normalise_name(name)
    assert normalise_name(once) == once
    assert once == once.strip()
    assert "  " not in once
