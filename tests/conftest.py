"""Shared fixtures: every test starts from the same random state."""

import random

import numpy as np
import pytest
import torch


@pytest.fixture(autouse=True)
def _seed_everything():
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
    yield


@pytest.fixture
def compose_cfg(tmp_path):
    """Compose the Hydra config as ``python -m seqattn.run`` would, with outputs under tmp_path."""
    from hydra import compose, initialize_config_dir
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import open_dict

    from seqattn.run import CONFIG_DIR

    def _compose(overrides=(), data_dir=None, run="run"):
        with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
            cfg = compose("config", overrides=list(overrides), return_hydra_config=True)
        HydraConfig.instance().set_config(cfg)
        with open_dict(cfg):
            cfg.paths.output_dir = str(tmp_path / run)
            cfg.paths.data_dir = str(data_dir or tmp_path / "data")
            del cfg.hydra
        return cfg

    return _compose
