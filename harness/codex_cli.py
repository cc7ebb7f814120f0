"""OpenAI's Codex CLI, pinned, for the tests that drive it against our server: `codex_binary()` installs
@openai/codex at CODEX_VERSION with npm into a cache folder once (under a file lock, so parallel test workers
install it once between them) and returns the path of its native binary for this platform.

The npm package's `codex` command is a Node script that starts the native binary of the platform's optional
dependency (@openai/codex-linux-x64 and so on); the tests run that binary directly: no Node in between, and signals
reach Codex itself."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path

CODEX_VERSION = "0.169.0"
INSTALL_TIMEOUT_S = 900  # the native package is about 100 MB to download

# (system, machine) -> (npm package of the native binary, Rust target triple of its vendor/ folder), as the
# package's bin/codex.js chooses them.
_TARGETS = {
    ("Linux", "x86_64"): ("@openai/codex-linux-x64", "x86_64-unknown-linux-musl"),
    ("Linux", "aarch64"): ("@openai/codex-linux-arm64", "aarch64-unknown-linux-musl"),
    ("Linux", "arm64"): ("@openai/codex-linux-arm64", "aarch64-unknown-linux-musl"),
    ("Darwin", "x86_64"): ("@openai/codex-darwin-x64", "x86_64-apple-darwin"),
    ("Darwin", "arm64"): ("@openai/codex-darwin-arm64", "aarch64-apple-darwin"),
    ("Windows", "AMD64"): ("@openai/codex-win32-x64", "x86_64-pc-windows-msvc"),
    ("Windows", "ARM64"): ("@openai/codex-win32-arm64", "aarch64-pc-windows-msvc"),
}


class CodexUnavailable(RuntimeError):
    """Codex cannot be installed or run here (no npm, no network to its registry, an unsupported platform)."""


def cache_folder() -> Path:
    """Where this version is installed: $XDG_CACHE_HOME (or ~/.cache)/composite-demo/codex-VERSION."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "composite-demo" / f"codex-{CODEX_VERSION}"


def binary_in(folder: Path, system: str | None = None, machine: str | None = None) -> Path:
    """The native binary inside an npm install of @openai/codex in `folder`, for this platform (or the one named)."""
    system, machine = system or platform.system(), machine or platform.machine()
    target = _TARGETS.get((system, machine))
    if target is None:
        supported = ", ".join(f"{s} {m}" for s, m in _TARGETS)
        raise CodexUnavailable(f"Codex CLI {CODEX_VERSION} has no native binary for {system} {machine} "
                               f"(it ships for: {supported})")
    package, triple = target
    name = "codex.exe" if system == "Windows" else "codex"
    return folder.joinpath("node_modules", *package.split("/"), "vendor", triple, "bin", name)


def codex_binary() -> Path:
    """The native Codex binary of CODEX_VERSION, installed with npm on first use (reused after)."""
    folder = cache_folder()
    binary = binary_in(folder)
    if _runs(binary):
        return binary
    from filelock import FileLock

    folder.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(folder.parent / f"codex-{CODEX_VERSION}.lock"), timeout=INSTALL_TIMEOUT_S + 60):
        if _runs(binary):  # another worker installed it while this one waited
            return binary
        _install(folder)
    if not _runs(binary):
        raise CodexUnavailable(f"npm installed @openai/codex@{CODEX_VERSION}, but {binary} does not run")
    return binary


def _install(folder: Path) -> None:
    """npm install into a new folder beside `folder`, then move it into place: an install that fails or is killed
    half-way never leaves a broken `folder` behind."""
    npm = shutil.which("npm")
    if npm is None:
        raise CodexUnavailable(f"npm is not installed: it installs Codex CLI (@openai/codex@{CODEX_VERSION}); "
                               "install Node.js 20 or later with npm")
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    try:
        # --ignore-scripts: the package needs none; its platform binary comes as an optional dependency, which npm
        # installs for this os and cpu only.
        command = [npm, "install", "--prefix", str(staging), "--no-save", "--no-audit", "--no-fund",
                   "--ignore-scripts", "--loglevel=error", f"@openai/codex@{CODEX_VERSION}"]
        try:
            result = subprocess.run(command, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S,
                                    stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise CodexUnavailable(f"npm install @openai/codex@{CODEX_VERSION} took over {INSTALL_TIMEOUT_S} s") \
                from None
        if result.returncode != 0:
            raise CodexUnavailable(f"npm install @openai/codex@{CODEX_VERSION} failed (exit {result.returncode}):\n"
                                   f"{(result.stderr or result.stdout)[-3000:]}")
        if not _runs(binary_in(staging)):
            raise CodexUnavailable(f"npm installed @openai/codex@{CODEX_VERSION}, but its native binary "
                                   f"{binary_in(staging)} is missing or does not run")
        staging.chmod(0o755)  # mkdtemp made it private
        shutil.rmtree(folder, ignore_errors=True)  # a broken earlier install (we hold the lock)
        staging.rename(folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _runs(binary: Path) -> bool:
    """Whether `binary` exists and says it is CODEX_VERSION."""
    if not binary.is_file():
        return False
    try:
        with tempfile.TemporaryDirectory(prefix="codex-home-") as home:  # nothing of the user's own Codex
            result = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=60,
                                    stdin=subprocess.DEVNULL, env={**os.environ, "CODEX_HOME": home})
    except (OSError, subprocess.TimeoutExpired):
        return False
    return result.returncode == 0 and result.stdout.split()[-1:] == [CODEX_VERSION]
