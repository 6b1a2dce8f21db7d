"""Modality-free data machinery: the spec the model is built from, one split function, file
readers that name ``file:line``, downloads with a checksum, and the DataModule base.

- :mod:`~seqattn.datakit.spec`: :class:`DataSpec` (what the data tells the model);
- :mod:`~seqattn.datakit.splits`: :func:`split` (given / grouped / stratified / random, seeded);
- :mod:`~seqattn.datakit.files`: CSV / TSV / JSONL / text readers, the data-dir resolution;
- :mod:`~seqattn.datakit.download`: download once into the cache, SHA-256 checked;
- :mod:`~seqattn.datakit.module`: :class:`TaskDataModule`, the base of every task's data;
- :mod:`~seqattn.datakit.items`: :class:`Item`, what a prediction batch's items are.
"""

from seqattn.datakit.download import download, sha256_of, verify_sha256
from seqattn.datakit.files import (
    Table,
    iter_lines,
    read_jsonl,
    read_records,
    read_table,
    read_text,
    resolve_data_dir,
    table_format,
)
from seqattn.datakit.items import Item
from seqattn.datakit.module import ListDataset, TaskDataModule
from seqattn.datakit.spec import DataSpec
from seqattn.datakit.splits import check_fractions, split, split_indices

__all__ = [
    "DataSpec", "Item", "ListDataset", "Table", "TaskDataModule", "check_fractions", "download", "iter_lines",
    "read_jsonl", "read_records", "read_table", "read_text", "resolve_data_dir", "sha256_of", "split",
    "split_indices", "table_format", "verify_sha256",
]
