"""The run log names the attention path: AttentionPathLog logs the plan summary once, at the first batch."""

import logging

import lightning as L
import torch
from torch import nn

from seqattn.core import Encoder, Tokens
from seqattn.model.baselines import TokenwiseMLP
from seqattn.training.attention_log import AttentionPathLog


class _Module(L.LightningModule):
    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    def training_step(self, batch, batch_idx):
        (x,) = batch
        mask = torch.ones(x.shape[:2], dtype=torch.bool)
        mask[0, 150:] = False
        out = self.net(Tokens(x, mask) if isinstance(self.net, Encoder) else x, mask)
        return out.square().mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def _fit(net: nn.Module, batches: int = 3) -> None:
    data = torch.utils.data.TensorDataset(torch.randn(2 * batches, 200, 8))
    trainer = L.Trainer(max_steps=batches, callbacks=[AttentionPathLog()], logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, accelerator="cpu")
    trainer.fit(_Module(net), torch.utils.data.DataLoader(data, batch_size=2))


def test_logs_the_plan_summary_once_at_the_first_batch(caplog):
    with caplog.at_level(logging.INFO, logger="seqattn.run"):
        _fit(Encoder(8, depth=2, heads=2, window=16, dropout=0.0))
    lines = [r.getMessage() for r in caplog.records if r.name == "seqattn.run"]
    assert lines == ["attention: band ±16 via the CPU flash kernel, 2 layers"]


def test_networks_without_a_seqattn_encoder_log_nothing(caplog):
    with caplog.at_level(logging.INFO, logger="seqattn.run"):
        _fit(TokenwiseMLP(8, depth=1), batches=1)
    assert not [r for r in caplog.records if r.name == "seqattn.run"]
