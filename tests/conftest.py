"""Shared fixtures: every test starts from the same random state."""

import os
import random

import numpy as np
import pytest
import torch


def pytest_configure(config):
    """Under pytest-xdist, each worker takes its share of the cores as intra-op threads.

    Two workers at two threads each on two cores spend their time waiting for one another (every
    small op synchronises its threads); the suite's tensors are tiny, so one thread per worker loses
    nothing. Subprocesses the tests start (``seqattn.run``) already get ``OMP_NUM_THREADS=1``.
    """
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0") or 0)
    if workers > 1:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // workers))


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
