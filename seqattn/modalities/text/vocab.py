"""Words: a regex tokenizer, a vocabulary built from the training split, word-vector files.

Index 0 of every vocabulary is ``<pad>``, 1 is ``<unk>`` (every word the training split lacks).
A vocabulary is plain data (a list of words): it travels in the data's spec and the checkpoint,
never through a config, so any word (``???``, ``${x}``, ``{``, ``%``) is just a word.

Letters: v vocabulary size, e embedding width.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from pathlib import Path
from typing import Iterable, Sequence

import torch


log = logging.getLogger("seqattn.modalities.text")

PAD, UNK = "<pad>", "<unk>"
PAD_INDEX, UNK_INDEX = 0, 1
#: a word (letters/digits, inner hyphens or apostrophes: "don't", "well-known") or one punctuation mark
TOKEN_PATTERN = r"\w+(?:[-']\w+)*|[^\w\s]"


def tokenize(text: str, lowercase: bool = False, pattern: str = TOKEN_PATTERN) -> list[str]:
    """Split ``text`` into words with a regex (``re.findall``); optionally lowercase them.

    >>> tokenize("Not bad, but boring!")
    ['Not', 'bad', ',', 'but', 'boring', '!']
    """
    if not isinstance(text, str):
        raise ValueError(f"tokenize expects a str, got {type(text).__name__}")
    words = re.findall(pattern, text)
    return [w.lower() for w in words] if lowercase else words


def normalize(word: str, lowercase: bool) -> str:
    return word.lower() if lowercase else word


class Vocabulary:
    """Word <-> index. Index 0 is ``<pad>``, 1 is ``<unk>`` (every unknown word).

    Built from the training split only (:meth:`build`); saved as a plain list of words
    (:meth:`to_list`) and restored with ``Vocabulary(words)``.
    """

    def __init__(self, words: Sequence[str]) -> None:
        words = list(words)
        if len(words) < 2 or words[0] != PAD or words[1] != UNK:
            raise ValueError(f"a vocabulary list must start with {PAD!r}, {UNK!r}; got {words[:2]!r}")
        if len(set(words)) != len(words):
            dup = next(w for w, c in Counter(words).items() if c > 1)
            raise ValueError(f"vocabulary lists {dup!r} twice")
        self.words = words
        self.index = {w: i for i, w in enumerate(words)}

    @classmethod
    def build(cls, sentences: Iterable[Sequence[str]], min_freq: int = 1, max_size: int | None = None,
              lowercase: bool = False) -> "Vocabulary":
        """Count words over ``sentences`` (lists of words); keep those seen ``>= min_freq`` times,
        most frequent first (ties alphabetical), at most ``max_size`` words besides the two specials."""
        if min_freq < 1:
            raise ValueError(f"min_freq must be >= 1, got {min_freq}")
        if max_size is not None and max_size < 0:
            raise ValueError(f"max_size must be >= 0 or None, got {max_size}")
        counts = Counter(normalize(w, lowercase) for sentence in sentences for w in sentence)
        for special in (PAD, UNK):
            counts.pop(special, None)
        kept = sorted((w for w, c in counts.items() if c >= min_freq), key=lambda w: (-counts[w], w))
        if max_size is not None:
            kept = kept[:max_size]
        vocab = cls([PAD, UNK, *kept])
        dropped = len(counts) - len(kept)
        if dropped:
            log.info("vocabulary: %d words kept, %d rarer words map to %s (min_freq=%d, max_size=%s)",
                     len(kept), dropped, UNK, min_freq, max_size)
        return vocab

    def to_list(self) -> list[str]:
        return list(self.words)

    def __len__(self) -> int:
        return len(self.words)

    def __contains__(self, word: str) -> bool:
        return word in self.index

    def encode(self, words: Sequence[str]) -> list[int]:
        """Words -> indices (unknown words -> ``UNK_INDEX``)."""
        return [self.index.get(w, UNK_INDEX) for w in words]

    def decode(self, indices: Iterable[int]) -> list[str]:
        return [self.words[i] for i in indices]


def read_word_vectors(path: str | Path, wanted: set[str] | None = None,
                      encoding: str = "utf-8") -> tuple[dict[str, torch.Tensor], int]:
    """Read a word2vec / GloVe text file -> ``({word: vector [E]}, E)``.

    One ``word v1 ... vE`` per line; a first line of two integers (word2vec's ``count dim``
    header) is skipped. Only words in ``wanted`` are kept when it is given. A line with the
    wrong number of values, a non-number, or bytes that are not valid ``encoding`` raise
    ValueError naming file and line (read line by line: vector files can be gigabytes).
    """
    path = Path(path).expanduser()
    if not path.is_file():
        raise ValueError(f"pretrained vector file {path} does not exist")
    vectors: dict[str, torch.Tensor] = {}
    dim = None
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, start=1):
            try:
                line = raw.decode(encoding)
            except UnicodeDecodeError as err:
                raise ValueError(f"{path}:{lineno}: byte(s) {raw[err.start:err.end].hex(' ')} at column {err.start + 1} "
                                 f"are not valid {encoding}; set adapter.pretrained_encoding to the file's "
                                 "encoding") from None
            if lineno == 1:
                line = line.lstrip("\ufeff")
            parts = line.rstrip("\n").rstrip().split(" ")
            if not line.strip():
                continue
            if lineno == 1 and len(parts) == 2 and all(p.isdigit() for p in parts):
                dim = int(parts[1])  # word2vec header: count dim
                continue
            word, values = parts[0], parts[1:]
            if dim is None:
                dim = len(values)
            if len(values) != dim or dim == 0:
                raise ValueError(f"{path}:{lineno}: expected a word and {dim} numbers, got {len(values)} values")
            if wanted is not None and word not in wanted:
                continue
            try:
                vectors[word] = torch.tensor([float(v) for v in values])
            except ValueError:
                raise ValueError(f"{path}:{lineno}: non-numeric value in the vector of {word!r}") from None
    if dim is None:
        raise ValueError(f"pretrained vector file {path} holds no vectors")
    return vectors, dim


