"""Built-in text corpora, generated deterministically from a seed (offline, < 1 s).

**Tagging** (:func:`generate_tagging_corpus`): English-like sentences from a small grammar,
tagged with Universal Dependencies part-of-speech tags. Many words are ambiguous
(``saw can book fly watch duck fish water paint ... that like fast hard late``): their
tag depends on the neighbours ("I saw a saw", "they can book a table" / "a book"). Two
constructions put the deciding word *far* from the ambiguous one, beyond a ±4-word window:

- lists: ``they can fish , paint , smoke and milk .`` (all VERB after the modal ``can``)
  vs ``they sell fish , paint , smoke and milk .`` (all NOUN after the verb ``sell``);
- parentheticals: ``we must , the old farmer said , water in the garden .`` (VERB) vs
  ``we need , the old farmer said , water in the garden .`` (NOUN).

Every word's window of ±4 words is then the same in both readings; only a model that
looks further (or carries a recurrent state) can tag them. Each token carries ``far``:
True for an ambiguous word whose deciding cue is more than :data:`FAR` words to its left.

**Classification** (:func:`generate_classification_corpus`): short reviews whose label
(``pos``/``neg``) needs the whole sentence: negation flips a clause (``not bad``), ``but``
makes the second clause decide (``good but boring`` is neg, ``boring but good`` is pos),
``although A , B`` lets ``B`` decide, ``and`` joins two clauses of one polarity.

Both corpora consist of distinct sentences, split so that no val/test sentence occurs in
train (held-out *sentences*, not only another seed).
"""

from __future__ import annotations

import random
from typing import Any

FAR = 4  # the window baseline sees ±4 words (conf/model/window_mlp.yaml)

# -- lexicon ---------------------------------------------------------------------------------
PRONOUNS = ("i", "you", "we", "they")
MODALS = ("can", "will", "must", "should", "may", "could", "might")
# bare nouns that are also verbs: the long-range words
MASS = ("fish", "duck", "water", "paint", "iron", "oil", "milk", "drink", "smoke", "help", "work", "love")
# verbs that take a bare noun object
TAKES_NOUN = ("sell", "buy", "need", "want", "bring", "carry", "find", "keep", "hate", "get")
NOUNS = ("man", "woman", "dog", "cat", "bird", "child", "teacher", "farmer", "boat", "car", "house", "river",
         "garden", "table", "letter", "hat", "box", "room", "town", "shop")
# count nouns that are also verbs (resolved locally: a determiner or a modal next to them)
NOUN_VERBS = ("saw", "book", "watch", "fly", "can", "duck", "ring", "park", "train", "match", "rock", "plant")
TRANSITIVE_BASE = ("see", "take", "read", "open", "carry", "find", "keep", "sell", "buy", "need", "like", "book",
                   "watch", "paint", "water", "train", "park", "plant", "saw", "ring", "match")
INTRANSITIVE_BASE = ("fly", "duck", "fish", "dance", "swim", "sleep", "run", "work", "smoke", "rock")
PAST = ("saw", "took", "read", "sold", "bought", "found", "kept", "watched", "booked", "painted", "liked",
        "opened", "carried")
INTRANSITIVE_PAST = ("slept", "swam", "ran", "worked", "danced", "came", "left")
ADJECTIVES = ("old", "big", "small", "red", "new", "green", "little", "happy", "fast", "hard", "late", "early")
MANNER = ("fast", "hard", "late", "early", "quickly", "slowly", "well")  # ADV after a verb
ADVERBS = ("often", "always", "never", "also", "really")
PREPOSITIONS = ("in", "on", "near", "with", "by", "like")
DETERMINERS = ("the", "a", "this", "that", "my", "our", "every")
SAYERS = ("said", "thinks", "says", "told us", "knows")


class _Sentence:
    def __init__(self) -> None:
        self.tokens: list[str] = []
        self.tags: list[str] = []
        self.far: list[bool] = []

    def add(self, word: str, tag: str, far: bool = False) -> int:
        for w in word.split():
            self.tokens.append(w)
            self.tags.append(tag)
            self.far.append(far)
        return len(self.tokens) - 1

    def item(self) -> dict[str, Any]:
        return {"tokens": self.tokens, "tags": self.tags, "far": self.far}


def _np(s: _Sentence, r: random.Random, nouns=NOUNS + NOUN_VERBS, pp: bool = True) -> None:
    s.add(r.choice(DETERMINERS), "DET")
    for _ in range(r.choice((0, 0, 1, 1, 2))):
        s.add(r.choice(ADJECTIVES), "ADJ")
    s.add(r.choice(nouns), "NOUN")
    if pp and r.random() < 0.15:
        _pp(s, r)


def _pp(s: _Sentence, r: random.Random) -> None:
    s.add(r.choice(PREPOSITIONS), "ADP")
    _np(s, r, pp=False)


def _subject(s: _Sentence, r: random.Random) -> None:
    if r.random() < 0.5:
        s.add(r.choice(PRONOUNS), "PRON")
    else:
        _np(s, r, nouns=NOUNS, pp=False)


def _local(r: random.Random) -> _Sentence:
    """Short clauses whose ambiguous words are resolved by their neighbours."""
    s = _Sentence()
    kind = r.randrange(5)
    if kind == 3:  # "we think that the dog can swim ." / "we like that old watch ."
        s.add(r.choice(PRONOUNS), "PRON")
        if r.random() < 0.5:
            s.add(r.choice(("think", "know", "said")), "VERB")
            s.add("that", "SCONJ")
            _subject(s, r)
        else:
            s.add(r.choice(("like", "want", "see")), "VERB")
            s.add("that", "DET")
            if r.random() < 0.5:
                s.add(r.choice(ADJECTIVES), "ADJ")
            s.add(r.choice(NOUN_VERBS + NOUNS), "NOUN")
            s.add(".", "PUNCT")
            return s
    else:
        _subject(s, r)
    if r.random() < 0.2:
        s.add(r.choice(ADVERBS), "ADV")
    if r.random() < 0.5:
        s.add(r.choice(MODALS), "AUX")
        if r.random() < 0.25:
            s.add("not", "PART")
        transitive = r.random() < 0.65
        s.add(r.choice(TRANSITIVE_BASE if transitive else INTRANSITIVE_BASE), "VERB")
    else:
        transitive = r.random() < 0.65
        s.add(r.choice(PAST if transitive else INTRANSITIVE_PAST), "VERB")
    if transitive:
        if r.random() < 0.15:
            s.add(r.choice(MASS), "NOUN")  # "they saw fish": the verb is right before it
        else:
            _np(s, r)
    elif r.random() < 0.5:
        s.add(r.choice(MANNER), "ADV")
    if r.random() < 0.4:
        _pp(s, r)
    if r.random() < 0.15:  # "like" as a preposition vs the verb above
        s.add("like", "ADP")
        _np(s, r, pp=False)
    s.add(".", "PUNCT")
    return s


def _cue(s: _Sentence, r: random.Random, verbal: bool) -> int:
    """Subject + the word that decides the reading; returns the cue's position."""
    _subject(s, r)
    if verbal:
        pos = s.add(r.choice(MODALS), "AUX")
        if r.random() < 0.2:
            pos = s.add("not", "PART")
    else:
        if r.random() < 0.2:
            s.add(r.choice(("often", "always", "also")), "ADV")
        pos = s.add(r.choice(TAKES_NOUN), "VERB")
    return pos


def _long_range(r: random.Random) -> _Sentence:
    """Lists and parentheticals: the reading of the bare noun/verb is decided far to the left."""
    s = _Sentence()
    verbal = r.random() < 0.5
    tag = "VERB" if verbal else "NOUN"
    cue = _cue(s, r, verbal)
    if r.random() < 0.5:  # list: "fish , paint , smoke and milk"
        n = r.randint(2, 6)
        words = r.sample(MASS, n)
        for i, w in enumerate(words):
            if i == n - 1:
                s.add(r.choice(("and", "or")), "CCONJ")
            elif i > 0:
                s.add(",", "PUNCT")
            pos = len(s.tokens)
            s.add(w, tag, far=pos - cue > FAR)
    else:  # parenthetical: ", the old farmer said ,"
        s.add(",", "PUNCT")
        if r.random() < 0.4:
            s.add(r.choice(PRONOUNS), "PRON")
        else:
            _np(s, r, nouns=NOUNS, pp=r.random() < 0.3)
        verb, *rest = r.choice(SAYERS).split()  # "said" | "told us"
        s.add(verb, "VERB")
        for w in rest:
            s.add(w, "PRON")
        s.add(",", "PUNCT")
        pos = len(s.tokens)
        s.add(r.choice(MASS), tag, far=pos - cue > FAR)
    if r.random() < 0.4:
        _pp(s, r)
    s.add(".", "PUNCT")
    return s


def _split(items: list[Any], key, sizes: dict[str, int], seed: int) -> dict[str, list[Any]]:
    """Distinct items (by ``key``) in a seeded order -> splits of the given sizes (no overlap)."""
    seen, unique = set(), []
    for it in items:
        k = key(it)
        if k not in seen:
            seen.add(k)
            unique.append(it)
    need = sum(sizes.values())
    if len(unique) < need:
        raise ValueError(f"the grammar gave {len(unique)} distinct sentences, fewer than the {need} asked for")
    random.Random(seed + 1).shuffle(unique)
    out, start = {}, 0
    for name in ("test", "val", "train"):  # test first: its size never depends on train's
        out[name] = unique[start : start + sizes[name]]
        start += sizes[name]
    return out


def generate_tagging_corpus(n_train: int = 6000, n_val: int = 600, n_test: int = 1000, seed: int = 0,
                            long_range_fraction: float = 0.4) -> dict[str, list[dict[str, Any]]]:
    """``{"train", "val", "test"}`` -> lists of ``{"tokens", "tags", "far", "id"}`` (distinct
    sentences; no val/test sentence occurs in train). ``long_range_fraction`` of the sentences
    are lists / parentheticals whose ambiguous words are decided far away."""
    for name, n in (("n_train", n_train), ("n_val", n_val), ("n_test", n_test)):
        if n < 0:
            raise ValueError(f"{name} must be >= 0, got {n}")
    if not 0.0 <= long_range_fraction <= 1.0:
        raise ValueError(f"long_range_fraction must be in [0, 1], got {long_range_fraction}")
    r = random.Random(seed)
    need = n_train + n_val + n_test
    items = []
    for _ in range(int(need * 1.5) + 100):
        s = _long_range(r) if r.random() < long_range_fraction else _local(r)
        items.append(s.item())
    splits = _split(items, lambda it: " ".join(it["tokens"]), {"train": n_train, "val": n_val, "test": n_test},
                    seed)
    for name, split in splits.items():
        for i, it in enumerate(split):
            it["id"] = f"{name}-{i:05d}"
    return splits


# -- classification --------------------------------------------------------------------------
SUBJECTS = ("the movie", "the film", "the plot", "the acting", "the food", "the service", "it", "this book",
            "the ending", "the music", "the show", "the hotel", "the game", "the story")
POSITIVE = ("good", "great", "fun", "lovely", "brilliant", "funny", "exciting", "wonderful", "clever",
            "charming")
NEGATIVE = ("bad", "boring", "awful", "dull", "terrible", "slow", "silly", "weak", "poor", "messy")
INTENSIFIERS = ("very", "really", "so", "quite", "truly")
CLS_LABELS = ("neg", "pos")


def _clause(r: random.Random, polarity: int, subject: bool = True) -> list[str]:
    """Words of one clause with the given polarity (1 pos, 0 neg), sometimes through negation."""
    negated = r.random() < 0.4
    adjective_polarity = polarity ^ int(negated)
    words = []
    if subject:
        words += r.choice(SUBJECTS).split()
        words.append(r.choice(("was", "is", "seemed")))
    if negated:
        words.append(r.choice(("not", "never")))
    if r.random() < 0.4:
        words.append(r.choice(INTENSIFIERS))
    words.append(r.choice(POSITIVE if adjective_polarity else NEGATIVE))
    return words


def _review(r: random.Random) -> tuple[list[str], int]:
    label = r.randrange(2)
    kind = r.random()
    if kind < 0.25:  # one clause (negation or not)
        words = _clause(r, label)
    elif kind < 0.55:  # A but B: B decides
        first = 1 - label if r.random() < 0.8 else label
        short = r.random() < 0.3  # "good but boring"
        words = _clause(r, first, subject=not short) + ["but"] + _clause(r, label, subject=not short)
    elif kind < 0.8:  # although A , B: B decides
        words = ["although"] + _clause(r, 1 - label) + [","] + _clause(r, label)
    else:  # A and B: one polarity
        words = _clause(r, label) + ["and"] + _clause(r, label, subject=r.random() < 0.5)
    return words + ["."], label


def generate_classification_corpus(n_train: int = 5000, n_val: int = 500, n_test: int = 1000, seed: int = 0
                                   ) -> dict[str, list[dict[str, Any]]]:
    """``{"train", "val", "test"}`` -> lists of ``{"text", "label", "id"}`` (labels ``neg``/``pos``;
    distinct sentences; no val/test sentence occurs in train)."""
    for name, n in (("n_train", n_train), ("n_val", n_val), ("n_test", n_test)):
        if n < 0:
            raise ValueError(f"{name} must be >= 0, got {n}")
    r = random.Random(seed)
    need = n_train + n_val + n_test
    items = []
    for _ in range(int(need * 1.5) + 100):
        words, label = _review(r)
        items.append({"text": " ".join(words), "label": CLS_LABELS[label]})
    splits = _split(items, lambda it: it["text"], {"train": n_train, "val": n_val, "test": n_test}, seed)
    for name, split in splits.items():
        for i, it in enumerate(split):
            it["id"] = f"{name}-{i:05d}"
    return splits
