"""The network around the core: the parts' declared interfaces, the network, heads, baselines.

- :mod:`~seqattn.model.protocols`: what an adapter, encoder and head must provide;
- :mod:`~seqattn.model.network`: :class:`SequenceModel` = adapter -> [global token] -> encoder -> head;
- :mod:`~seqattn.model.heads`: :class:`TokenHead`, :class:`PooledHead`;
- :mod:`~seqattn.model.baselines`: no-context, sliding-window, CNN and BiLSTM encoders;
- :mod:`~seqattn.model.build`: a network from its config and the data's spec.

Imports the core only: no Lightning, no Hydra, no files.
"""

from seqattn.model.build import build_network
from seqattn.model.heads import PooledHead, TokenHead
from seqattn.model.network import SequenceModel
from seqattn.model.protocols import AdapterBase, HeadBase

__all__ = ["AdapterBase", "HeadBase", "PooledHead", "SequenceModel", "TokenHead", "build_network"]
