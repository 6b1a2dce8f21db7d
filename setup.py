"""Package discovery for setuptools (the rest of the metadata is in pyproject.toml).

Every ``seqattn.*`` package is found automatically, so a new folder under ``seqattn/modalities/``
ships without editing this file; ``conf/`` (the Hydra tree, at the top of the checkout) ships inside
the wheel as ``seqattn.conf``, so an installed copy composes its recipes from any directory.
"""

from setuptools import find_packages, setup

setup(
    packages=[*find_packages(include=["seqattn", "seqattn.*"]), "seqattn.conf"],
    package_dir={"seqattn.conf": "conf"},
)
