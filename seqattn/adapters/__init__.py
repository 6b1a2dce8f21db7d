"""Modality front ends: raw input -> :class:`seqattn.core.tokens.Tokens`."""
