"""Text: words as vectors (one-hot, learned or pretrained embeddings).

- :mod:`~seqattn.modalities.text.vocab`: the tokenizer, :class:`Vocabulary`, word-vector files;
- :mod:`~seqattn.modalities.text.adapter`: :class:`TextAdapter` (words -> Tokens);
- :mod:`~seqattn.modalities.text.readers`: CoNLL-U, token JSONL, CSV / TSV / JSONL, UD downloads;
- :mod:`~seqattn.modalities.text.data`: :class:`TaggingDataModule`, :class:`TextClassificationDataModule`;
- :mod:`~seqattn.modalities.text.corpus`: the built-in tagging and review corpora;
- :mod:`~seqattn.modalities.text.viz`: word-embedding PCA and a sentence's attention map.
"""

from seqattn.modalities.text.adapter import TextAdapter
from seqattn.modalities.text.vocab import Vocabulary, tokenize

__all__ = ["TextAdapter", "Vocabulary", "tokenize"]
