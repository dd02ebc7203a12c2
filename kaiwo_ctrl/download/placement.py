"""Where downloaded files land, and how they get there.

* :func:`safe_join` and :func:`check_contained` keep every path under its
  destination root, refusing ``..`` and symlinked components (a reused volume
  can hold links planted by an earlier workload).
* :func:`atomic_destination` gives a temporary name next to the destination and
  renames it into place only when the body finished, so an interrupted run never
  leaves a file that looks complete; :func:`clear_stale_partials` removes what a
  killed run left behind.
"""

from __future__ import annotations

import os
import stat
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path, PurePosixPath

from .transfer import ConfigError, TransientError

PARTIAL_MARKER = ".kaiwo-partial-"


def safe_join(root: Path, relative: str, *, what: str = "targetPath") -> Path:
    """Join ``relative`` under ``root`` and require the result to stay there.

    Absolute paths count from the root (like the data mount path would) and
    ``..`` is refused. No component below the root may be a symlink that
    already exists (a reused PVC can hold one planted by an earlier workload;
    following it would write outside the volume), and the resolved path must
    still be under the resolved root.
    """
    rel = PurePosixPath(relative.strip())
    if rel.is_absolute():
        rel = PurePosixPath(*rel.parts[1:])
    if any(part == ".." for part in rel.parts):
        raise ConfigError(f"{what} {relative!r} escapes the destination directory")
    out = root.joinpath(*rel.parts) if rel.parts else root
    check_contained(root, out, what=what, shown=relative)
    return out


def check_contained(root: Path, path: Path, *, what: str = "path", shown: str | None = None) -> None:
    """Refuse ``path`` unless it is ``root`` or below it with no symlinked
    component below the root (checked on disk, so it holds for reused volumes)."""
    shown = str(path) if shown is None else shown
    try:
        rel_parts = path.relative_to(root).parts
    except ValueError:
        raise ConfigError(f"{what} {shown!r} is outside {str(root)!r}") from None
    cur = root
    for part in rel_parts:
        cur = cur / part
        if cur.is_symlink():
            raise ConfigError(f"{what} {shown!r}: {str(cur)!r} is a symbolic link; refusing to follow it")
        if not cur.exists():
            break
    real_root = os.path.realpath(root)
    real = os.path.realpath(path)
    if real != real_root and not real.startswith(real_root.rstrip("/") + "/"):
        raise ConfigError(f"{what} {shown!r} resolves outside {str(root)!r}")


def already_present(dest: Path, size: int | None) -> bool:
    """True when ``dest`` is a regular file of exactly ``size`` bytes."""
    if size is None:
        return False
    try:
        st = dest.stat()
    except FileNotFoundError:
        return False
    except NotADirectoryError:
        return False
    return stat.S_ISREG(st.st_mode) and st.st_size == size


def temp_name_for(dest: Path) -> Path:
    return dest.with_name(f".{dest.name}{PARTIAL_MARKER}{uuid.uuid4().hex[:12]}")


def clear_stale_partials(dest: Path) -> None:
    """Remove temp files a previous (killed) run left next to ``dest``."""
    parent = dest.parent
    prefix = f".{dest.name}{PARTIAL_MARKER}"
    try:
        entries = list(parent.iterdir())
    except FileNotFoundError:
        return
    for entry in entries:
        if entry.name.startswith(prefix):
            try:
                entry.unlink()
            except FileNotFoundError:
                pass


@contextmanager
def atomic_destination(dest: Path, expected_size: int | None = None) -> Iterator[Path]:
    """Yield a temporary path; on success rename it to ``dest``.

    On any exception the temporary file is removed and ``dest`` is untouched.
    With ``expected_size`` a short body is refused (treated as transient).
    """
    dest.parent.mkdir(parents=True, exist_ok=True)
    clear_stale_partials(dest)
    tmp = temp_name_for(dest)
    try:
        yield tmp
        if not tmp.exists():
            raise TransientError(f"no data written for {dest.name}")
        got = tmp.stat().st_size
        if expected_size is not None and got != expected_size:
            raise TransientError(f"incomplete transfer of {dest.name}: got {got} of {expected_size} bytes")
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, dest)
    finally:
        try:
            tmp.unlink()
        except FileNotFoundError:
            pass
