"""Hydra configs of seqattn; installed as the package ``seqattn.conf`` (see pyproject.toml)."""
