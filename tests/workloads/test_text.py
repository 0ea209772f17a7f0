"""Tests for hetsync.workloads.text: the deterministic story generator and its encoding."""

from __future__ import annotations

import re

import numpy as np
import pytest

from hetsync.workloads import text


def test_generate_is_deterministic_and_in_alphabet() -> None:
    a = text.generate(5000, seed=0)
    assert len(a) >= 5000 and a.endswith("\n")
    assert a == text.generate(5000, seed=0)
    assert a != text.generate(5000, seed=1)
    assert set(a) <= set(text.ALPHABET)
    assert text.generate(20000, seed=0).startswith(a)  # longer text extends shorter


def test_encode_decode_round_trip() -> None:
    sample = text.generate(2000, seed=2)
    tokens = text.encode(sample)
    assert tokens.dtype == np.int64 and len(tokens) == len(sample)
    assert tokens.min() >= 0 and tokens.max() < len(text.ALPHABET)
    assert text.decode(tokens) == sample
    with pytest.raises(ValueError, match="alphabet"):
        text.encode("café")  # non-ASCII
    with pytest.raises(ValueError, match="alphabet"):
        text.encode("a;b")


def test_stories_have_long_range_structure() -> None:
    colors = "|".join(text._COLORS)
    stories = text.generate(30000, seed=5).splitlines()
    assert len(stories) > 50
    for story in stories:
        hero = re.match(r"Once upon a time there was an? \w+ \w+ named (\w+)\. (He|She) lived", story)
        assert hero, story
        name, pronoun = hero.groups()
        assert name in text._HEROES[pronoun.lower()]  # the pronoun agrees with the hero
        first = re.search(rf"\ban? ({colors}) (\w+)", story)
        assert first and story.endswith(f"In the end, {name} never forgot the {first[1]} {first[2]}."), story
