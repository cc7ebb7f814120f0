"""`python -m app.clients.llamacpp.build`: build llama-cpp-python for the instructions this machine really runs,
install it, and check that it answers (run by `make setup`).

- The instruction sets come from app/clients/llamacpp/cpu.py (what the CPU has and the OS enables, never AMX);
  CMAKE_ARGS of one's own (CUDA, Metal) are kept, and one that picks the CPU build itself is taken as it is.
- The wheel is kept beside pip's cache (~/.cache/pip/composite-demo/llama-cpp-python-VERSION-FLAGS/), keyed by
  those flags: a second clone installs it in seconds, and a wheel built for another CPU (pip's own cache keys wheels
  by source only) is never picked up.
- The build shows its progress. If it fails, or the built engine does not answer a token here, set-up goes on and
  the app starts on transformers, saying why; nothing here ever fails `make setup`.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from app.clients.llamacpp import cpu
from app.clients.llamacpp.probe import BUILD_RECORD, verdict

VERSION = "0.3.36"
PACKAGE = f"llama-cpp-python=={VERSION}"
_PROGRESS = re.compile(r"^\s*\[(\d+)/(\d+)\]")


def wheel_dir(args: str) -> Path:
    """Beside pip's own cache (a build cache, like pip's: a fresh model cache keeps it), by version and flags."""
    found = _pip("cache", "dir")
    root = Path(found.stdout.strip()) if found.returncode == 0 and found.stdout.strip() else Path.home() / ".cache/pip"
    key = hashlib.sha256(f"{VERSION} {args}".encode()).hexdigest()[:12]
    return root / "composite-demo" / f"llama-cpp-python-{VERSION}-{key}"


INSTALLED = Path(sys.prefix) / "llamacpp-wheel"  # which wheel is installed here


def _pip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pip", *args], text=True, capture_output=True)


def build_wheel(args: str, destination: Path, log: Path) -> str | None:
    """Compile the wheel into `destination`, printing progress; None, or why it failed."""
    env = {**os.environ, "CMAKE_ARGS": args}
    started = time.monotonic()
    shown = -1
    with tempfile.TemporaryDirectory(prefix="llama-wheel-") as staging, log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "pip", "wheel", "-v", "--no-deps", "--no-cache-dir", "--no-binary",
             "llama-cpp-python", PACKAGE, "-w", staging], env=env, text=True, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        assert proc.stdout is not None
        for line in proc.stdout:
            out.write(line)
            if match := _PROGRESS.match(line):
                percent = 100 * int(match[1]) // max(1, int(match[2]))
                if percent // 10 > shown:
                    shown = percent // 10
                    print(f"  llama.cpp build: {percent:3d}% after {time.monotonic() - started:4.0f} s", flush=True)
        if proc.wait() != 0:
            return f"pip wheel exited with {proc.returncode}; the log is {log}"
        wheels = list(Path(staging).glob("*.whl"))
        if not wheels:
            return f"pip wheel made no wheel; the log is {log}"
        destination.mkdir(parents=True, exist_ok=True)
        for wheel in wheels:
            wheel.replace(destination / wheel.name)
    print(f"  llama.cpp built in {time.monotonic() - started:.0f} s.", flush=True)
    return None


def _record_failure(reason: str | None) -> None:
    try:
        if reason is None:
            BUILD_RECORD.unlink(missing_ok=True)
        else:
            BUILD_RECORD.write_text(json.dumps({"reason": reason}))
    except OSError:
        pass


def ensure_built() -> str | None:
    """Install the binding built for this machine; None, or why it could not be."""
    args = cpu.cmake_args(os.environ.get("CMAKE_ARGS", ""))
    destination = wheel_dir(args)
    wheels = sorted(destination.glob("llama_cpp_python-*.whl"))
    log = Path(sys.prefix) / "llamacpp-build.log"
    if not wheels:
        print(f"Building llama.cpp for this CPU ({cpu.describe(args)}): 5-10 minutes on 2 cores, once; later "
              f"set-ups reuse the build from {destination.parent}.", flush=True)
        if (failed := build_wheel(args, destination, log)) is not None:
            return failed
        wheels = sorted(destination.glob("llama_cpp_python-*.whl"))
    if _installed_wheel() == str(wheels[-1]):
        return None
    installed = _pip("install", "--quiet", "--force-reinstall", "--no-deps", str(wheels[-1]))
    if installed.returncode != 0:
        return f"installing the wheel failed: {installed.stderr.strip().splitlines()[-1:]}"
    # Its own dependencies (numpy, jinja2, diskcache, typing-extensions), from the index as usual.
    deps = _pip("install", "--quiet", str(wheels[-1]))
    if deps.returncode != 0:
        return f"installing its dependencies failed: {deps.stderr.strip().splitlines()[-1:]}"
    INSTALLED.write_text(str(wheels[-1]))
    return None


def _installed_wheel() -> str | None:
    import importlib.util

    try:
        return INSTALLED.read_text() if importlib.util.find_spec("llama_cpp") is not None else None
    except OSError:
        return None


def main() -> int:
    failed = ensure_built()
    _record_failure(failed)
    if failed is not None:
        print(f"llama.cpp could not be built here ({failed}). The app runs on transformers instead.", flush=True)
        return 0
    result = verdict(force=True)
    if result.ok:
        print(f"llama.cpp answers on this CPU ({result.reason}).", flush=True)
    else:
        print(f"llama.cpp was built but does not run here: {result.reason}. The app runs on transformers instead.",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
