"""Text -> Tokens: word embeddings over a vocabulary (:mod:`seqattn.modalities.text.vocab`).

The adapter reads **words** (``list[list[str]]``, one list per sentence), not ids: the
vocabulary is part of the model (it comes from the data's spec, ``spec_fields = {"vocab":
"vocab"}``, and is saved in the checkpoint with it), so a loaded checkpoint maps raw words to
vectors exactly as in training, without the training data. One word is one token (the alignment from words to positions is the
identity; ``extra["word_index"]`` states it).

Embeddings (the seed's three ways to turn a word into a vector):

- ``onehot``: the fixed one-hot vector of the word's vocabulary index (not trained),
  projected to the model width by a Linear layer -- the seed's first method. It carries
  no meaning by itself: every pair of words is equally far apart.
- ``learned``: an ``nn.Embedding`` table trained with the model (similar words end up close).
- ``pretrained``: vectors read from a word2vec / GloVe text file (``word v1 v2 ...`` per
  line, an optional ``count dim`` header line); vocabulary words missing from the file
  are initialised randomly and counted in the log; ``freeze`` keeps the table fixed.

Letters: b batch, l length (words), v vocabulary size, e embedding width, d model width.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from seqattn.core.dropout import Dropout
from seqattn.core.tokens import Tokens
from seqattn.model.protocols import AdapterBase, TargetLayout, TokenTargets, VocabTable
from seqattn.modalities.text.chars import CharEncoder
from seqattn.modalities.text.vocab import PAD_INDEX, UNK_INDEX, Vocabulary, normalize, read_word_vectors

log = logging.getLogger("seqattn.modalities.text")

EMBEDDINGS = ("learned", "onehot", "pretrained")


class TextAdapter(AdapterBase):
    """Words -> :class:`Tokens`: vocabulary lookup, embedding, (projection), dropout.

    Args:
        dim: model width D.
        vocab: the vocabulary as a list (``<pad>``, ``<unk>``, words...) -- from the data's spec
            (the training split's words); saved with the model.
        embedding: ``learned`` | ``onehot`` | ``pretrained``.
        embedding_dim: width E of a ``learned`` table (default D; a Linear maps E -> D when they
            differ). For ``pretrained`` it is read from the file; give it to load a checkpoint
            where the vector file is no longer present.
        pretrained_path: word2vec / GloVe text file for ``embedding='pretrained'``.
        freeze: keep the ``learned`` / ``pretrained`` table fixed (the projection still trains).
        lowercase: lowercase every word before the lookup (must match how ``vocab`` was built).
        dropout: dropout on the token vectors.
        word_dropout: during training, replace each word by ``<unk>`` with this probability
            (teaches the model what to do with unknown words).
        pretrained_encoding: text encoding of ``pretrained_path`` (UTF-8 by default).
        init_std: standard deviation of a ``learned`` table's random start (default ``E**-0.5``;
            the table is read times ``sqrt(E)``, so a word vector starts at unit scale).
        chars: the character vocabulary (from the data's spec) for character features.
        char_dim: width of each word's character-CNN features, concatenated to its word vector before
            the projection (0 = none). They give unknown and rare words a vector from their spelling.
        char_embedding_dim, char_kernel: the character CNN's embedding width and window.
    """

    inputs = ("words",)
    spec_fields = {"vocab": "vocab", "chars": "chars"}

    def __init__(
        self,
        dim: int,
        vocab: Sequence[str] | None,
        embedding: str = "learned",
        embedding_dim: int | None = None,
        pretrained_path: str | None = None,
        freeze: bool = False,
        lowercase: bool = False,
        dropout: float = 0.0,
        word_dropout: float = 0.0,
        init_std: float | None = None,
        pretrained_encoding: str = "utf-8",
        chars: Sequence[str] | None = None,
        char_dim: int = 0,
        char_embedding_dim: int = 16,
        char_kernel: int = 3,
    ) -> None:
        super().__init__()
        if dim <= 0:
            raise ValueError(f"dim must be positive, got {dim}")
        if vocab is None:
            raise ValueError("TextAdapter needs vocab (a list starting '<pad>', '<unk>'); a text DataModule's "
                             "spec gives it (the training split's words)")
        if embedding not in EMBEDDINGS:
            raise ValueError(f"embedding={embedding!r} is not one of {EMBEDDINGS}")
        if embedding == "pretrained" and not pretrained_path:
            raise ValueError("embedding='pretrained' needs pretrained_path (a word2vec/GloVe text file)")
        if embedding == "onehot" and freeze:
            raise ValueError("freeze applies to learned/pretrained tables; one-hot vectors are always fixed")
        if not 0.0 <= word_dropout < 1.0:
            raise ValueError(f"word_dropout must be in [0, 1), got {word_dropout}")
        self.vocab = Vocabulary(vocab)
        self.pretrained_encoding = pretrained_encoding
        self.embedding, self.lowercase, self.word_dropout = embedding, bool(lowercase), float(word_dropout)
        self.dim = dim
        if char_dim < 0:
            raise ValueError(f"char_dim must be >= 0 (0 = no character features), got {char_dim}")
        if char_dim and chars is None:
            raise ValueError("char_dim > 0 needs the character vocabulary `chars` (a text DataModule's spec gives it)")
        self.chars = CharEncoder(chars, char_dim, char_embedding_dim, char_kernel) if char_dim else None
        extra = char_dim if char_dim else 0
        if self.chars is not None:
            self.export_inputs = ("ids", "mask", "char_ids")
        v = len(self.vocab)
        self.scale = 1.0
        if embedding == "onehot":
            self.table = None
            self.proj = nn.Linear(v + extra, dim)  # one-hot [V] -> [D]: column i is word i's vector
        else:
            weight = None
            if embedding == "pretrained":
                weight, embedding_dim = self._pretrained(pretrained_path, embedding_dim)
            e = embedding_dim or dim
            self.table = nn.Embedding(v, e, padding_idx=PAD_INDEX)
            # a learned table is stored small (std E^-1/2) and read times sqrt(E) (as in the Transformer):
            # its vectors start at unit scale next to the positional encoding, and Adam's fixed-size
            # steps move them fast relative to their random start
            self.scale = e ** 0.5 if embedding == "learned" else 1.0
            nn.init.normal_(self.table.weight, std=init_std if init_std is not None else e ** -0.5)
            with torch.no_grad():
                self.table.weight[PAD_INDEX] = 0.0
            if weight is not None:
                with torch.no_grad():
                    self.table.weight.copy_(weight)
            self.table.weight.requires_grad_(not freeze)
            self.proj = nn.Linear(e + extra, dim) if e + extra != dim else nn.Identity()
        self.dropout = Dropout(dropout)

    def _pretrained(self, path: str, embedding_dim: int | None) -> tuple[torch.Tensor | None, int]:
        file = Path(path).expanduser()
        if not file.is_file():
            if embedding_dim:  # loading a checkpoint: the state dict holds the vectors
                log.warning("pretrained vector file %s not found: the table starts random (%d dims) and is "
                            "expected to come from a checkpoint's state dict", file, embedding_dim)
                return None, embedding_dim
            raise ValueError(f"pretrained vector file {file} does not exist (to load a checkpoint without it, "
                             "set adapter.embedding_dim to the vectors' width)")
        words = self.vocab.words[2:]
        wanted = set(words) | {w.lower() for w in words}
        vectors, e = read_word_vectors(file, wanted, self.pretrained_encoding)
        if embedding_dim and embedding_dim != e:
            raise ValueError(f"embedding_dim={embedding_dim} but {file} holds {e}-dim vectors")
        found = torch.stack(list(vectors.values())) if vectors else torch.zeros(1, e)
        std = float(found.std()) if found.numel() > 1 else 1.0
        weight = torch.randn(len(self.vocab), e) * (std or 1.0)  # missing words: random, same scale
        weight[PAD_INDEX] = 0.0
        missing = []
        for i, w in enumerate(words, start=2):
            vec = vectors.get(w, vectors.get(w.lower()))
            if vec is None:
                missing.append(w)
            else:
                weight[i] = vec
        self.missing_words = len(missing)
        log.info("pretrained vectors %s (%d dims): %d of %d vocabulary words found, %d missing (random init)%s",
                 file, e, len(words) - len(missing), len(words), len(missing),
                 f", e.g. {missing[:5]}" if missing else "")
        return weight, e

    def encode(self, words: Sequence[Sequence[str]], device: torch.device | None = None
               ) -> tuple[torch.Tensor, torch.Tensor]:
        """Sentences -> ``ids [B, L]`` long (0 = padding) and ``mask [B, L]`` bool (True = real word)."""
        if isinstance(words, str) or not isinstance(words, (list, tuple)):
            raise ValueError(f"words must be a list of sentences (lists of str), got {type(words).__name__}")
        lengths = []
        for i, sentence in enumerate(words):
            if isinstance(sentence, str) or not isinstance(sentence, (list, tuple)):
                raise ValueError(f"words[{i}] must be a list of str (one sentence), got {type(sentence).__name__}")
            for j, word in enumerate(sentence):
                if not isinstance(word, str):
                    raise ValueError(f"words[{i}][{j}] must be a str (one word), got {type(word).__name__}: {word!r}")
            lengths.append(len(sentence))
        length = max(lengths, default=0)
        ids = torch.zeros(len(words), length, dtype=torch.long)  # [B, L]
        for i, sentence in enumerate(words):
            ids[i, : len(sentence)] = torch.tensor(
                self.vocab.encode([normalize(w, self.lowercase) for w in sentence]), dtype=torch.long)
        mask = torch.arange(length)[None, :] < torch.tensor(lengths, dtype=torch.long)[:, None]  # [B, L]
        return ids.to(device), mask.to(device)

    def word_vectors(self) -> torch.Tensor:
        """``[V, E]`` the vector each vocabulary word starts from (for ``onehot``: the projection's
        column, i.e. what its one-hot vector becomes)."""
        if self.table is None:
            return self.proj.weight[:, : len(self.vocab)].t()  # [V, D]
        return self.table.weight * self.scale

    def vocab_tables(self) -> dict[str, VocabTable]:
        """The tensors indexed by the vocabulary (``init_from`` maps them by word): the word table
        (``onehot``: the projection's first V columns) and the character CNN's embedding."""
        words = tuple(self.vocab.words)
        if self.table is None:
            tables = {"proj.weight": VocabTable("vocab", words, axis=1, width_option="model.dim")}
        else:
            tables = {"table.weight": VocabTable("vocab", words, width_option="adapter.embedding_dim (default "
                                                 "model.dim; pretrained: the vector file's width)")}
        if self.chars is not None:
            tables.update({f"chars.{k}": v for k, v in self.chars.vocab_tables().items()})
        return tables

    def token_target_layout(self) -> TargetLayout:
        """Masked-word pretraining predicts a vocabulary index: ``("class", V)``."""
        return TargetLayout("class", len(self.vocab))

    def token_targets(self, batch: dict) -> TokenTargets:
        """Each word's vocabulary index (``values [B, L]`` long; a word outside the vocabulary is ``<unk>``,
        1, and stays a target: "an unseen word here"), maskable on every real word (``maskable [B, L]``).

        From ``words`` (or ``ids`` + ``mask`` tensors), never from the token vectors: word dropout and
        masking change the input, not the target. A hidden word loses its whole vector, character
        features included (its spelling would give it away); unhidden words keep theirs, so an unseen
        word in the context is read from its characters as the tagging recipe reads it."""
        device = self.proj.weight.device if isinstance(self.proj, nn.Linear) else self.table.weight.device
        if batch.get("words") is not None:
            ids, mask = self.encode(batch["words"], device)  # [B, L], [B, L]
        elif isinstance(batch.get("ids"), torch.Tensor) and isinstance(batch.get("mask"), torch.Tensor):
            ids, mask = batch["ids"], batch["mask"]
        else:
            raise ValueError(f"TextAdapter.token_targets needs words, or ids [B, L] with mask [B, L]; the batch "
                             f"has {sorted(batch)}")
        return TokenTargets("class", ids.masked_fill(~mask, PAD_INDEX), mask, len(self.vocab))

    #: tensor inputs for ``seqattn.export`` (strings cannot be traced): ids from :meth:`export_inputs_from`
    export_inputs = ("ids", "mask")

    def export_inputs_from(self, batch: dict) -> dict[str, torch.Tensor]:
        """A batch with ``words`` -> ``{"ids": [B, L] long, "mask": [B, L] bool[, "char_ids": [B, L, W]]}``
        for an exported model."""
        ids, mask = self.encode(batch["words"])
        out = {"ids": ids, "mask": mask}
        if self.chars is not None:
            out["char_ids"] = self.chars.encode(batch["words"])
        return out

    def export_description(self) -> dict:
        """The exported inputs (``ids``, ``mask``[, ``char_ids``]) and the tables that make them from words."""
        inputs = {
            "ids": {"shape": ["B", "L"], "meaning": "the vocabulary index of each word (preprocessing.vocabulary, "
                    "after lowercasing when preprocessing.lowercase); 1 = <unk> for a word not in it, 0 = <pad> "
                    "after the sentence's end"},
            "mask": {"shape": ["B", "L"], "meaning": "True on the sentence's words, False on padding"},
        }
        prep = {"vocabulary": list(self.vocab.words), "lowercase": self.lowercase, "pad_index": PAD_INDEX,
                "unk_index": UNK_INDEX}
        if self.chars is not None:
            inputs["char_ids"] = {
                "shape": ["B", "L", "W"],
                "meaning": "each word's characters (case kept, not lowercased) as indices into "
                           "preprocessing.char_table.chars: <w>, the word's first W-2 characters (<unk> for one not "
                           "in the table), </w>, then 0 (<pad>); W = min(max_chars, longest word + 2) over the "
                           "batch; all 0 on padding words",
            }
            prep["char_table"] = {"chars": list(self.chars.chars), "max_chars": self.chars.max_chars, "pad": 0,
                                  "unk": 1, "begin": 2, "end": 3}
        return {"inputs": inputs, "preprocessing": prep}

    def example_inputs(self, batch: int = 2, scale: int = 1) -> dict[str, torch.Tensor]:
        """``ids [B, L]`` of vocabulary words (L = 8 ``scale``, the last item shorter) and ``mask [B, L]``."""
        length = 8 * scale
        g = torch.Generator().manual_seed(0)
        ids = torch.randint(2, max(3, len(self.vocab)), (batch, length), generator=g)
        lengths = torch.tensor([length - (length // 4) * (i % 2) for i in range(batch)])
        mask = torch.arange(length)[None] < lengths[:, None]  # [B, L]
        out = {"ids": ids.masked_fill(~mask, 0), "mask": mask}
        if self.chars is not None:
            words = [[self.vocab.words[int(i)] for i in row[m]] for row, m in zip(out["ids"], mask)]
            out["char_ids"] = self.chars.encode(words)
        return out

    def forward(self, words: Sequence[Sequence[str]] | None = None, *, ids: torch.Tensor | None = None,
                mask: torch.Tensor | None = None, char_ids: torch.Tensor | None = None) -> Tokens:
        """``words`` (B sentences of words) -> Tokens(x ``[B, L, D]``, mask ``[B, L]``).

        Or, for exported models, ``ids [B, L]`` (vocabulary indices, see :meth:`encode`) with
        ``mask [B, L]`` (and ``char_ids [B, L, W]`` with character features) instead of ``words``;
        both give the same tokens.

        ``extra``: ``ids [B, L]`` vocabulary indices, ``words`` (as given, or None) and ``word_index``
        ``[B, L]`` (the word each position holds, -1 on padding: one word per token).
        """
        device = self.proj.weight.device if isinstance(self.proj, nn.Linear) else self.table.weight.device
        if words is not None:
            ids, mask = self.encode(words, device)  # [B, L], [B, L]
        elif ids is None or mask is None:
            raise ValueError("TextAdapter needs words, or ids [B, L] with mask [B, L]")
        elif ids.dim() != 2 or mask.shape != ids.shape or mask.dtype != torch.bool:
            raise ValueError(f"ids must be [B, L] with a bool mask of the same shape, got ids {tuple(ids.shape)} "
                             f"and mask {mask.dtype} {tuple(mask.shape)}")
        if ids.shape[1] == 0:
            raise ValueError("every sentence in the batch is empty (0 words)")
        if self.chars is not None and words is None and (char_ids is None or char_ids.shape[:2] != ids.shape):
            got = None if char_ids is None else tuple(char_ids.shape)
            raise ValueError(f"character features need char_ids [B, L, W] with [B, L] = {tuple(ids.shape)}, got {got}")
        looked_up = ids
        if self.training and self.word_dropout > 0:
            drop = (torch.rand(ids.shape, device=device) < self.word_dropout) & mask
            looked_up = ids.masked_fill(drop, UNK_INDEX)
        if self.table is None:
            word = F.one_hot(looked_up, len(self.vocab)).to(self.proj.weight.dtype)  # [B, L, V]
        else:
            word = self.table(looked_up) * self.scale  # [B, L, E]
        if self.chars is not None:
            # from words: each distinct word of the batch through the character CNN once
            chars = self.chars.forward_words(words, device) if words is not None else self.chars(char_ids)  # [B, L, K]
            word = torch.cat([word, chars.to(word.dtype)], dim=-1)  # [B, L, E + K]
        x = self.proj(word)  # [B, L, D]
        x = self.dropout(x) * mask.unsqueeze(-1)
        positions = torch.arange(ids.shape[1], device=device).expand_as(ids)
        word_index = torch.where(mask, positions, torch.full_like(positions, -1))  # [B, L]
        return Tokens(x=x, mask=mask, extra={"ids": ids, "words": words, "word_index": word_index})
