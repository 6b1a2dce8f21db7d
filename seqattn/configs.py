"""Where the Hydra config tree is, and which tasks it holds. Imports nothing of seqattn but its configs.

- :data:`CONFIG_DIR`: ``conf/`` at the top of a source checkout, else the installed package
  ``seqattn.conf`` (the wheel ships ``conf/`` under that name);
- :func:`task_names`: every recipe, one per ``conf/task/<task>.yaml``: what the benchmarks run and
  the workflow tests cover, so a new task is one YAML file and nothing lists it again;
- :func:`compose_config`: the config ``python -m seqattn.run <overrides>`` composes, for code that builds a run's
  parts in its own process (the benchmarks).

Light on purpose (no Hydra or torch at import; :func:`compose_config` imports Hydra when called):
``python -m seqattn.bench --help`` and the tests read it.
"""

from __future__ import annotations

from pathlib import Path


def config_dir() -> Path:
    """The folder holding ``config.yaml``: the checkout's ``conf/``, else the installed ``seqattn.conf``."""
    checkout = Path(__file__).resolve().parent.parent / "conf"
    if (checkout / "config.yaml").is_file():
        return checkout
    import seqattn.conf as installed  # an installed wheel ships conf/ as seqattn.conf

    return Path(installed.__file__).resolve().parent


CONFIG_DIR = config_dir()


def task_names(conf: str | Path | None = None) -> list[str]:
    """The tasks of a config tree (default :data:`CONFIG_DIR`), sorted: the stems of ``task/*.yaml``."""
    folder = Path(conf if conf is not None else CONFIG_DIR) / "task"
    if not folder.is_dir():
        raise ValueError(f"config tree {folder.parent} has no task/ folder: expected conf/task/<task>.yaml files")
    return sorted(p.stem for p in folder.glob("*.yaml"))


def compose_config(overrides: list[str]):
    """The ``DictConfig`` (unresolved) that ``python -m seqattn.run <overrides>`` composes from :data:`CONFIG_DIR`."""
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return compose("config", overrides=list(overrides))
