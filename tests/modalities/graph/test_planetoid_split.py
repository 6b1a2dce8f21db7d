"""``data.planetoid_split`` of task=social: ``public`` (the standard split) vs ``full`` (PyG's ``split="full"``: every
labelled node outside the validation and test nodes trains), on a small synthetic Planetoid graph written in the raw
format PyG reads and on the real Cora raw files when present (``$SEQATTN_REAL_DATA``, ``/work/shared/data`` or a
``shared/data`` beside a folder above the checkout; skipped otherwise)."""

import logging
import os
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from seqattn.labels import IGNORE_INDEX
from seqattn.modalities.graph.social import SocialDataModule
from seqattn.modalities.graph.social_files import planetoid_csv


def _real_cora() -> Path | None:
    candidates = [Path(os.environ["SEQATTN_REAL_DATA"])] if os.environ.get("SEQATTN_REAL_DATA") else []
    candidates += [Path("/work/shared/data")] + [p / "shared" / "data" for p in Path(__file__).resolve().parents]
    return next((p for p in candidates if (p / "Cora" / "raw" / "ind.cora.graph").is_file()), None)


REAL = _real_cora()

#: the synthetic graph: PyG's reader makes nodes 0..TRAIN-1 the public training nodes and the next 500 the
#: validation nodes; EXTRA labelled nodes follow (unused by the public split) and TEST nodes come last
TRAIN, VAL, EXTRA, TEST = 6, 500, 14, 30


def _synthetic_raw(root: Path) -> Path:
    """Planetoid raw files ``root/Cora/raw/ind.cora.*`` of a small graph (two classes, two features, a ring)."""
    raw = root / "Cora" / "raw"
    raw.mkdir(parents=True)
    rng = np.random.default_rng(0)
    n_all = TRAIN + VAL + EXTRA
    n = n_all + TEST

    def onehot(k):
        y = np.zeros((k, 2), dtype=np.float32)
        y[np.arange(k), rng.integers(0, 2, k)] = 1.0
        return y

    allx, ally = rng.random((n_all, 2)).astype(np.float32), onehot(n_all)
    items = {"x": allx[:TRAIN], "y": ally[:TRAIN], "allx": allx, "ally": ally,
             "tx": rng.random((TEST, 2)).astype(np.float32), "ty": onehot(TEST),
             "graph": {i: [(i + 1) % n] for i in range(n)}}
    for name, value in items.items():
        with open(raw / f"ind.cora.{name}", "wb") as f:
            pickle.dump(value, f)
    (raw / "ind.cora.test.index").write_text("".join(f"{i}\n" for i in range(n_all, n)))
    return root


def _graph(root: Path, data_dir: Path, split: str | None):
    kwargs = {} if split is None else {"planetoid_split": split}
    dm = SocialDataModule(source="planetoid", name="Cora", root=str(root), data_dir=str(data_dir), mode="full", **kwargs)
    dm.setup()
    return dm.graph


def _check_full_against_public(public, full, n_train_full: int):
    nodes = {k: {s: set(g.nodes_of(s).tolist()) for s in ("train", "val", "test")} for k, g in
             (("public", public), ("full", full))}
    assert nodes["full"]["val"] == nodes["public"]["val"] and nodes["full"]["test"] == nodes["public"]["test"]
    others = set(range(full.num_nodes)) - nodes["full"]["val"] - nodes["full"]["test"]
    assert nodes["full"]["train"] == others and len(others) == n_train_full
    assert nodes["public"]["train"] < nodes["full"]["train"]
    assert bool((full.y[full.split == 0] != IGNORE_INDEX).all())  # every training node has its label
    # the shared nodes keep their label and features
    assert torch.equal(full.x, public.x) and torch.equal(full.edge_index, public.edge_index)
    labelled = public.y != IGNORE_INDEX
    assert torch.equal(full.y[labelled], public.y[labelled])


def test_full_split_trains_every_node_outside_val_and_test_on_a_synthetic_graph(tmp_path, caplog):
    root = _synthetic_raw(tmp_path / "raw_root")
    with caplog.at_level(logging.INFO, logger="seqattn.modalities.graph"):
        full = _graph(root, tmp_path / "data", "full")  # first: the public split's files must not be these
    assert "Cora, full split" in caplog.text
    public = _graph(root, tmp_path / "data", "public")
    default = _graph(root, tmp_path / "data", None)
    assert set(public.nodes_of("train").tolist()) == set(range(TRAIN))
    assert torch.equal(default.split, public.split)  # public is the default
    assert len(public.nodes_of("val")) == VAL and len(public.nodes_of("test")) == TEST
    _check_full_against_public(public, full, TRAIN + EXTRA)
    # each split's CSV cache has its own folder
    assert planetoid_csv(tmp_path / "data", "Cora", split="full") != planetoid_csv(tmp_path / "data", "Cora")


@pytest.mark.skipif(REAL is None, reason="no Cora raw files (../shared/data/Cora/raw/ind.cora.*; $SEQATTN_REAL_DATA)")
def test_full_split_on_real_cora_is_1208_training_nodes_and_the_public_val_and_test(tmp_path):
    public = _graph(REAL, tmp_path / "data", "public")
    full = _graph(REAL, tmp_path / "data", "full")
    assert (len(public.nodes_of("train")), len(public.nodes_of("val")), len(public.nodes_of("test"))) == (140, 500, 1000)
    _check_full_against_public(public, full, 1208)


@pytest.mark.parametrize("bad", ["Full", "random", ""])
def test_an_unknown_planetoid_split_names_the_value_and_the_choices(tmp_path, bad):
    with pytest.raises(ValueError, match=rf"planetoid_split='{bad}'.*'public', 'full'"):
        SocialDataModule(source="planetoid", data_dir=str(tmp_path), planetoid_split=bad)
    with pytest.raises(ValueError, match=rf"'{bad}'.*'public', 'full'"):
        planetoid_csv(tmp_path, "Cora", split=bad)


def test_the_task_config_passes_data_planetoid_split_public_by_default(tmp_path):
    from hydra import compose, initialize_config_dir
    from hydra.utils import instantiate

    from seqattn.configs import CONFIG_DIR

    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        default = compose("config", overrides=["task=social", "data.source=planetoid"])
        bad = compose("config", overrides=["task=social", "data.source=planetoid", "data.planetoid_split=fulll"])
    assert instantiate(default.data, data_dir=str(tmp_path)).planetoid_split == "public"
    with pytest.raises(Exception, match=r"planetoid_split='fulll' is not one of \('public', 'full'\)"):
        instantiate(bad.data, data_dir=str(tmp_path))  # Hydra wraps the ValueError, its message kept
