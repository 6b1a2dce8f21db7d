"""One owner per knob: the graph positional encoding is ``adapter.positional``; the data follows it."""

import pytest
from hydra.utils import instantiate

from seqattn.run import build_objective
from tests.workflows import QUIET, compose


@pytest.mark.parametrize("task, extra", [("molecule", ["data.limit=60"]), ("social", [])])
@pytest.mark.parametrize("positional", ["laplacian", "random_walk"])
def test_adapter_positional_reaches_the_model_and_the_data(task, extra, positional, tmp_path):
    cfg = compose([f"task={task}", f"adapter.positional={positional}", "adapter.pe_dim=6", *extra] + QUIET,
                  tmp_path / "run", tmp_path / "data")
    datamodule = instantiate(cfg.data)
    datamodule.setup("fit")
    assert (datamodule.positional, datamodule.pe_dim) == (positional, 6)
    model = build_objective(cfg, datamodule)
    adapter = model.net.adapter
    assert adapter.positional == positional and adapter.pe_proj is not None and adapter.pe_proj.in_features == 6
    batch = next(iter(datamodule.train_dataloader()))
    assert batch["pe"].shape[-1] == 6 and batch["pe"].abs().sum() > 0
    model.net(batch)  # the adapter reads the encodings the data computed


def test_a_data_override_that_contradicts_the_adapter_is_an_error(tmp_path):
    cfg = compose(["task=molecule", "data.limit=60", "adapter.positional=none", "data.positional=laplacian"] + QUIET,
                  tmp_path / "run", tmp_path / "data")
    datamodule = instantiate(cfg.data)
    datamodule.setup("fit")
    with pytest.raises(ValueError, match=r"computes node positional encodings 'laplacian/8' but the adapter reads "
                                         r"'none'.*adapter.positional"):
        build_objective(cfg, datamodule)
