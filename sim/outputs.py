"""Output paths of the command line (docs/bad-input.md): every path is
checked before a run starts, and every file is written atomically (a
temporary file beside it, then a rename), so a failure leaves no partial
file. Errors are ``ConfigError`` lines naming the option and the path."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from golden.config import ConfigError


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _nearest_existing(path: Path) -> Path:
    p = path
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def check_file(path: str | None, what: str, stdout_ok: bool = True) -> None:
    """``path`` can be written as a file: not empty, not a folder, in an
    existing writable folder (``-``: standard output, when ``stdout_ok``)."""
    if path is None or (stdout_ok and path == "-"):
        return
    if not path:
        raise ConfigError(f"{what}: empty path")
    p = Path(path)
    if p.is_dir():
        raise ConfigError(f"{what} {path}: is a folder, not a file")
    if p.exists() and not p.is_file():  # a device or a pipe
        if not os.access(p, os.W_OK):
            raise ConfigError(f"{what} {path}: not writable")
        return
    parent = p.parent
    if not parent.is_dir():
        raise ConfigError(f"{what} {path}: folder {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ConfigError(f"{what} {path}: folder {parent} is not writable")
    if p.exists() and not os.access(p, os.W_OK):
        raise ConfigError(f"{what} {path}: not writable")


def check_dir(path: str | None, what: str) -> None:
    """``path`` is a writable folder, or one that can be made (its nearest
    existing ancestor is a writable folder)."""
    if path is None:
        return
    if not path:
        raise ConfigError(f"{what}: empty path")
    p = Path(path)
    base = _nearest_existing(p)
    if not base.is_dir():
        raise ConfigError(f"{what} {path}: {base} is not a folder")
    if not os.access(base, os.W_OK | os.X_OK):
        raise ConfigError(f"{what} {path}: {base} is not writable")


@contextlib.contextmanager
def atomic(path: str | Path, what: str, mode: str = "w", **kw) -> Iterator:
    """Open a temporary file beside ``path`` for writing; on success it
    replaces ``path``, on any error it is removed and ``path`` untouched (a
    path that exists but is not a regular file, such as a device or a pipe,
    is written in place). An OSError becomes one ConfigError line naming
    ``what`` and the path."""
    p = Path(path)
    if p.exists() and not p.is_file():  # a device or a pipe: written in place, never replaced
        try:
            with open(p, mode, **kw) as f:
                yield f
        except OSError as e:
            raise ConfigError(f"{what} {path}: {e.strerror or e}") from None
        return
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent or ".")
        os.fchmod(fd, p.stat().st_mode & 0o7777 if p.exists() else 0o666 & ~_umask())
        with os.fdopen(fd, mode, **kw) as f:
            yield f
        os.replace(tmp, p)
        tmp = None
    except OSError as e:
        raise ConfigError(f"{what} {path}: {e.strerror or e}") from None
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def write_text(path: str | Path, text: str, what: str) -> None:
    """``text`` into ``path``, atomically."""
    with atomic(path, what) as f:
        f.write(text)
