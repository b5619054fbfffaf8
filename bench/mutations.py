"""The mutation set: corpus documents with controlled word-level edits plus case and whitespace noise.

For each base document and each edit rate (0%, 1%, 2%, 5%, 10% of its words), one mutant: that many
edits at distinct random positions of its whitespace-separated words, each a substitution (a word drawn
from the other base documents), an insertion (the same) or a deletion, with equal chances (at least one
edit when the rate is above 0). Then noise that a good normalizer must ignore: about 10% of the ASCII
words change case (UPPER, Capitalized or lower), and the words are joined by random white space (one
or two spaces, a newline, a tab). The 0% mutants carry only the noise. Everything comes from
``random.Random(seed)`` per base document, so the set is the same on every run and machine.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

EDIT_RATES = (0.0, 0.01, 0.02, 0.05, 0.10)
SEPARATORS = (" ", " ", " ", "  ", "\n", "\t", " \n ")
MIN_WORDS = 100


@dataclass(frozen=True)
class Mutant:
    base: int  # index of the base document in the corpus list
    rate: float  # fraction of words edited
    edits: int
    text: str


def _case_noise(word: str, rng: random.Random) -> str:
    if not word.isascii() or rng.random() >= 0.10:
        return word
    return rng.choice((word.upper(), word.capitalize(), word.lower()))


def mutate(text: str, rate: float, rng: random.Random, vocabulary: Sequence[str]) -> tuple[str, int]:
    """``text`` with ``rate`` of its words edited, then case and white-space noise; and the edit count."""
    words = text.split()
    edits = 0 if rate <= 0 or not words else max(1, round(rate * len(words)))
    positions = sorted(rng.sample(range(len(words)), min(edits, len(words))), reverse=True)
    for pos in positions:  # from the end, so earlier positions stay valid
        kind = rng.randrange(3)
        if kind == 0:
            words[pos] = rng.choice(vocabulary)
        elif kind == 1:
            words.insert(pos, rng.choice(vocabulary))
        else:
            del words[pos]
    noisy = [_case_noise(w, rng) for w in words]
    out: list[str] = []
    for i, word in enumerate(noisy):
        if i:
            out.append(rng.choice(SEPARATORS))
        out.append(word)
    return "".join(out), len(positions)


def choose_bases(texts: Sequence[str], count: int, seed: int = 1) -> list[int]:
    """``count`` documents with at least MIN_WORDS words, drawn at random (fixed seed), in index order."""
    eligible = [i for i, t in enumerate(texts) if len(t.split()) >= MIN_WORDS]
    rng = random.Random(seed)
    return sorted(rng.sample(eligible, min(count, len(eligible))))


def mutation_set(
    texts: Sequence[str], count: int = 300, rates: Sequence[float] = EDIT_RATES, seed: int = 1
) -> list[Mutant]:
    """One mutant per (base document, rate): ``count`` bases, deterministic for a given ``seed``."""
    bases = choose_bases(texts, count, seed)
    vocabulary = sorted({w for i in bases for w in texts[i].split()[:2000] if w.isalpha()}) or ["word"]
    out = []
    for base in bases:
        for rate in rates:
            rng = random.Random(f"{seed}:{base}:{rate}")
            text, edits = mutate(texts[base], rate, rng, vocabulary)
            out.append(Mutant(base, rate, edits, text))
    return out
