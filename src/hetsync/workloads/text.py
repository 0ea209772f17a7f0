"""Deterministic English-like text for the character-level language model.

A small probabilistic grammar writes short stories, one paragraph (line) each.
A story introduces a hero (a named animal, with a gender that later pronouns
agree with), a friend and a place; its middle sentences draw verbs, objects
and speech from that place's vocabulary, refer back to both names, count
things with agreeing plurals, and quote speech that mentions the friend; its
last sentence recalls the first coloured object the story mentioned. A model
therefore gains from short-range structure (spelling, word order, agreement)
and from long-range structure (names, genders, the place's vocabulary, the
recalled object), which is what lets perplexity keep falling with training.

The text is a function of ``seed`` alone and is encoded one character per
token over the fixed :data:`ALPHABET`; nothing is downloaded.
"""

from __future__ import annotations

import string

import numpy as np

ALPHABET = "\n !\"',.?" + string.ascii_lowercase + string.ascii_uppercase
"""Every character the generator may write; a character's token is its index here."""

_HEROES = {
    "he": ["Tom", "Sam", "Max", "Leo", "Ben", "Jack", "Finn", "Otto", "Hugo", "Karl"],
    "she": ["Anna", "Mia", "Lily", "Rosa", "Ella", "Nora", "Ruth", "Ivy", "Greta", "Wendy"],
}
_ANIMALS = ["cat", "dog", "fox", "owl", "bear", "hare", "mouse", "crow", "wolf", "frog", "duck", "goat"]
_TRAITS = ["small", "old", "brave", "quiet", "clever", "happy", "lazy", "curious", "tired", "young", "proud"]
_COLORS = ["red", "blue", "green", "yellow", "white", "black", "brown", "golden"]
_NUMBERS = ["two", "three", "four", "five", "six", "seven"]
_FEELINGS = ["hungry", "cold", "sleepy", "happy", "afraid", "bored", "lonely"]
_MOVES = ["slept", "ran", "sang", "waited", "laughed", "danced", "rested", "wandered"]
_MANNERS = ["slowly", "quickly", "quietly", "happily", "again", "for a long time", "all day"]
_TIMES = ["One day", "In the morning", "At night", "Later", "After a while", "Then", "That evening"]
_PLACES = {
    "forest": (
        "the dark forest",
        ["tree", "path", "river", "stone", "nest", "leaf", "mushroom", "branch"],
        ["found", "climbed", "followed", "picked", "watched", "hid"],
    ),
    "town": (
        "a busy town",
        ["house", "street", "shop", "bell", "window", "bicycle", "cake", "letter"],
        ["found", "painted", "bought", "visited", "carried", "opened"],
    ),
    "sea": (
        "a village by the sea",
        ["boat", "shell", "wave", "crab", "rope", "island", "sail", "bottle"],
        ["found", "caught", "pulled", "watched", "washed", "lost"],
    ),
    "farm": (
        "a farm on the hill",
        ["barn", "field", "apple", "fence", "egg", "cart", "horse", "basket"],
        ["found", "fed", "fixed", "counted", "carried", "planted"],
    ),
}


def _plural(noun: str) -> str:
    if noun == "leaf":
        return "leaves"
    return noun + ("es" if noun.endswith(("ch", "sh", "s", "x")) else "s")


class _Story:
    """One story's choices, so later sentences can refer back to earlier ones."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng
        self.pronoun = self.pick(["he", "she"])
        self.hero = self.pick(_HEROES[self.pronoun])
        friend_pronoun = self.pick(["he", "she"])
        self.friend = self.pick([name for name in _HEROES[friend_pronoun] if name != self.hero])
        self.animal = self.pick(_ANIMALS)
        self.friend_animal = self.pick(_ANIMALS)
        self.place_phrase, self.nouns, self.verbs = _PLACES[self.pick(list(_PLACES))]
        self.remembered: str | None = None  # the first "<color> <noun>" of the story

    def pick(self, options: list[str]) -> str:
        return options[int(self.rng.integers(len(options)))]

    def chance(self, p: float) -> bool:
        return bool(self.rng.random() < p)

    def subject(self, first: bool = True) -> str:
        """Who acts: a name, a pronoun that agrees with the hero, or a description.

        ``first``: the subject opens the sentence (capitalised).
        """
        roll = self.rng.random()
        if roll < 0.35:
            return self.hero
        if roll < 0.6:
            return self.pronoun.capitalize() if first else self.pronoun
        if roll < 0.8:
            return self.friend
        return f"{'The' if first else 'the'} {self.animal}"

    def thing(self) -> str:
        noun = self.pick(self.nouns)
        if self.remembered is None or self.chance(0.3):
            color = self.pick(_COLORS)
            if self.remembered is None:
                self.remembered = f"{color} {noun}"
            return f"a {color} {noun}"
        return f"a {noun}" if noun[0] not in "aeiou" else f"an {noun}"

    def sentence(self) -> str:
        kind = self.rng.random()
        if kind < 0.3:
            return f"{self.pick(_TIMES)}, {self.subject(first=False)} {self.pick(self.verbs)} {self.thing()}."
        if kind < 0.45:
            return f"{self.subject()} {self.pick(_MOVES)} {self.pick(_MANNERS)}."
        if kind < 0.6:
            count = int(self.rng.integers(len(_NUMBERS) + 1))
            noun = self.pick(self.nouns)
            things = f"one {noun}" if count == 0 else f"{_NUMBERS[count - 1]} {_plural(noun)}"
            return f"{self.hero} and {self.friend} {self.pick(self.verbs)} {things}."
        if kind < 0.75:
            feeling = self.pick(_FEELINGS)
            return f"Because {self.pronoun} was {feeling}, {self.pronoun} {self.pick(_MOVES)}."
        if kind < 0.9:
            said = self.pick(
                [
                    f"Look at the {self.pick(self.nouns)}",
                    f"Where is {self.friend}",
                    f"I like this {self.pick(self.nouns)}",
                    f"Come with me, {self.friend}",
                ]
            )
            mark = "?" if said.startswith("Where") else self.pick([",", "!"])
            if mark == "?":
                return f'"{said}?" asked {self.hero}.'
            return f'"{said}{mark}" said {self.hero}.' if mark == "," else f'"{said}!" cried {self.hero}.'
        return f"{self.friend} was {self.pick(_FEELINGS)}, so {self.hero} gave {self.friend} {self.thing()}."

    def paragraph(self) -> str:
        trait = self.pick(_TRAITS)
        a = "an" if trait[0] in "aeiou" else "a"
        sentences = [
            f"Once upon a time there was {a} {trait} {self.animal} named {self.hero}.",
            f"{self.pronoun.capitalize()} lived in {self.place_phrase} with a {self.friend_animal} called {self.friend}.",
        ]
        sentences += [self.sentence() for _ in range(int(self.rng.integers(3, 8)))]
        if self.remembered is None:
            sentences.append(f"{self.hero} found {self.thing()}.")
        sentences.append(f"In the end, {self.hero} never forgot the {self.remembered}.")
        return " ".join(sentences) + "\n"


def generate(n_chars: int, seed: int) -> str:
    """At least ``n_chars`` characters of stories (whole paragraphs), deterministic for ``seed``."""
    rng = np.random.default_rng(np.random.SeedSequence(seed))
    parts: list[str] = []
    length = 0
    while length < n_chars:
        parts.append(_Story(rng).paragraph())
        length += len(parts[-1])
    return "".join(parts)


def encode(text: str) -> np.ndarray:
    """Tokens (int64 indices into :data:`ALPHABET`) of ``text``."""
    lookup = np.full(128, -1, dtype=np.int64)
    lookup[[ord(c) for c in ALPHABET]] = np.arange(len(ALPHABET))
    codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
    tokens = lookup[np.minimum(codes, 127)]
    tokens[codes > 127] = -1
    if (tokens < 0).any():
        bad = text[int(np.argmax(tokens < 0))]
        raise ValueError(f"character {bad!r} is not in the alphabet")
    return tokens


def decode(tokens: np.ndarray) -> str:
    """The text that ``tokens`` encode."""
    return "".join(ALPHABET[int(t)] for t in tokens)
