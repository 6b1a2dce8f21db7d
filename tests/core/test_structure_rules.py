"""structure_mask (the dense reference every planned kernel is compared with) against the rules written
out by hand, for each rule and their combinations with global tokens."""

import pytest
import torch

from seqattn.core.masks import structure_mask
from tests.core.structure_by_hand import allowed_by_hand

STRUCTURES = [dict(window=0), dict(window=3), dict(window=2, causal=True), dict(causal=True),
              dict(window=3, num_global=2), dict(causal=True, num_global=1), dict(window=1, causal=True, num_global=1),
              dict(grid=(4, 5), grid_window=3), dict(grid=(4, 5), grid_window=5, num_global=1),
              dict(grid=(4, 5), grid_window=3, window=6), dict(grid=(3, 4), grid_window=3, causal=True, num_global=2)]


@pytest.mark.parametrize("structure", STRUCTURES, ids=lambda s: ",".join(f"{k}={v}" for k, v in s.items()))
def test_structure_mask_follows_the_rules_written_out(structure):
    tokens = structure["grid"][0] * structure["grid"][1] if "grid" in structure else 13
    length = tokens + structure.get("num_global", 0)
    assert torch.equal(structure_mask(length, **structure), allowed_by_hand(length, **structure))
