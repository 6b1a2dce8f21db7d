"""seqattn: one self-attention core for text, speech, images and graphs.

The path of a batch::

    raw example --adapter--> Tokens(x [B, L, D], mask [B, L])
                --Encoder--> [B, L, D] --head--> logits --objective--> loss, metrics

Import the pieces you need::

    from seqattn.core import MultiHeadAttention, Encoder, scaled_dot_product_attention
    from seqattn.modalities.audio import AudioAdapter

Layout: ``core/`` (attention), ``model/`` (network, heads, baselines), ``datakit/`` (modality-free data
machinery), ``modalities/<m>/`` (one folder per modality), ``objectives/`` (Lightning objectives),
``training/`` (callbacks, checkpoints, fine-tuning, resume, sweeps); entry points ``run``,
``predict``, ``export``, ``bench``.
"""

__version__ = "0.1.0"


def load(ckpt, device="cpu", weights_only=True, data=None):
    """A trained model from a ``seqattn.run`` checkpoint: ``seqattn.load(path).predict(source) -> rows``;
    ``data`` sets data options over the checkpoint's (``data={"id_column": "name"}``).

    See :class:`seqattn.predict.Predictor` (``.model``, ``.datamodule``, ``.labels``, ``.predict``).
    """
    from seqattn.predict import load as _load

    return _load(ckpt, device=device, weights_only=weights_only, data=data)
