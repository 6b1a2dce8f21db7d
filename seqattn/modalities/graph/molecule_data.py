"""Molecule property data (``task=molecule``): SMILES -> graphs, splits, loaders, the predict protocol.

Sources: ``nci_tpsa`` (built in: the NCI molecules with TPSA that RDKit ships), ``csv`` (your
SMILES CSV; giving ``path`` selects it) and ``moleculenet`` (downloaded through PyG). Formats and
featurisation: :mod:`seqattn.modalities.graph.molecules`.

Letters: b batch (molecules), n atoms (padded), t targets.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Any, Mapping, Sequence

import torch
from torch.utils.data import DataLoader, Dataset

from seqattn.datakit.items import Item
from seqattn.datakit.module import PREDICT_SKIP_HINT, TaskDataModule
from seqattn.datakit.spec import DataSpec
from seqattn.datakit.splits import split
from seqattn.modalities.graph.batching import collate_graphs
from seqattn.modalities.graph.molecules import (
    ATOM_FEATURES,
    BOND_FEATURES,
    ELEMENTS,
    FEATURIZER_VERSION,
    KINDS,
    MOLECULENET,
    TOKENS,
    atom_feature_width,
    featurize_records,
    moleculenet_csv,
    nci_tpsa_path,
    read_smiles_lines,
    read_smiles_table,
)
from seqattn.modalities.graph.positional import GRAPH_POSITIONALS

log = logging.getLogger("seqattn.modalities.graph")

SOURCES = ("nci_tpsa", "csv", "moleculenet")
SPLITS_BY = ("random", "scaffold")
_PACKED = ("x", "edge_index", "edge_attr", "pe", "targets")




def pack_graphs(graphs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """A list of graph dicts -> a few concatenated tensors + offsets (fast to save and load)."""
    out: dict[str, Any] = {}
    for key in _PACKED:
        if key in graphs[0]:
            dim = 1 if key == "edge_index" else 0
            out[key] = torch.cat([g[key] for g in graphs], dim=dim)
            out[key + "_len"] = torch.tensor([g[key].shape[dim] for g in graphs])
    for key in graphs[0]:
        if key not in _PACKED:
            out[key] = [g[key] for g in graphs]
    return out


def unpack_graphs(packed: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Inverse of :func:`pack_graphs`."""
    pieces: dict[str, list] = {}
    for key in _PACKED:
        if key in packed:
            dim = 1 if key == "edge_index" else 0
            pieces[key] = list(torch.split(packed[key], packed[key + "_len"].tolist(), dim=dim))
    lists = {k: v for k, v in packed.items() if k not in _PACKED and not k.endswith("_len")}
    n = len(next(iter(pieces.values())))
    return [{**{k: v[i] for k, v in pieces.items()}, **{k: v[i] for k, v in lists.items()}} for i in range(n)]


class GraphListDataset(Dataset):
    """A list of featurised graphs (dicts for :func:`~seqattn.modalities.graph.batching.collate_graphs`)."""

    def __init__(self, graphs: Sequence[dict[str, Any]]) -> None:
        self.graphs = list(graphs)

    def __len__(self) -> int:
        return len(self.graphs)

    def __getitem__(self, index: int) -> dict[str, Any]:
        g = self.graphs[index]
        return {k: v for k, v in g.items() if k not in ("scaffold", "split")}


def collate_molecules(graphs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """``collate_graphs`` plus ``targets [B, T]`` (NaN = missing), ``ids`` and ``smiles`` lists."""
    batch = collate_graphs(graphs)
    if "targets" in batch and isinstance(batch["targets"], list):  # T = 0 (prediction input)
        batch.pop("targets")
    return batch


class MoleculeDataModule(TaskDataModule):
    """Molecule property data: SMILES -> graphs, splits, loaders, and the predict protocol.

    Batches (``collate_molecules``): ``x [B, N, F]`` (``F = ATOM_FEATURES``, + ``ATOM_DESCRIPTORS`` with
    ``atom_descriptors``), ``mask [B, N]``, ``edge_index [2, E]``,
    ``edge_attr [E, BOND_FEATURES]``, ``pe [B, N, pe_dim]`` (when ``positional != none``),
    ``targets [B, T]`` (NaN = missing), ``ids``, ``smiles``.

    Args (besides :class:`~seqattn.datakit.module.TaskDataModule`'s):
        source: ``nci_tpsa`` | ``csv`` | ``moleculenet``; None: ``csv`` when ``path`` is given, else ``nci_tpsa``.
        path: the CSV for ``source=csv``.
        smiles_column, target_columns, target_kinds: the CSV's columns (``target_kinds`` one for all
            or one per column); ``moleculenet`` fills them from the set.
        id_column: optional column with molecule ids (default: the SMILES).
        moleculenet: the set's name for ``source=moleculenet``.
        split: ``random`` | ``scaffold`` (Bemis–Murcko; the largest scaffold groups train, the rarest test);
            a ``split_column`` in the CSV overrides both (the file's own split, on every row or on none).
        split_column: a column naming each molecule's split (train / val / test), or None.
        skip_invalid: go on without unparsable SMILES (counted, logged with file:line) instead of
            stopping with the list. ``None``: stop for your files (``csv``, ``moleculenet``); skip for the
            built-in ``nci_tpsa`` file, which holds 8 SMILES RDKit rejects (hypervalent Al/Be/Si/P/Hg).
        positional, pe_dim: the graph positional encoding computed once per molecule; the task config
            ties them to ``adapter.positional`` / ``adapter.pe_dim`` (one owner: the adapter).
        limit: use only the first ``limit`` molecules of the file (quick runs).
        cache: keep the featurised graphs under ``data_dir/molecules/``.
        bucket_by_length, bucket_batches: training batches of molecules of similar sizes (shuffled pools
            of ``bucket_batches`` batches sorted by atom count): less padding in every layer.
        train_fraction: keep this share of the training molecules (a seeded sample, after the split: the
            val and test molecules are those of ``train_fraction=1``); the target statistics are the kept
            molecules'. Few-label runs (fine-tuning from a pretrained checkpoint).
        atom_descriptors: each atom also carries its Crippen logP and molar-refractivity contributions and its
            Gasteiger charge (:func:`~seqattn.modalities.graph.molecules.atom_descriptor_values`, 3 more columns
            of ``x``; mixed on FreeSolv / Lipophilicity validation, so off by default: tasks/molecule/README.md).

    Missing target values (an empty cell, ``nan``) are masked out of that target's loss and metrics;
    ``setup()`` logs their count per target and split (:meth:`missing_targets`).
    """

    collate = staticmethod(collate_molecules)

    def __init__(
        self,
        source: str | None = None,
        path: str | None = None,
        smiles_column: str = "smiles",
        target_columns: Sequence[str] | None = None,
        target_kinds: str | Sequence[str] = "regression",
        id_column: str | None = None,
        moleculenet: str | None = None,
        split: str = "random",
        split_column: str | None = None,
        val_fraction: float = 0.1,
        test_fraction: float = 0.1,
        skip_invalid: bool | None = None,
        positional: str = "none",
        pe_dim: int = 8,
        batch_size: int = 128,
        num_workers: int = 0,
        seed: int = 0,
        data_dir: str | None = None,
        limit: int | None = None,
        cache: bool = True,
        encoding: str = "utf-8",
        bucket_by_length: bool = False,
        bucket_batches: int = 50,
        train_fraction: float = 1.0,
        tokens: str = "atoms",
        atom_descriptors: bool = False,
    ) -> None:
        if not isinstance(atom_descriptors, bool):
            raise ValueError(f"atom_descriptors must be true or false (Crippen contributions and Gasteiger charges "
                             f"as 3 more atom features), got {atom_descriptors!r}")
        self.atom_descriptors = atom_descriptors
        if source is None:
            source = "csv" if path else ("moleculenet" if moleculenet else "nci_tpsa")
        if source not in SOURCES:
            raise ValueError(f"source={source!r} is not one of {SOURCES}")
        if source == "csv" and not path:
            raise ValueError("source='csv' needs path=<your SMILES CSV>")
        if source != "csv" and path:
            raise ValueError(f"data.path={path!r} is given but data.source={source} would ignore it; drop data.source "
                             "(a path selects the csv source) or the path")
        if source == "moleculenet" and not moleculenet:
            raise ValueError(f"source='moleculenet' needs moleculenet=<one of {sorted(MOLECULENET)}>")
        if split not in SPLITS_BY:
            raise ValueError(f"split={split!r} is not one of {SPLITS_BY}")
        if positional not in GRAPH_POSITIONALS:
            raise ValueError(f"positional={positional!r} is not one of {GRAPH_POSITIONALS}")
        if tokens not in TOKENS:
            raise ValueError(f"tokens={tokens!r} is not one of {TOKENS} (one token per atom, or per bond)")
        self.tokens = tokens
        super().__init__(batch_size=batch_size, num_workers=num_workers, seed=seed, data_dir=data_dir,
                         val_fraction=val_fraction, test_fraction=test_fraction, limit=limit, encoding=encoding,
                         bucket_by_length=bucket_by_length, bucket_batches=bucket_batches,
                         train_fraction=train_fraction)
        self.source, self.path, self.moleculenet = source, path, moleculenet
        self.smiles_column, self.id_column = smiles_column, id_column
        if source == "nci_tpsa":
            target_columns = target_columns or ["tpsa"]
            target_kinds = "regression"
        elif source == "csv" and not target_columns:
            raise ValueError("source='csv' needs target_columns=[...] (the property column names)")
        self.target_columns = list(target_columns or [])
        self._kinds_arg = target_kinds
        self.split, self.split_column = split, split_column
        self.skip_invalid_predict = bool(skip_invalid)  # the user's own predict input: skip only when told
        if skip_invalid is None:
            skip_invalid = source == "nci_tpsa"
        self.skip_invalid, self.positional, self.pe_dim = bool(skip_invalid), positional, int(pe_dim)
        self.cache = cache
        self.invalid: list[str] = []
        self.target_mean: list[float] | None = None
        self.target_std: list[float] | None = None

    def item_length(self, dataset, index: int) -> int:
        """Tokens (atoms or bonds) of molecule ``index`` (for ``bucket_by_length``: batches of similar sizes pad less)."""
        return int(dataset[index]["x"].shape[0])

    # -- what the model needs -------------------------------------------------------------------
    @property
    def node_features(self) -> int:
        """Width of a token's features: an atom's, or (``tokens="bonds"``) its two atoms' sum and the bond's."""
        bond = BOND_FEATURES if self.tokens == "bonds" else 0
        return atom_feature_width(self.atom_descriptors) + bond

    @property
    def edge_features(self) -> int:
        """Width of an edge's features: a bond's, or (``tokens="bonds"``) the atom two bonds share."""
        return atom_feature_width(self.atom_descriptors) if self.tokens == "bonds" else BOND_FEATURES

    def atom_descriptor_columns(self) -> slice | None:
        """The columns of an atom token's ``x`` that hold the atom descriptors (``atom_descriptors=True``), or None
        (off, or bond tokens). ``bench real`` hands them to its reference model, which has its own featuriser."""
        if not self.atom_descriptors or self.tokens != "atoms":
            return None
        return slice(ATOM_FEATURES, atom_feature_width(True))

    @property
    def target_kinds(self) -> list[str]:
        kinds = self._kinds_arg
        kinds = [kinds] * len(self.target_columns) if isinstance(kinds, str) else list(kinds)
        if len(kinds) != len(self.target_columns) or any(k not in KINDS for k in kinds):
            raise ValueError(f"target_kinds must be one of {KINDS} or one per target column "
                             f"{self.target_columns}, got {self._kinds_arg!r}")
        return kinds

    @property
    def label_names(self) -> list[str]:
        return list(self.target_columns)

    @property
    def num_outputs(self) -> int:
        return len(self.target_columns)

    def spec(self) -> DataSpec:
        """Targets (names, kinds, training mean / std), atom and bond feature widths, the ``pe`` computed."""
        if self.target_mean is None:
            raise RuntimeError("spec() needs setup() (target statistics come from the train split)")
        return DataSpec(num_outputs=self.num_outputs, labels=self.label_names,
                        sizes={"node_features": self.node_features, "edge_features": self.edge_features},
                        target_kinds=self.target_kinds, target_mean=self.target_mean, target_std=self.target_std,
                        provides={"pe": "none" if self.positional == "none" else f"{self.positional}/{self.pe_dim}"})

    # -- lifecycle ------------------------------------------------------------------------------
    def _records(self) -> list[dict[str, Any]]:
        if self.source == "nci_tpsa":
            return read_smiles_table(nci_tpsa_path(), "smiles", ["tpsa"], ["regression"], header=False,
                                     names=["smiles", "tpsa"])
        if self.source == "moleculenet":
            raw, smiles_col, targets = moleculenet_csv(self.moleculenet, self.data_dir / "moleculenet")
            self.smiles_column = smiles_col
            if not self.target_columns:
                self.target_columns = targets
                self._kinds_arg = MOLECULENET.get(self.moleculenet.lower(), "classification")
            return read_smiles_table(raw, smiles_col, self.target_columns, self.target_kinds, id_column=self.id_column)
        return read_smiles_table(self.path, self.smiles_column, self.target_columns, self.target_kinds,
                                 id_column=self.id_column, encoding=self.encoding, split_column=self.split_column)

    def _source_file(self) -> Path:
        if self.source == "nci_tpsa":
            return nci_tpsa_path()
        return Path(self.path).expanduser()

    def _cache_path(self) -> Path | None:
        if not self.cache or self.source == "moleculenet":
            return None
        src = self._source_file()
        if not src.is_file():
            raise ValueError(f"SMILES file {src} does not exist")
        stat = src.stat()
        key = json.dumps([str(src.resolve()), stat.st_size, stat.st_mtime_ns, self.smiles_column, self.target_columns,
                          self.target_kinds, self.id_column, self.positional, self.pe_dim, self.skip_invalid,
                          self.split, self.split_column, self.limit, self.encoding, FEATURIZER_VERSION]
                         + ([self.tokens] if self.tokens != "atoms" else [])  # atom caches keep their names
                         + (["atom_descriptors"] if self.atom_descriptors else []))
        return self.data_dir / "molecules" / f"{hashlib.sha1(key.encode()).hexdigest()[:16]}.pt"

    def _load_graphs(self) -> list[dict[str, Any]]:
        cache = self._cache_path()
        if cache is not None and cache.is_file():
            saved = torch.load(cache, weights_only=False)
            self.invalid = saved["invalid"]
            graphs = unpack_graphs(saved["packed"])
            if self.invalid:
                log.warning("%d invalid SMILES were skipped (skip_invalid=true): %s", len(self.invalid),
                            self.invalid[:10])
            log.info("molecule graphs from the cache %s", cache)
            return graphs
        records = self._records()
        if self.limit is not None:
            records = records[: self.limit]
        graphs, self.invalid = featurize_records(records, self.skip_invalid, self.positional, self.pe_dim,
                                                 scaffolds=self.split == "scaffold", tokens=self.tokens,
                                                 atom_descriptors=self.atom_descriptors)
        if cache is not None and graphs:
            cache.parent.mkdir(parents=True, exist_ok=True)
            tmp = cache.with_suffix(f".tmp{os.getpid()}")
            torch.save({"packed": pack_graphs(graphs), "invalid": self.invalid}, tmp)
            os.replace(tmp, cache)  # atomic
        return graphs

    def prepare_data(self) -> None:
        if self.source == "moleculenet":
            moleculenet_csv(self.moleculenet, self.data_dir / "moleculenet")

    def setup(self, stage: str | None = None) -> None:
        if self.datasets:
            return
        graphs = self._load_graphs()
        if not graphs:
            raise ValueError(f"no molecules to train on from source={self.source!r}")
        given = (lambda g: g.get("split")) if self.split_column else None
        if self.split == "scaffold":
            parts = split(graphs, self.val_fraction, self.test_fraction, self.seed, given=given,
                          group=lambda g: g["scaffold"], group_order="largest_first", what="molecules")
        else:
            parts = split(graphs, self.val_fraction, self.test_fraction, self.seed, given=given, what="molecules")
        parts["train"] = self.subsample_train(list(parts["train"]))  # train_fraction; val and test untouched
        if not parts["train"]:
            raise ValueError(f"no training molecules after the {self.split} split ({ {k: len(v) for k, v in parts.items()} })")
        for name, part in parts.items():
            self.datasets[name] = GraphListDataset(part)
        train_y = torch.stack([g["targets"] for g in self.datasets["train"].graphs])  # [n, T]
        mean, std = [], []
        for t, kind in enumerate(self.target_kinds):
            col = train_y[:, t][~torch.isnan(train_y[:, t])]
            if col.numel() == 0:
                raise ValueError(f"target {self.target_columns[t]!r} has no label in the training split")
            if kind == "regression":
                mean.append(float(col.mean()))
                s = float(col.std()) if col.numel() > 1 else 1.0
                std.append(s if s > 1e-8 else 1.0)
            else:
                if col.min() == col.max():
                    raise ValueError(f"classification target {self.target_columns[t]!r} has only the value "
                                     f"{int(col[0])} in the training split; it needs both 0 and 1")
                mean.append(0.0)
                std.append(1.0)
        self.target_mean, self.target_std = mean, std
        self._log_missing_targets()
        log.info("molecules (%s, %s split): %s; invalid SMILES skipped: %d; targets %s", self.source, self.split,
                 {k: len(v) for k, v in self.datasets.items()}, len(self.invalid), self.target_columns)

    def missing_targets(self) -> dict[str, dict[str, int]]:
        """Per target, per split: molecules without that label (after ``setup()``); only nonzero counts."""
        out: dict[str, dict[str, int]] = {}
        for name, data in self.datasets.items():
            if not len(data):
                continue
            y = torch.stack([g["targets"] for g in data.graphs])  # [n, T]
            for column, n in zip(self.target_columns, torch.isnan(y).sum(dim=0).tolist()):
                if n:
                    out.setdefault(column, {})[name] = int(n)
        return out

    def _log_missing_targets(self) -> None:
        missing = self.missing_targets()
        if missing:
            sizes = {name: len(data) for name, data in self.datasets.items()}
            shown = "; ".join(f"{column!r}: " + ", ".join(f"{n} of {sizes[s]} {s}" for s, n in per.items())
                              for column, per in missing.items())
            log.warning("molecules without a label, masked out of that target's loss and metrics: %s", shown)

    # -- predict protocol -----------------------------------------------------------------------
    def predict_loader(self, source: str | Path, batch_size: int | None = None) -> DataLoader:
        """Batches of molecules to predict: a CSV with a header and the ``smiles_column`` (and the
        ``id_column`` when it has it, else rows are named by their SMILES, logged; other columns are
        ignored), or a ``.smi`` / ``.txt`` file with one
        SMILES (and an optional name) per line. Malformed CSV rows and invalid SMILES are left out and recorded
        (``predict_errors``, file:line) with ``on_error="skip"`` (the default) or ``skip_invalid=true``;
        with ``on_error="stop"`` they stop with the list. Works without ``setup()``."""
        path = Path(source).expanduser()
        if not path.is_file():
            raise ValueError(f"predict input {path} is not a file (expected a SMILES .csv, .smi or .txt)")
        if path.suffix.lower() in (".smi", ".txt"):
            records = read_smiles_lines(path, self.encoding)
        else:
            bad: list[tuple[str, str]] = []
            records = read_smiles_table(path, self.smiles_column, (), id_column=self.id_column, encoding=self.encoding,
                                        skipped=bad if self.on_error == "skip" else None, id_optional=True)
            self.record_malformed(path, bad, len(records), "row(s)", "molecule(s)")
        skip = self.skip_invalid_predict or self.on_error == "skip"
        graphs, invalid = featurize_records(records, skip, self.positional, self.pe_dim, hint=PREDICT_SKIP_HINT,
                                            tokens=self.tokens, atom_descriptors=self.atom_descriptors)
        self.record_skipped((entry.rsplit(": ", 1)[0], f"RDKit cannot parse the SMILES {entry.rsplit(': ', 1)[-1]}")
                            for entry in invalid)
        if not graphs:
            raise ValueError(f"{path}: no valid SMILES to predict (invalid: {invalid[:10]})")
        for g in graphs:
            g.pop("targets")
        return self.predict_batches(GraphListDataset(graphs), batch_size)

    def describe(self, batch: Mapping[str, Any]) -> list[Item]:
        """Per molecule: its ``smiles``."""
        return [Item(id=str(i), fields={"smiles": s}) for i, s in zip(batch["ids"], batch["smiles"])]


def collate_unlabelled_molecules(graphs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """:func:`collate_molecules` without ``targets``."""
    batch = collate_molecules(graphs)
    batch.pop("targets", None)
    return batch


#: the node types of :func:`~seqattn.modalities.graph.molecules.mol_to_graph`'s features: its first one-hot group,
#: the element (``ELEMENTS`` and "other"); masked-atom pretraining predicts it
NODE_TYPES = len(ELEMENTS) + 1


class SmilesDataModule(MoleculeDataModule):
    """Unlabelled molecules, for masked-atom pretraining (``task=molecule_pretrain``): the same sources and
    options as :class:`MoleculeDataModule`, targets never read.

    Sources: ``nci_tpsa`` (the NCI molecules RDKit ships; TPSA unused), ``csv`` (``path``: a CSV with a header
    and the ``smiles_column``, other columns ignored; or a ``.smi`` / ``.txt`` file with one SMILES, and an
    optional name, per line) and ``moleculenet`` (its SMILES). ``target_columns`` / ``target_kinds`` are
    ignored. Batches as :class:`MoleculeDataModule`'s without ``targets``. The spec's ``num_outputs`` and
    ``sizes.node_types`` are the :data:`NODE_TYPES` element classes (the adapter's targets: x's first
    one-hot group); it has no labels or target statistics.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["target_columns"], kwargs["target_kinds"] = ["unused"], "regression"  # (read as none below)
        if kwargs.get("tokens", "atoms") != "atoms":
            raise ValueError(f"masked-atom pretraining predicts each hidden atom's element: it needs tokens=atoms, "
                             f"got tokens={kwargs['tokens']!r}")
        super().__init__(*args, **kwargs)
        self.target_columns = []

    def _records(self) -> list[dict[str, Any]]:
        if self.source == "nci_tpsa":
            return read_smiles_table(nci_tpsa_path(), "smiles", [], header=False, names=["smiles", "tpsa"])
        if self.source == "moleculenet":
            raw, smiles_col, _ = moleculenet_csv(self.moleculenet, self.data_dir / "moleculenet")
            self.smiles_column = smiles_col
            return read_smiles_table(raw, smiles_col, [], id_column=self.id_column)
        if Path(self.path).suffix.lower() in (".smi", ".txt"):
            return read_smiles_lines(self.path, self.encoding)
        return read_smiles_table(self.path, self.smiles_column, [], id_column=self.id_column, encoding=self.encoding,
                                 split_column=self.split_column)

    def spec(self) -> DataSpec:
        """Atom and bond feature widths, the element classes (``sizes.node_types``), the ``pe`` computed."""
        if not self.datasets:
            raise RuntimeError("spec() needs setup()")
        return DataSpec(num_outputs=NODE_TYPES, labels=None,
                        sizes={"node_features": self.node_features, "edge_features": BOND_FEATURES,
                               "node_types": NODE_TYPES},
                        provides={"pe": "none" if self.positional == "none" else f"{self.positional}/{self.pe_dim}"})

    def _log_missing_targets(self) -> None:
        """Nothing: no targets."""

    collate = staticmethod(collate_unlabelled_molecules)
