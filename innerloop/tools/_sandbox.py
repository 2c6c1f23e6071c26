"""Where ``run_shell`` and ``run_python`` run: a :class:`Sandbox` policy, resolved once.

Two isolation levels, chosen by ``Sandbox.isolation``:

- ``bubblewrap``: the command runs under ``bwrap`` (Debian package ``bubblewrap``) with
  its own user, PID, network, IPC, UTS and cgroup namespaces. It sees the system's
  programs and libraries (``/usr``, the Python interpreter running innerloop) read-only,
  a short allowlist of ``/etc`` files, the workspace read-write, fresh tmpfs at ``/tmp``
  and ``$HOME``, and its own ``/proc`` (the host's processes, their environments
  included, are out of sight). Everything else is absent. No network unless
  ``network=True``. When the command ends or is stopped the PID namespace ends, which
  kills every process in it; ``--die-with-parent`` ends it if this process dies.
- ``process``: no namespaces. The command runs under a subreaper that kills every
  descendant, ``setsid`` ones included (see ``innerloop.tools._process``). Files outside
  the workspace, the network and other processes' ``/proc/<pid>/environ`` stay reachable.

Both levels bound the resources a command may take (each a :class:`Sandbox` field; ``None``
turns one off): ``memory_mb`` (the address space of each process, ``RLIMIT_AS``),
``max_processes`` (the command's processes, counted as it runs), ``file_size_mb`` (each
file written, ``RLIMIT_FSIZE``) and, under bubblewrap, ``tmpfs_mb`` (the size of each fresh
tmpfs: ``/tmp``, ``$HOME`` and ``/dev/shm``). A command that goes over one gets an
``is_error`` result naming the limit. No root and no cgroups are needed.

``auto`` (the default) takes bubblewrap when it works here and falls back to ``process``
with a :class:`SandboxWarning`. Both levels pass an allowlisted environment: ``PATH``,
``HOME``, ``LANG``, ``TERM``, ``TMPDIR`` and the names the host declares (``env``), plus
``set_env``; nothing else of this process's environment reaches the command.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal

import attrs

from innerloop._errors import InnerloopError
from innerloop.tools._process import ProcessResult, run_process

__all__ = ["BASE_ENV", "Sandbox", "SandboxError", "SandboxWarning"]

Isolation = Literal["auto", "bubblewrap", "process"]
_ISOLATIONS = ("auto", "bubblewrap", "process")

BASE_ENV = ("PATH", "HOME", "LANG", "TERM", "TMPDIR")
"""Names of this process's environment every sandboxed command receives."""

SANDBOX_HOME = "/home/sandbox"
"""``$HOME`` inside bubblewrap: an empty tmpfs."""

MEMORY_MB = 1024
"""Default ``Sandbox(memory_mb=...)``: megabytes of address space per process."""

MAX_PROCESSES = 64
"""Default ``Sandbox(max_processes=...)``: processes a command may run at once."""

FILE_SIZE_MB = 256
"""Default ``Sandbox(file_size_mb=...)``: megabytes one file written may reach."""

TMPFS_MB = 256
"""Default ``Sandbox(tmpfs_mb=...)``: megabytes each fresh tmpfs holds (bubblewrap)."""

_MEMORY_SIGNS = ("MemoryError", "Cannot allocate memory", "cannot allocate", "memory exhausted")
"""What a program says on stderr when an allocation failed (Python, libc, bash, GNU tools)."""

_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_ETC = (
    "alternatives",
    "ca-certificates",
    "ca-certificates.conf",
    "debian_version",
    "gai.conf",
    "group",
    "host.conf",
    "hostname",
    "hosts",
    "inputrc",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "locale.alias",
    "localtime",
    "mime.types",
    "nsswitch.conf",
    "os-release",
    "passwd",
    "profile",
    "protocols",
    "services",
    "ssl",
)
"""``/etc`` entries visible inside bubblewrap: what programs need to start, resolve users
and names and check certificates. No ``shadow``, ``pip.conf``, ``npmrc``, ``gitconfig``
or anything else that may hold credentials."""


class SandboxError(InnerloopError, ValueError):
    """A :class:`Sandbox` cannot be set up as asked (raised when the tools are built)."""


class SandboxWarning(UserWarning):
    """The sandbox runs with less isolation than bubblewrap gives (the ``auto`` fallback)."""


def _frozen_mapping(value: Mapping[str, str]) -> Mapping[str, str]:
    return MappingProxyType(dict(value))


def _names(value: Sequence[str]) -> tuple[str, ...]:
    if isinstance(value, str):
        raise SandboxError(f"expected a sequence of names, got the string {value!r}; wrap it")
    return tuple(value)


def _paths(value: Sequence[str | os.PathLike[str]]) -> tuple[str, ...]:
    if isinstance(value, str | os.PathLike):
        raise SandboxError(f"expected a sequence of paths, got the path {value!r}; wrap it")
    return tuple(os.fspath(p) for p in value)


def _check_isolation(instance: Sandbox, attribute: attrs.Attribute[Any], value: str) -> None:
    if value not in _ISOLATIONS:
        raise SandboxError(
            f"Sandbox(isolation={value!r}) is unknown; choose from {', '.join(_ISOLATIONS)}"
        )


def _check_env(instance: Sandbox, attribute: attrs.Attribute[Any], value: Iterable[str]) -> None:
    for name in value:
        if not name or "=" in name or "\0" in name:
            raise SandboxError(f"Sandbox({attribute.name}=...) holds a bad name {name!r}")


def _check_limit(instance: Sandbox, attribute: attrs.Attribute[Any], value: int | None) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise SandboxError(
            f"Sandbox({attribute.name}={value!r}) must be a positive int, or None for no limit"
        )


def _check_paths(instance: Sandbox, attribute: attrs.Attribute[Any], value: Iterable[str]) -> None:
    for path in value:
        if not os.path.isabs(path):
            raise SandboxError(
                f"Sandbox({attribute.name}=...) path {path!r} is relative; give an absolute path"
            )


@attrs.frozen
class Sandbox:
    """How ``run_shell`` and ``run_python`` are confined; give it to
    ``builtin_tools(..., sandbox=Sandbox(...))``. ``isolation`` is ``"bubblewrap"`` (the
    command runs in its own namespaces under ``bwrap``, seeing the system read-only and
    the workspace read-write), ``"process"`` (no namespaces; a subreaper kills every
    descendant) or ``"auto"`` (bubblewrap when it works here, else ``process`` with a
    :class:`SandboxWarning`); the manual's "Run tools in a sandbox" page says more.

    ``env`` names more variables of this process's environment to pass through (beyond
    :data:`BASE_ENV`); ``set_env`` sets variables outright. ``network`` lets the command
    reach the network (bubblewrap only: ``process`` cannot cut it). ``read_only`` and
    ``read_write`` show more host paths inside bubblewrap, at the same place. ``bwrap``
    is the bubblewrap program to use. ``memory_mb``, ``max_processes``, ``file_size_mb``
    and ``tmpfs_mb`` are the resource limits: each process's address space, the
    command's process count, each file written, and (bubblewrap only) each fresh tmpfs
    (``None`` for none); a command over one gets an ``is_error`` result naming it.
    """

    isolation: Isolation = attrs.field(default="auto", validator=_check_isolation)
    env: tuple[str, ...] = attrs.field(default=(), converter=_names, validator=_check_env)
    set_env: Mapping[str, str] = attrs.field(
        factory=dict, converter=_frozen_mapping, validator=_check_env
    )
    network: bool = False
    read_only: tuple[str, ...] = attrs.field(default=(), converter=_paths, validator=_check_paths)
    read_write: tuple[str, ...] = attrs.field(default=(), converter=_paths, validator=_check_paths)
    bwrap: str = "bwrap"
    memory_mb: int | None = attrs.field(default=MEMORY_MB, validator=_check_limit)
    max_processes: int | None = attrs.field(default=MAX_PROCESSES, validator=_check_limit)
    file_size_mb: int | None = attrs.field(default=FILE_SIZE_MB, validator=_check_limit)
    tmpfs_mb: int | None = attrs.field(default=TMPFS_MB, validator=_check_limit)

    def prepare(
        self, workspace: str | os.PathLike[str], *, host_env: Mapping[str, str] | None = None
    ) -> _Prepared:
        """Resolve this policy for ``workspace``, once: find bubblewrap and check that it
        can create its namespaces here (``auto`` falls back with a :class:`SandboxWarning`,
        ``bubblewrap`` raises :class:`SandboxError` with the fix). ``host_env`` is the
        environment the allowlist picks from (default: this process's)."""
        root = Path(os.path.realpath(workspace))
        if not root.is_dir():
            raise SandboxError(f"workspace {str(root)!r} is not a directory; create it")
        for path in (*self.read_only, *self.read_write):
            if not os.path.exists(path):
                raise SandboxError(
                    f"Sandbox path {path!r} does not exist; create it or leave it out"
                )
        source = os.environ if host_env is None else host_env
        env = {name: source[name] for name in (*BASE_ENV, *self.env) if name in source}
        if self.isolation != "process":
            problem = self._bubblewrap_problem(root, env)
            if problem is None:
                bwrap = self._bwrap(root)
                return _Prepared("bubblewrap", root, self._bubblewrap_env(env), bwrap, self)
            if self.isolation == "bubblewrap":
                raise SandboxError(
                    f"Sandbox(isolation='bubblewrap') cannot run: {problem}; install it "
                    "(Debian/Ubuntu: apt-get install bubblewrap) or pass "
                    "Sandbox(isolation='process')"
                )
            warnings.warn(
                f"{problem}: run_shell and run_python run with isolation='process' (an "
                "allowlisted environment and every descendant killed; files outside the "
                "workspace, the network and other processes stay reachable); install "
                "bubblewrap (Debian/Ubuntu: apt-get install bubblewrap) or pass "
                "Sandbox(isolation='process') to choose this explicitly",
                SandboxWarning,
                stacklevel=3,
            )
        if sys.platform != "linux":
            raise SandboxError(
                f"Sandbox(isolation={self.isolation!r}) needs Linux (a subreaper or "
                f"bubblewrap); this is {sys.platform}"
            )
        return _Prepared("process", root, {**env, **self.set_env}, (), self)

    def _bubblewrap_env(self, env: Mapping[str, str]) -> dict[str, str]:
        return {**env, "HOME": SANDBOX_HOME, "TMPDIR": "/tmp", **self.set_env}

    def _bubblewrap_problem(self, root: Path, env: Mapping[str, str]) -> str | None:
        """Why bubblewrap cannot be used here, or None: it is run once with the real
        flags on ``true``."""
        if sys.platform != "linux":
            return f"bubblewrap needs Linux; this is {sys.platform}"
        if shutil.which(self.bwrap) is None:
            return f"bubblewrap is not installed (no {self.bwrap!r} on PATH)"
        probe = [*self._bwrap(root), "true"]
        try:
            done = subprocess.run(
                probe, env=self._bubblewrap_env(env), capture_output=True, timeout=30
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"bubblewrap ({self.bwrap}) cannot start: {exc}"
        if done.returncode != 0:
            said = done.stderr.decode("utf-8", "replace").strip() or f"exit {done.returncode}"
            return f"bubblewrap cannot create its namespaces here ({self.bwrap} said: {said})"
        return None

    def _tmpfs(self, *paths: str) -> list[str]:
        """bwrap's options for a fresh tmpfs at each of ``paths``, of ``tmpfs_mb``."""
        size = [] if self.tmpfs_mb is None else ["--size", str(self.tmpfs_mb << 20)]
        return [arg for path in paths for arg in (*size, "--tmpfs", path)]

    def _bwrap(self, root: Path) -> tuple[str, ...]:
        """The bwrap command line up to the sandboxed command."""
        argv = [
            shutil.which(self.bwrap) or self.bwrap,
            "--die-with-parent",
            "--new-session",
            "--unshare-all",
            "--cap-drop",
            "ALL",
        ]
        if self.network:
            argv.append("--share-net")
        for path in _SYSTEM_DIRS:
            if os.path.islink(path):
                argv += ["--symlink", os.readlink(path), path]
            elif os.path.isdir(path):
                argv += ["--ro-bind", path, path]
        for name in (*_ETC, *(("resolv.conf",) if self.network else ())):
            argv += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
        argv += ["--proc", "/proc", "--dev", "/dev", *self._tmpfs("/tmp", SANDBOX_HOME, "/dev/shm")]
        for path in _interpreter_dirs():  # after the tmpfs: a venv may live under /tmp
            argv += ["--ro-bind", path, path]
        for path in self.read_only:
            argv += ["--ro-bind", path, path]
        for path in self.read_write:
            argv += ["--bind", path, path]
        argv += ["--bind", str(root), str(root), "--remount-ro", "/", "--chdir", str(root), "--"]
        return tuple(argv)


_BWRAP_PROCESSES = 1
"""Processes bubblewrap itself keeps below the one started (the PID namespace's init)."""


def _interpreter_dirs() -> list[str]:
    """The installation of the Python running innerloop (for ``run_python``) when it lies
    outside ``/usr``: its prefix (a virtual environment) and base prefix."""
    dirs: list[str] = []
    for path in (sys.prefix, sys.base_prefix, os.path.dirname(os.path.realpath(sys.executable))):
        real = os.path.realpath(path)
        if real.startswith("/usr/") or any(real.startswith(d + "/") for d in dirs):
            continue
        if real not in dirs and os.path.isdir(real):
            dirs.append(real)
    return dirs


@attrs.frozen(repr=False)
class _Prepared:
    """A :class:`Sandbox` resolved for one workspace: ``mode`` is what it really gives
    (``bubblewrap`` or ``process``); :meth:`run` runs a command in it."""

    mode: Literal["bubblewrap", "process"]
    root: Path
    env: Mapping[str, str] = attrs.field(converter=_frozen_mapping)
    prefix: tuple[str, ...]
    """The bwrap command line before the command (empty for ``process``)."""
    policy: Sandbox

    def rlimits(self) -> dict[str, int]:
        """The resource limits of every command, in bytes."""
        limits = {}
        if self.policy.memory_mb is not None:
            limits["RLIMIT_AS"] = self.policy.memory_mb << 20
        if self.policy.file_size_mb is not None:
            limits["RLIMIT_FSIZE"] = self.policy.file_size_mb << 20
        return limits

    def over_limit(self, result: ProcessResult) -> str | None:
        """Which limit ``result``'s command went over, with the fix, or None: the process
        count as counted, the others by what the command said on stderr when an allocation
        or a write failed (or its death by ``SIGXFSZ``), whatever its exit code."""
        policy = self.policy
        if result.over_processes:
            return (
                f"the process limit ({policy.max_processes}); it was stopped with everything "
                "it started (start fewer processes, or raise Sandbox(max_processes=...))"
            )
        if policy.memory_mb is not None and any(s in result.stderr for s in _MEMORY_SIGNS):
            return (
                f"the memory limit ({policy.memory_mb} MB per process); make it use less, or "
                "raise Sandbox(memory_mb=...)"
            )
        xfsz = (-signal.SIGXFSZ, 128 + signal.SIGXFSZ)
        if policy.file_size_mb is not None and (
            result.exit_code in xfsz or "File too large" in result.stderr
        ):
            return (
                f"the file size limit ({policy.file_size_mb} MB per file); write less, or "
                "raise Sandbox(file_size_mb=...)"
            )
        full = "No space left on device" in result.stderr
        if self.mode == "bubblewrap" and policy.tmpfs_mb is not None and full:
            return (
                f"the tmpfs size limit ({policy.tmpfs_mb} MB for each of /tmp, $HOME and "
                "/dev/shm), or filled a disk; write less there, or raise Sandbox(tmpfs_mb=...)"
            )
        return None

    def argv(self, command: Sequence[str]) -> list[str]:
        """The full command line that runs ``command`` in the sandbox."""
        return [*self.prefix, *command]

    async def run(
        self,
        command: Sequence[str],
        *,
        timeout: float | None = None,  # noqa: ASYNC109  public API, as run_process's
        on_partial: Callable[[ProcessResult], None] | None = None,
    ) -> ProcessResult:
        """Run ``command`` in the workspace root inside the sandbox, within its limits
        (see :func:`~innerloop.tools.run_process` for timeouts and cancellation)."""
        return await run_process(
            self.argv(command),
            cwd=self.root,
            env=self.env,
            timeout=timeout,
            on_partial=on_partial,
            reaper=self.mode == "process",
            rlimits=self.rlimits(),
            max_processes=self.policy.max_processes,
            process_overhead=_BWRAP_PROCESSES if self.mode == "bubblewrap" else 0,
        )

    def __repr__(self) -> str:
        return f"<sandbox {self.mode} root={str(self.root)!r} env={sorted(self.env)}>"
