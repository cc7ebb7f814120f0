"""Fetching a plan (app/models/hub.py) into the Hugging Face cache: on a thread of its own, with progress (bytes,
speed, time left), cancel, resume, and every file checked against the SHA-256 (or git blob id) the Hub lists for it.

huggingface_hub's `http_get` does each transfer, into `blobs/<etag>.incomplete`: it retries a dropped connection
with a ranged request, and it is given what is already in that file, so a download cancelled, cut off or stopped by
a restart of the app continues where it stopped. (`hf_hub_download` itself starts over: it writes to a file of a
new name each time and deletes it on failure.) A checked file becomes the blob, and `hf_hub_download`, finding it,
links it into the snapshot as it links its own. The progress bar class given to `http_get` is how this module
follows the bytes, and how a cancel stops a transfer between two chunks. A file that does not match its checksum is
deleted and never enters the cache.

`Downloads` is one per process, like the disk it writes to: a page refresh, or another browser tab, finds the
downloads in progress where they are.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from app.models.discovery import hf_cache_dir
from app.models.hub import (
    HubUnavailable,
    NotEnoughSpace,
    Plan,
    RemoteFile,
    check_space,
    endpoint,
    repo_folder,
    require_network,
    snapshot_path,
)

State = Literal["downloading", "verifying", "done", "failed", "cancelled"]
_CHUNK = 1024 * 1024
TRANSFER_CHUNK = 256 * 1024  # small enough for prompt progress and cancel at any speed, at no cost to throughput
_SPEED_WINDOW_S = 5.0


class DownloadCancelled(Exception):
    """Raised inside the transfer when the user cancels it."""


@dataclass(frozen=True)
class Progress:
    """A download as the page shows it."""

    label: str
    state: State
    done_bytes: int
    total_bytes: int
    bytes_per_second: float | None
    seconds_left: float | None
    message: str = ""  # why it failed, or what it is doing
    path: Path | None = None  # what the model picker loads, once done

    @property
    def fraction(self) -> float:
        return min(1.0, self.done_bytes / self.total_bytes) if self.total_bytes else 1.0


@dataclass
class Download:
    """One plan being fetched. Start it with `start()`; read it with `progress()` from any thread."""

    plan: Plan
    cache: Path | None = None
    _state: State = "downloading"
    _message: str = ""
    _finished_bytes: int = 0  # files already complete
    _file_bytes: int = 0  # the file being transferred
    _samples: deque[tuple[float, int]] = field(default_factory=lambda: deque(maxlen=64))
    _cancel: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _thread: threading.Thread | None = None

    def start(self) -> Download:
        self._thread = threading.Thread(target=self._run, name=f"download {self.plan.key}", daemon=True)
        self._thread.start()
        return self

    def cancel(self) -> None:
        """Stops the transfer at its next chunk; what was fetched stays on disk for a later download to continue."""
        self._cancel.set()

    def wait(self, timeout: float | None = None) -> Progress:
        if self._thread is not None:
            self._thread.join(timeout)
        return self.progress()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def progress(self) -> Progress:
        with self._lock:
            done = self._finished_bytes + self._file_bytes
            speed = self._speed()
            state, message = self._state, self._message
        left = (self.plan.total_bytes - done) / speed if speed and state == "downloading" else None
        return Progress(label=self.plan.label, state=state, done_bytes=done, total_bytes=self.plan.total_bytes,
                        bytes_per_second=speed, seconds_left=left, message=message,
                        path=snapshot_path(self.plan, self.cache) if state == "done" else None)

    # ----- on the download's thread ---------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            require_network()  # the opt-in is the core's rule, not only the page's
            check_space(self.plan, self.cache)
            for file in self.plan.files:
                self._fetch(file)
            self._set("done", f"Fetched from {endpoint()}; every file matches its checksum")
        except DownloadCancelled:
            self._set("cancelled", "Cancelled; what was fetched stays on disk, and downloading again continues it")
        except (HubUnavailable, NotEnoughSpace, ChecksumMismatch) as exc:
            self._set("failed", str(exc))
        except Exception as exc:  # the Hub's or the network's errors: the download fails, the app carries on
            self._set("failed", _said(exc, self.plan))

    def _fetch(self, file: RemoteFile) -> Path:
        """One file into the cache: its bytes into `blobs/<etag>.incomplete` (continued where an earlier download
        left it), checked, moved to `blobs/<etag>`; then hf_hub_download, finding the blob there, links it into the
        snapshot as it links its own."""
        from huggingface_hub import hf_hub_download

        if self._cancel.is_set():
            raise DownloadCancelled
        with self._lock:
            self._file_bytes = 0
        cache = self.cache or hf_cache_dir()
        blobs = repo_folder(self.plan.repo_id, cache) / "blobs"
        if file.etag and not (blobs / file.etag).exists():
            blobs.mkdir(parents=True, exist_ok=True)
            # Another download (another plan with the same projector, another app process, huggingface_hub itself)
            # may be writing this blob: huggingface_hub's own lock for it keeps them apart, and whoever comes second
            # finds the blob done.
            lock = cache / ".locks" / blobs.parent.name / f"{file.etag}.lock"
            lock.parent.mkdir(parents=True, exist_ok=True)
            with self._holding(lock):
                if not (blobs / file.etag).exists():
                    self._transfer(file, blobs / f"{file.etag}.incomplete")
                    self._set("verifying", f"Checking {file.name} against its checksum")
                    self._verify(file, blobs / f"{file.etag}.incomplete")
                    (blobs / f"{file.etag}.incomplete").replace(blobs / file.etag)
                    self._set("downloading", "")
        path = hf_hub_download(self.plan.repo_id, file.name, revision=self.plan.revision, cache_dir=cache,
                               endpoint=endpoint())
        with self._lock:
            self._finished_bytes += file.size
            self._file_bytes = 0
        return Path(str(path))

    @contextmanager
    def _holding(self, lock_path: Path) -> Iterator[None]:
        """The blob's file lock, waited for in short steps so that a cancel is heard while another holds it."""
        from filelock import FileLock, Timeout

        lock = FileLock(str(lock_path))
        while True:
            if self._cancel.is_set():
                raise DownloadCancelled
            try:
                lock.acquire(timeout=0.25)
                break
            except Timeout:
                continue
        try:
            yield
        finally:
            lock.release()

    def _transfer(self, file: RemoteFile, partial: Path) -> None:
        from huggingface_hub import constants, hf_hub_url
        from huggingface_hub.file_download import http_get
        from huggingface_hub.utils import build_hf_headers

        # huggingface_hub reads a response in chunks of DOWNLOAD_CHUNK_SIZE (10 MiB): progress and a cancel would
        # wait for each, and a dropped connection loses the chunk it was in. Its only knob is this setting.
        constants.DOWNLOAD_CHUNK_SIZE = min(constants.DOWNLOAD_CHUNK_SIZE, TRANSFER_CHUNK)
        with partial.open("ab") as out:
            if out.tell() > file.size:  # longer than the file: not a part of it
                out.seek(0)
                out.truncate()
            url = hf_hub_url(self.plan.repo_id, file.name, revision=self.plan.revision, endpoint=endpoint())
            http_get(url, out, resume_size=out.tell(), headers=build_hf_headers(), expected_size=file.size,
                     displayed_filename=file.name, tqdm_class=_bar_for(self))

    def _verify(self, file: RemoteFile, path: Path) -> None:
        """The file's bytes against its listed SHA-256 (or git blob id); a mismatch deletes it."""
        if file.sha256:
            digest, expected = hashlib.sha256(), file.sha256
        elif file.blob_id:
            digest, expected = hashlib.sha1(f"blob {path.stat().st_size}\0".encode()), file.blob_id
        else:
            return
        with path.open("rb") as stream:
            while chunk := stream.read(_CHUNK):
                if self._cancel.is_set():
                    raise DownloadCancelled
                digest.update(chunk)
        if digest.hexdigest() != expected.lower():
            path.unlink(missing_ok=True)
            raise ChecksumMismatch(
                f"{file.name} does not match the checksum {endpoint()} lists for it (expected {expected[:12]}…, got "
                f"{digest.hexdigest()[:12]}…): the file was deleted. Download it again; if it fails again, the "
                "server or a proxy is changing it.")

    def _advance(self, n: int) -> None:
        if self._cancel.is_set():
            raise DownloadCancelled
        with self._lock:
            self._file_bytes += n
            self._samples.append((time.monotonic(), self._finished_bytes + self._file_bytes))

    def _begin_file(self, already: int) -> None:
        with self._lock:
            self._file_bytes = already  # resumed from a partial file: those bytes count as done, not as speed
            self._samples.clear()
            self._samples.append((time.monotonic(), self._finished_bytes + already))

    def _set(self, state: State, message: str) -> None:
        with self._lock:
            self._state, self._message = state, message

    def _speed(self) -> float | None:
        """Bytes per second over the last few seconds (the lock is held)."""
        if len(self._samples) < 2:
            return None
        now = time.monotonic()
        if now - self._samples[-1][0] > _SPEED_WINDOW_S:
            return None  # nothing arrived for a while: no speed to show, nor a time left
        recent = [sample for sample in self._samples if now - sample[0] <= _SPEED_WINDOW_S] or [self._samples[-1]]
        first, last = (recent[0] if len(recent) > 1 else self._samples[-2]), self._samples[-1]
        elapsed = last[0] - first[0]
        return (last[1] - first[1]) / elapsed if elapsed > 0 else None


class ChecksumMismatch(Exception):
    """A fetched file whose bytes are not those the Hub lists: it was deleted."""


def _bar_for(download: Download) -> type[Any]:
    """A progress bar class for hf_hub_download that reports to `download` and draws nothing."""
    from huggingface_hub.utils import tqdm as hub_tqdm

    class _Bar(hub_tqdm):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs["disable"] = True
            super().__init__(*args, **kwargs)
            download._begin_file(int(kwargs.get("initial") or 0))

        def update(self, n: float | None = 1) -> bool | None:
            download._advance(int(n or 0))
            return bool(super().update(n))

    return _Bar


def _said(exc: Exception, plan: Plan) -> str:
    from huggingface_hub.errors import GatedRepoError

    if isinstance(exc, GatedRepoError):
        return (f"{plan.repo_id} is gated: accept its terms at {endpoint()}/{plan.repo_id} with your account, then "
                "start the app with HF_TOKEN set to an access token of that account.")
    return f"The download of {plan.label} stopped: {exc}. Downloading again continues from where it stopped."


class Downloads:
    """The downloads of this process, by plan: starting a plan already running returns that download."""

    def __init__(self) -> None:
        self._by_key: dict[str, Download] = {}
        self._lock = threading.Lock()

    def start(self, plan: Plan, cache: Path | None = None) -> Download:
        with self._lock:  # started under the lock: a second start of the plan finds it running
            running = self._by_key.get(plan.key)
            if running is not None and running.running:
                return running
            download = Download(plan, cache).start()
            self._by_key[plan.key] = download
        return download

    def all(self) -> list[Download]:
        with self._lock:
            return list(self._by_key.values())

    def get(self, key: str) -> Download | None:
        with self._lock:
            return self._by_key.get(key)

    def forget(self, key: str) -> None:
        """Takes a finished download off the list (a running one stays), with what a cancelled or failed one left
        on disk to continue from."""
        with self._lock:
            download = self._by_key.get(key)
            if download is None or download.running:
                return
            del self._by_key[key]
        if download.progress().state != "done":
            blobs = repo_folder(download.plan.repo_id, download.cache) / "blobs"
            for file in download.plan.files:
                if file.etag:
                    (blobs / f"{file.etag}.incomplete").unlink(missing_ok=True)
