"""Downloading public data once, into the cache, checked by SHA-256.

:func:`download` fetches a URL to a file unless it is already there, then checks its digest:
against a known ``sha256`` when given, else against the digest recorded next to the file at the
first download (``<name>.sha256``), so a changed or truncated file is reported on every later use.
Offline, the error names the URL and the exact path to place the file at by hand.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import tempfile
import urllib.request
from pathlib import Path

log = logging.getLogger("seqattn.datakit.download")


def sha256_of(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def verify_sha256(path: str | os.PathLike, sha256: str | None = None) -> str:
    """Check ``path`` against ``sha256`` or against its recorded digest (``<name>.sha256``, written
    the first time). Returns the digest; a mismatch raises ``ValueError`` saying how to recover."""
    path = Path(path)
    record = path.with_name(path.name + ".sha256")
    digest = sha256_of(path)
    expected = sha256 or (record.read_text().strip() if record.is_file() else None)
    if expected is None:
        record.write_text(digest + "\n")
        log.info("recorded sha256 %s of %s", digest, path)
    elif digest != expected.lower():
        raise ValueError(f"{path}: SHA-256 {digest} does not match the expected {expected}; delete the file "
                         f"(and {record.name}) to download it again")
    return digest


def download(url: str, dest: str | os.PathLike, sha256: str | None = None, timeout: float = 30.0) -> Path:
    """Download ``url`` to ``dest`` once (cached) and check its SHA-256 (see the module docstring).

    When the download fails (offline, refused, timed out), a ``RuntimeError`` names the URL and the
    file to place by hand. The file is written to a temporary name and renamed: an interrupted
    download never leaves a partial file at ``dest``.
    """
    dest = Path(dest).expanduser()
    if not dest.is_file():
        dest.parent.mkdir(parents=True, exist_ok=True)
        log.info("downloading %s -> %s", url, dest)
        tmp_name = None
        try:
            with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 (http(s)/file URLs)
                with tempfile.NamedTemporaryFile(dir=dest.parent, delete=False, suffix=".part") as tmp:
                    tmp_name = tmp.name
                    shutil.copyfileobj(response, tmp)
            os.replace(tmp_name, dest)
        except (OSError, ValueError) as err:  # URLError, timeouts, refused connections
            if tmp_name and os.path.exists(tmp_name):
                os.unlink(tmp_name)
            raise RuntimeError(f"could not download {url} ({err}). Without network, download it elsewhere and "
                               f"place it by hand at {dest}") from err
    verify_sha256(dest, sha256)
    return dest
