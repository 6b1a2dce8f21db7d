"""The wheel carries conf/ and every sub-package; an installed copy finds its configs anywhere."""

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from setuptools import find_packages

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(ROOT)],
        check=True,
    )
    (path,) = out.glob("seqattn-*.whl")
    return path


def test_wheel_contains_configs_and_all_packages(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "seqattn/conf/config.yaml" in names
    for yaml in (ROOT / "conf").rglob("*.yaml"):
        assert f"seqattn/conf/{yaml.relative_to(ROOT / 'conf').as_posix()}" in names
    for package in find_packages(ROOT, include=["seqattn*"]):
        assert f"{package.replace('.', '/')}/__init__.py" in names, f"{package} missing from the wheel"
    assert {n.split("/")[0] for n in names if not n.startswith("seqattn-")} == {"seqattn"}  # one import name


def test_installed_wheel_composes_a_recipe_from_another_directory(wheel, tmp_path):
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)],
                   check=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {**os.environ, "PYTHONPATH": str(target)}
    probe = subprocess.run([sys.executable, "-c", "import seqattn; print(seqattn.__file__)"], cwd=elsewhere,
                           env=env, capture_output=True, text=True, check=True)
    assert probe.stdout.startswith(str(target))
    result = subprocess.run([sys.executable, "-m", "seqattn.run", "task=speech", "--cfg", "job"], cwd=elsewhere,
                            env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "task_name: speech" in result.stdout
    assert "seqattn.modalities.audio.adapter.AudioAdapter" in result.stdout
