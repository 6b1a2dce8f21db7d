"""Character features of words: what a word looks like, for words the vocabulary does not know.

A word-level vocabulary turns every word unseen in training into ``<unk>``; real treebanks have
many (7.5% of the test words of a UD English treebank). A small character CNN reads each word's
characters (with begin / end markers, so prefixes and suffixes such as ``-ing``, ``-ly``, ``un-``
and capitals are visible) and gives every word a vector, known or not (Ma & Hovy 2016 style).

Letters: b batch, l words, w characters per word (padded), c character vocabulary, k feature width.
"""

from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from seqattn.core.conv import conv1d_positions
from seqattn.core.masks import additive_mask
from seqattn.model.protocols import VocabTable

CHAR_PAD, CHAR_UNK, BOW, EOW = "<pad>", "<unk>", "<w>", "</w>"
CHAR_SPECIALS = (CHAR_PAD, CHAR_UNK, BOW, EOW)
CACHE_WORDS = 200_000  # distinct words whose character ids CharEncoder.encode keeps (then it starts again)


#: one more group of word lengths is worth it when it saves this many padded character positions: a group's
#: fixed cost (its ~12 small operations forward and backward) against ~2.6 us per word position at 128 features
#: (LinES batches, one thread; the grouped CNN ~3x faster than one padded width, 2026-12-05)
GROUP_COST = 64
MAX_GROUPS = 4


def length_groups(lengths: np.ndarray, group_cost: int | None = None, max_groups: int | None = None
                  ) -> list[tuple[int, int]]:
    """Sorted word lengths ``[U]`` (ascending) -> ``(end row, width)`` per group: consecutive rows cut where the
    padded positions ``sum(rows x width)`` plus ``group_cost`` per group are least (at most ``max_groups``;
    exact, over the distinct lengths; defaults :data:`GROUP_COST`, :data:`MAX_GROUPS`). ``width`` is the
    group's longest word (at least 1)."""
    group_cost = GROUP_COST if group_cost is None else group_cost
    max_groups = MAX_GROUPS if max_groups is None else max_groups
    if max_groups < 1:
        raise ValueError(f"length_groups needs max_groups >= 1, got {max_groups}")
    if len(lengths) == 0:
        return []
    if np.any(np.diff(lengths) < 0):
        raise ValueError("length_groups needs the lengths in ascending order")
    values, ends = np.unique(lengths, return_index=False, return_counts=True)
    ends = np.cumsum(ends)  # rows up to and including each distinct length
    n = len(values)
    # best[g][i]: least cost of the first i distinct lengths in g groups; cut[g][i]: where its last group starts
    inf = float("inf")
    best = [[inf] * (n + 1) for _ in range(max_groups + 1)]
    cut = [[0] * (n + 1) for _ in range(max_groups + 1)]
    best[0][0] = 0.0
    for g in range(1, max_groups + 1):
        for i in range(1, n + 1):
            for j in range(i):  # the last group holds distinct lengths j..i-1
                rows = ends[i - 1] - (ends[j - 1] if j else 0)
                cost = best[g - 1][j] + rows * max(int(values[i - 1]), 1) + group_cost
                if cost < best[g][i]:
                    best[g][i], cut[g][i] = cost, j
    g = min(range(1, max_groups + 1), key=lambda k: best[k][n])
    groups, i = [], n
    while g > 0:
        j = cut[g][i]
        groups.append((int(ends[i - 1]), max(int(values[i - 1]), 1)))
        i, g = j, g - 1
    return groups[::-1]


def build_char_vocabulary(words: Iterable[str]) -> list[str]:
    """The characters of ``words`` (case kept), after the four specials; sorted for a stable order."""
    chars = sorted({c for w in words for c in w})
    return [*CHAR_SPECIALS, *chars]


class CharEncoder(nn.Module):
    """Words -> ``[B, L, K]`` character-CNN features (embedding, one convolution, max over characters).

    Args:
        chars: the character vocabulary (``<pad>``, ``<unk>``, ``<w>``, ``</w>``, characters...).
        dim: K, output width (convolution channels).
        embedding_dim: width of a character's embedding.
        kernel_size: characters one filter sees (odd).
        max_chars: longer words keep their first ``max_chars - 2`` characters (the markers are added).
    """

    def __init__(self, chars: Sequence[str], dim: int = 32, embedding_dim: int = 16, kernel_size: int = 3,
                 max_chars: int = 20) -> None:
        super().__init__()
        chars = list(chars)
        if chars[:4] != list(CHAR_SPECIALS):
            raise ValueError(f"a character vocabulary must start with {CHAR_SPECIALS}, got {chars[:4]}")
        if dim <= 0 or embedding_dim <= 0 or kernel_size < 1 or kernel_size % 2 == 0 or max_chars < 3:
            raise ValueError(f"need dim, embedding_dim > 0, an odd kernel_size >= 1 and max_chars >= 3; got {dim}, "
                             f"{embedding_dim}, {kernel_size}, {max_chars}")
        self.chars = chars
        self.index = {c: i for i, c in enumerate(chars)}
        self.dim, self.max_chars = dim, max_chars
        self._ids: dict[str, np.ndarray] = {}  # word -> its ids with the markers, cut at max_chars (encode's cache)
        self.embedding = nn.Embedding(len(chars), embedding_dim, padding_idx=0)
        self.conv = nn.Conv1d(embedding_dim, dim, kernel_size, padding=kernel_size // 2)

    def vocab_tables(self) -> dict[str, VocabTable]:
        """Its embedding's rows are the characters (spec ``chars``): ``init_from`` maps them by character."""
        return {"embedding.weight": VocabTable("chars", tuple(self.chars), label="character embedding",
                                               unit="characters", width_option="adapter.char_embedding_dim")}

    def encode(self, words: Sequence[Sequence[str]], device: torch.device | None = None) -> torch.Tensor:
        """Sentences of words -> ``char_ids [B, L, W]`` long (0 = padding), ``W <= max_chars``.

        A word's ids are computed once and kept (up to ``CACHE_WORDS`` distinct words): every training step
        encodes its batch's words, and writing them word by word into a tensor cost ~8 ms of a ~110 ms step on a
        real treebank (64 sentences).
        """
        length = max((len(s) for s in words), default=0)
        width = min(self.max_chars, max((len(w) + 2 for s in words for w in s), default=3))
        out = np.zeros((len(words), length, width), dtype=np.int64)
        cache = self._ids
        for i, sentence in enumerate(words):
            row = out[i]
            for j, word in enumerate(sentence):
                ids = cache.get(word)
                if ids is None:
                    if len(cache) >= CACHE_WORDS:
                        cache.clear()
                    ids = cache[word] = self._word_ids(word)
                # ids are longer than width only when width == max_chars, which cuts them: they fit
                row[j, : len(ids)] = ids
        return torch.from_numpy(out).to(device)

    def encode_distinct(self, words: Sequence[Sequence[str]], device: torch.device | None = None
                        ) -> tuple[torch.Tensor, torch.Tensor]:
        """Sentences of words -> (``char_ids [U, W]`` of the U distinct words, in order of first use;
        ``where [B, L]`` long: each word's row, U on padding).

        A word's features depend only on its own characters (not on its neighbours, nor on W), so a batch's
        words can go through the CNN once each: :meth:`forward_words` (a batch of 64 LinES sentences: ~1,200
        words, ~530 distinct).
        """
        rows: dict[str, int] = {}
        where = np.full((len(words), max((len(s) for s in words), default=0)), -1, dtype=np.int64)
        for i, sentence in enumerate(words):
            for j, word in enumerate(sentence):
                where[i, j] = rows.setdefault(word, len(rows))
        where[where < 0] = len(rows)
        return self.encode([list(rows)], device)[0], torch.from_numpy(where).to(device)

    def encode_by_length(self, words: Sequence[Sequence[str]], device: torch.device | None = None
                         ) -> tuple[torch.Tensor, torch.Tensor, list[tuple[int, int]]]:
        """:meth:`encode_distinct` with the distinct words ordered by length (shortest first) and cut into
        groups of similar lengths: (``char_ids [U, W]``, ``where [B, L]``, ``groups``: ``(end row, width)``
        per group, for :meth:`features`).

        A batch's distinct words are short on the mean and long at the tail (LinES: 7.4 characters with the
        markers, padded to ~18): each group runs the CNN at its own width (:func:`length_groups`).
        """
        char_ids, where = self.encode_distinct(words)  # [U, W] in order of first use, [B, L]
        lengths = (char_ids != 0).sum(1).numpy()  # [U]
        order = np.argsort(lengths, kind="stable")  # [U]: row r of the result is distinct word order[r]
        rank = np.empty(len(order) + 1, dtype=np.int64)
        rank[order], rank[-1] = np.arange(len(order)), len(order)  # old row -> new row; U (padding) stays U
        groups = length_groups(lengths[order])
        return char_ids[torch.from_numpy(order)].to(device), torch.from_numpy(rank)[where].to(device), groups

    def _word_ids(self, word: str) -> np.ndarray:
        """``[n]`` the ids of ``<w>``, the first ``max_chars - 2`` characters (``<unk>`` for unknown ones), ``</w>``."""
        unk = self.index[CHAR_UNK]
        body = [self.index.get(c, unk) for c in word[: self.max_chars - 2]]
        return np.array([self.index[BOW], *body, self.index[EOW]], dtype=np.int64)

    def forward(self, char_ids: torch.Tensor) -> torch.Tensor:
        """``char_ids [B, L, W]`` -> ``[B, L, K]`` (zero for padding words)."""
        b, length, width = char_ids.shape
        return self.features(char_ids.reshape(b * length, width)).view(b, length, self.dim)

    def features(self, char_ids: torch.Tensor, groups: Sequence[tuple[int, int]] | None = None) -> torch.Tensor:
        """``char_ids [N, W]`` (one word per row, 0 = padding) -> ``[N, K]`` (zero for an all-padding row).

        ``groups``: ``(end row, width)`` of consecutive row groups whose words fit ``width`` characters
        (:meth:`encode_by_length`): each runs at its width, with the same result as the whole ``[N, W]``
        (a word's features see only its own characters and zero padding).
        """
        if groups is not None:
            parts, start = [], 0
            for end, width in groups:
                if end > start:
                    parts.append(self.features(char_ids[start:end, :width]))
                start = end
            if start != char_ids.shape[0]:
                raise ValueError(f"the character groups end at row {start}, the words have {char_ids.shape[0]}")
            return torch.cat(parts) if parts else char_ids.new_zeros(0, self.dim, dtype=self.conv.weight.dtype)
        h = conv1d_positions(self.conv, self.embedding(char_ids))  # [N, W, E] -> [N, W, K]
        # ReLU, then the max over real characters, computed as the max over real characters, then ReLU: the same
        # values (ReLU is monotone; an all-padding row gives 0) and the same gradient, with the ReLU on [N, K]
        # instead of [N, W, K]. Padding is excluded by adding -inf, whose backward passes the gradient through
        # untouched (a multiply by the mask would cost a pass each way). max(dim) sends the gradient to one
        # position (amax splits it among ties, which only identical character windows make: the same gradient for
        # the weights) and costs ~0.6x amax's
        padding = additive_mask(char_ids != 0, h.dtype)  # [N, W]: 0 on characters, -inf on padding
        return F.relu((h + padding[:, :, None]).max(dim=1).values)  # [N, K]

    def forward_words(self, words: Sequence[Sequence[str]], device: torch.device | None = None) -> torch.Tensor:
        """Sentences of words -> ``[B, L, K]``: ``forward(encode(words))``, each distinct word through the CNN once."""
        char_ids, where, groups = self.encode_by_length(words, device)  # [U, W], [B, L], groups of rows
        h = self.features(char_ids, groups)  # [U, K]
        return torch.cat([h, h.new_zeros(1, self.dim)])[where]  # row U: padding -> 0
