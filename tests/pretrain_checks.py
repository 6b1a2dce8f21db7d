"""The check every ``tests/test_run_<modality>_pretrain.py`` makes of ``init_from=<a pretraining checkpoint>``:
the adapter and the encoder hold the checkpoint's tensors (a vocabulary table's entries matched by token),
the head (and a global token) keep their fresh initialisation, and the log says why the head is new.

Modality-free: which adapter tensors are indexed by tokens comes from the adapter's ``vocab_tables()``
hook, as in :mod:`seqattn.training.finetune`.
"""

from __future__ import annotations

from typing import Any, Sequence

import pytest
import torch
from torch import nn

from seqattn.model.protocols import vocab_tables
from seqattn.training.checkpoint import read_checkpoint
from seqattn.training.finetune import FinetuneOptions, apply_finetune

# what a labelled task adds on top of a pretraining run: never loaded from it (written here, not imported
# from the module under test)
FRESH = ("net.head.", "net.global_token")
LOADED = ("net.adapter.", "net.encoder.")


def assert_starts_from_pretraining(model: nn.Module, options: FinetuneOptions, caplog: pytest.LogCaptureFixture,
                                   must_load: Sequence[str] = (), min_shared_tokens: int = 10) -> dict[str, Any]:
    """Apply ``options`` (an ``init_from=`` of a masked-modelling checkpoint) to ``model``, a freshly built
    labelled objective, and check what it started from:

    - the log names the pretraining objective and says the head is new; every re-initialised tensor is
      the head's (or the global token's), and those keep their fresh values exactly;
    - every ``net.adapter.*`` / ``net.encoder.*`` tensor equals the checkpoint's exactly, except the
      adapter's vocabulary tables, whose entries equal the checkpoint's entry **of the same token**
      (at least ``min_shared_tokens`` tokens shared per table);
    - ``must_load``: prefixes each of which at least one loaded tensor starts with (e.g.
      ``"net.adapter.proj."``); the encoder always must load;
    - no mask vector reaches the labelled model.

    Returns the fine-tuning summary (``apply_finetune``'s).
    """
    fresh = {k: v.clone() for k, v in model.state_dict().items() if k.startswith(FRESH)}
    with caplog.at_level("INFO", logger="seqattn.training.finetune"):
        summary = apply_finetune(model, options)
    assert "trained by seqattn.objectives.MaskedModelling" in caplog.text and "the head is new" in caplog.text
    assert summary["new"] and all(n.startswith(FRESH) for n in summary["new"]), summary["new"]
    source = read_checkpoint(options.init_from)
    pretrained, spec = source["state_dict"], source["hyper_parameters"]["spec"]
    state = model.state_dict()
    assert not any("mask_vector" in k for k in state)
    loaded = [k for k in state if k.startswith(LOADED)]
    for prefix in ("net.encoder.", *must_load):
        assert any(k.startswith(prefix) for k in loaded), (prefix, loaded)
    tables = {f"net.adapter.{name}": table for name, table in vocab_tables(model.net.adapter).items()}
    for name in loaded:
        if name not in tables:  # the checkpoint's tensor exactly
            torch.testing.assert_close(state[name], pretrained[name], rtol=0, atol=0, msg=name)
            continue
        table = tables[name]  # entries matched by token, not by position
        old_tokens = list(spec[table.spec_key])
        where = {token: j for j, token in enumerate(old_tokens)}
        shared = [(i, where[t]) for i, t in enumerate(table.tokens) if t in where]
        assert len(shared) >= min_shared_tokens, (name, len(shared))
        new, old = state[name].movedim(table.axis, 0), pretrained[name].movedim(table.axis, 0)
        for i, j in shared:
            torch.testing.assert_close(new[i], old[j], rtol=0, atol=0, msg=f"{name}[{table.tokens[i]!r}]")
    for name, value in fresh.items():  # the head (and a global token) keep their fresh initialisation
        torch.testing.assert_close(state[name], value, rtol=0, atol=0, msg=name)
    return summary
