"""A workspace root that built-in tools cannot leave.

Paths from the model are relative to the root. An absolute path, a path that climbs out
with ``..``, and a path that leaves through a symlink are refused with a
:class:`ToolError` that names the route, before anything is read or written. (The check
resolves symlinks at call time; a process racing to swap a directory for a symlink
between the check and the use is outside this guard.)
"""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath

import attrs

from innerloop.tools._spec import ToolError

__all__ = ["Workspace"]


def _real(path: str | os.PathLike[str]) -> Path:
    return Path(os.path.realpath(path))


@attrs.frozen
class Workspace:
    """The directory built-in tools work in. ``root`` must exist."""

    root: Path = attrs.field(converter=_real)

    def __attrs_post_init__(self) -> None:
        if not self.root.is_dir():
            raise ValueError(f"workspace root {str(self.root)!r} is not a directory; create it")

    def contains(self, path: Path) -> bool:
        """Whether ``path`` (after resolving symlinks) lies inside the root."""
        return _real(path).is_relative_to(self.root)

    def resolve(self, path: str) -> Path:
        """The absolute path for ``path`` inside the root, or :class:`ToolError`."""
        if not isinstance(path, str) or not path.strip():
            raise ToolError("path must be a non-empty path relative to the workspace root")
        if os.path.isabs(path) or path.startswith("~"):
            raise ToolError(
                f"path {path!r} is refused: absolute paths are not allowed; give a path "
                "relative to the workspace root"
            )
        normal = os.path.normpath(path)
        if normal == ".." or normal.startswith(".." + os.sep):
            raise ToolError(f"path {path!r} is refused: it escapes the workspace root through '..'")
        target = self.root / normal
        if not self.contains(target):
            raise ToolError(
                f"path {path!r} is refused: it escapes the workspace root through a symlink "
                f"({self._first_link(normal)!r} points outside)"
            )
        return target

    def _first_link(self, normal: str) -> str:
        current = self.root
        for part in PurePosixPath(normal).parts:
            current = current / part
            if current.is_symlink() and not self.contains(current):
                return str(current.relative_to(self.root))
        return normal

    def relative(self, path: Path) -> str:
        """``path`` as the model should see it: relative to the root, '/'-separated."""
        return path.relative_to(self.root).as_posix() or "."
