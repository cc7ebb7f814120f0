"""A local double of the Hugging Face Hub: the HTTP API that `huggingface_hub` (2.4) speaks, on 127.0.0.1.

    double = HubDouble()
    double.add(HubRepo("org/tiny", {"config.json": b"{}", "model.safetensors": weights}, card_data={"license": "mit"}))
    with double.serve() as endpoint, huggingface_hub_pointed_at(endpoint, cache_dir=tmp_path / "hub"):
        path = hf_hub_download("org/tiny", "model.safetensors")

What it answers, as the real Hub does (the client's code is the reference: file_download.py, _snapshot_download.py,
hf_api.py, utils/_http.py):

- `GET /api/models?search=&author=&filter=&pipeline_tag=&gated=&sort=&direction=&limit=&full=&cardData=&config=
  &expand=&cursor=`: `list_models`. Without `full`, `cardData` or `expand` an entry is the Hub's compact one (id,
  downloads, likes, tags, pipeline_tag, library_name, createdAt, ...); `expand` returns only the properties named.
  `sort` is descending unless `direction=1`. Pages of `page_size` entries, the next one named in a `Link` header.
- `GET /api/models/{repo_id}[/revision/{revision}][?blobs=true&expand=&securityStatus=]`: `model_info` /
  `repo_info`. `blobs=true` (`files_metadata=True`) gives each sibling `size`, `blobId` and, for an LFS file,
  `lfs: {sha256, size, pointerSize}`. Public for gated repositories too, as on the Hub.
- `GET /api/models/{repo_id}/tree/{revision}[/{path}]?recursive=&expand=`: `list_repo_tree`, `list_repo_files`,
  and what `snapshot_download` lists (entries `{type, oid, size, path[, lfs: {oid, size, pointerSize}]}`).
- `GET /api/models/{repo_id}/refs`, `GET /api/whoami-v2`, `GET /api/agent-harnesses` (see below).
- `HEAD`/`GET /{repo_id}/resolve/{revision}/{filename}` (revision "main" or the repository's commit sha):
  `hf_hub_download`. Every answer carries `X-Repo-Commit`. A git file answers 200 with its body, `ETag` = its git
  blob id (sha1 of b"blob <size>\\0" + bytes) and `Content-Length`; an LFS file answers 302, with `X-Linked-Etag`
  (its sha256), `X-Linked-Size`, and a `Location` on a second origin, the "CDN" (another port of 127.0.0.1), with a
  signed URL: huggingface_hub drops the `Authorization` header for it, as it does for cdn-lfs.hf.co. The CDN
  (`/cdn-lfs/{sha256}/{filename}?Expires=&Signature=`) and the git files serve `Range: bytes=a-b` (206 and
  `Content-Range`; 416 past the end). No Xet header is ever sent, so huggingface_hub never takes its Xet path.
- Errors as the Hub sends them, with `X-Error-Code` / `X-Error-Message` and a JSON `{"error": ...}` body: an unknown
  repository is 401 `RepoNotFound` without an `Authorization` header and 404 with one (the Hub hides private
  repositories that way); an unknown revision 404 `RevisionNotFound`; an unknown file 404 `EntryNotFound`; a gated
  repository's file, when `token` is set, 401 `GatedRepo` without a token and 403 `GatedRepo` with another one.

Files are LFS when their name ends with .gguf, .safetensors or .bin or they hold more than 10 kB (10_000 bytes).
A repository's tags are its own, then its library_name and pipeline_tag, "gguf"/"safetensors" when it has such
files, and "license:<id>" from card_data, as the Hub derives them.

Faults, settable at any time from the test's thread: `cut_after[filename] = n` closes the connection after n bytes
of the file's next body (once); `corrupt.add(filename)` serves other bytes of the same length (every 4096th byte
flipped, the same for any range) under the same sha256/ETag; `bytes_per_second` throttles file bodies; `token` gates
the gated repositories. `requests` holds (method, path with query, Range header) of every request, both origins.

Pointing huggingface_hub at the double: `HF_ENDPOINT` is read into `huggingface_hub.constants` when huggingface_hub
is imported, and the module-level functions (`huggingface_hub.list_models`, `model_info`, ...) are methods of an
`HfApi` built then, so setting the variable in a test is too late. `huggingface_hub_pointed_at(endpoint)` patches,
and restores after: `constants.ENDPOINT`, `constants.HUGGINGFACE_CO_URL_TEMPLATE` (what `hf_hub_download` builds its
URL from), `hf_api.api.endpoint`, `constants.HF_HUB_OFFLINE` (tests/conftest.py sets HF_HUB_OFFLINE=1 for the whole
session: without this every call raises OfflineModeIsEnabled), the `HF_ENDPOINT` variable (what app/models/hub.py
reads), `constants.HF_HUB_CACHE` when `cache_dir` is given, and the token: none is sent unless `token` is given (no
HF_TOKEN of the machine's leaks into a test). It also fills huggingface_hub's agent-harness registry: the first
request builds a User-Agent, which fetches `{constants.ENDPOINT}/api/agent-harnesses` (huggingface.co if only
`endpoint=` was passed) and writes it under HF_HOME. `HfApi(endpoint=...)` and `hf_hub_download(endpoint=...)` work
too, but only with this helper (or HF_HUB_OFFLINE unset and the registry above) does nothing leave 127.0.0.1.
A subprocess gets the same with `hub_env(endpoint, hf_home)` in its environment (read at its import).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import json
import os
import posixpath
import re
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlencode, urlsplit

LFS_SUFFIXES = (".gguf", ".safetensors", ".bin")
LFS_THRESHOLD = 10_000  # bytes: a bigger file is stored with LFS
DEFAULT_LAST_MODIFIED = "2024-05-01T12:00:00.000Z"
_CHUNK = 64 * 1024
_CORRUPT_STRIDE = 4096
_EMPTY_AGENT_REGISTRY: dict[str, Any] = {"standardEnvVars": [], "harnesses": {}}
# What /api/models gives per model when neither full, cardData nor expand is asked for (the Hub's compact entry).
_COMPACT_KEYS = ("_id", "id", "likes", "trendingScore", "private", "downloads", "tags", "pipeline_tag",
                 "library_name", "createdAt", "modelId")
_FULL_EXTRA_KEYS = ("author", "sha", "lastModified", "gated", "disabled", "siblings")
_SORT_KEYS = {"downloads", "likes", "lastModified", "createdAt", "trendingScore", "downloadsAllTime"}
_RANGE = re.compile(r"\s*bytes\s*=\s*(\d*)\s*-\s*(\d*)\s*", re.IGNORECASE)


@dataclass
class HubRepo:
    """A model repository: its files (path in the repository -> bytes) and what the Hub says about it."""

    repo_id: str
    files: dict[str, bytes]
    gated: bool | str = False  # False, "auto" or "manual" (True means "auto")
    card_data: dict[str, Any] | None = None  # the model card's metadata, e.g. {"license": "apache-2.0"}
    tags: tuple[str, ...] = ()
    pipeline_tag: str | None = None
    library_name: str | None = None
    downloads: int = 0
    likes: int = 0
    sha: str | None = None  # the commit: 40 hex digits, derived from the files unless given
    last_modified: str = DEFAULT_LAST_MODIFIED


@dataclass(frozen=True)
class _Blob:
    path: str
    content: bytes
    lfs: bool
    sha256: str
    oid: str  # the git blob id: of the content, or of the LFS pointer for an LFS file
    pointer_size: int

    @property
    def size(self) -> int:
        return len(self.content)

    @property
    def etag(self) -> str:
        return self.sha256 if self.lfs else self.oid


@dataclass(frozen=True)
class _Repo:
    spec: HubRepo
    sha: str
    gated: str | bool
    blobs: dict[str, _Blob]
    all_tags: list[str]
    folders: frozenset[str] = field(default_factory=frozenset)


def git_blob_id(content: bytes) -> str:
    """The git blob id of `content`: what the Hub gives as a git file's ETag and blobId."""
    return hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()


def is_lfs(path: str, content: bytes) -> bool:
    return path.endswith(LFS_SUFFIXES) or len(content) > LFS_THRESHOLD


def _lfs_pointer(sha256: str, size: int) -> bytes:
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n".encode()


def _blob(path: str, content: bytes) -> _Blob:
    sha256 = hashlib.sha256(content).hexdigest()
    if is_lfs(path, content):
        pointer = _lfs_pointer(sha256, len(content))
        return _Blob(path, content, True, sha256, git_blob_id(pointer), len(pointer))
    return _Blob(path, content, False, sha256, git_blob_id(content), 0)


def _derived_tags(spec: HubRepo, blobs: dict[str, _Blob]) -> list[str]:
    tags = list(spec.tags)
    for tag in (spec.library_name, spec.pipeline_tag):
        if tag:
            tags.append(tag)
    if any(path.endswith(".gguf") for path in blobs):
        tags.append("gguf")
    if any(path.endswith(".safetensors") for path in blobs):
        tags.append("safetensors")
    licence = (spec.card_data or {}).get("license")
    if isinstance(licence, str):
        tags.append(f"license:{licence}")
    return list(dict.fromkeys(tags))


def _corrupted(content: bytes) -> bytes:
    """Other bytes of the same length: every 4096th byte flipped, so any range of it is consistent."""
    changed = bytearray(content)
    for index in range(0, len(changed), _CORRUPT_STRIDE):
        changed[index] ^= 0xFF
    return bytes(changed)


def _flag(values: dict[str, list[str]], name: str) -> bool:
    return (values.get(name) or ["false"])[-1].lower() in ("1", "true", "yes")


class HubDouble:
    """Repositories served over the Hub's HTTP API by `serve()`; faults and a request log for the tests."""

    def __init__(self) -> None:
        self.cut_after: dict[str, int] = {}
        self.corrupt: set[str] = set()
        self.bytes_per_second: int | None = None
        self.token: str | None = None
        self.requests: list[tuple[str, str, str | None]] = []
        self.page_size = 1000  # entries per page of /api/models and of a tree listing (50 with expand, as the Hub)
        self.endpoint: str | None = None  # while serving: the Hub's origin
        self.cdn_endpoint: str | None = None  # while serving: the origin LFS files are redirected to
        self._repos: dict[str, _Repo] = {}
        self._lock = threading.Lock()
        self._secret = os.urandom(16)

    # ----- the repositories ------------------------------------------------------------------------------------

    def add(self, repo: HubRepo) -> None:
        """Adds (or replaces) a repository."""
        gated: str | bool = "auto" if repo.gated is True else repo.gated
        if gated not in (False, "auto", "manual"):
            raise ValueError(f"gated must be False, 'auto' or 'manual', not {repo.gated!r}")
        if repo.repo_id.count("/") > 1 or not repo.repo_id.strip("/"):
            raise ValueError(f"not a repository id: {repo.repo_id!r}")
        blobs = {path: _blob(path, content) for path, content in sorted(repo.files.items())}
        sha = repo.sha or hashlib.sha1(
            json.dumps([repo.repo_id, [(path, blob.oid) for path, blob in blobs.items()]]).encode()).hexdigest()
        if not re.fullmatch(r"[0-9a-f]{40}", sha):
            raise ValueError(f"sha must be 40 lowercase hex digits, not {sha!r}")
        folders = frozenset(posixpath.dirname(path)[: index]
                            for path in blobs for index in _slash_positions(posixpath.dirname(path)))
        with self._lock:
            self._repos[repo.repo_id] = _Repo(repo, sha, gated, blobs, _derived_tags(repo, blobs), folders)

    def commit(self, repo_id: str) -> str:
        """The commit sha the repository is at."""
        return self._repos[repo_id].sha

    def sha256(self, repo_id: str, filename: str) -> str:
        return self._repos[repo_id].blobs[filename].sha256

    def blob_id(self, repo_id: str, filename: str) -> str:
        """The git blob id the Hub lists (for an LFS file: of its pointer)."""
        return self._repos[repo_id].blobs[filename].oid

    def etag(self, repo_id: str, filename: str) -> str:
        """What huggingface_hub names the file's blob in its cache: the sha256 (LFS) or the git blob id."""
        return self._repos[repo_id].blobs[filename].etag

    def requested(self, method: str | None = None, containing: str = "") -> list[tuple[str, str, str | None]]:
        """The requests so far (a copy), those of `method` whose path contains `containing` if given."""
        with self._lock:
            logged = list(self.requests)
        return [entry for entry in logged if (method is None or entry[0] == method) and containing in entry[1]]

    # ----- serving ---------------------------------------------------------------------------------------------

    @contextlib.contextmanager
    def serve(self) -> Iterator[str]:
        """Serves the Hub (and its CDN, on another port) on 127.0.0.1 until the block ends; yields the endpoint."""
        stopping = threading.Event()
        hub = _Server(self, "hub", stopping)
        cdn = _Server(self, "cdn", stopping)
        threads = [threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True,
                                    name=f"hub double {server.role}") for server in (hub, cdn)]
        self.endpoint, self.cdn_endpoint = hub.origin, cdn.origin
        for thread in threads:
            thread.start()
        try:
            yield hub.origin
        finally:
            stopping.set()
            for server in (hub, cdn):
                server.shutdown()
                server.close_connections()
                server.server_close()
            for thread in threads:
                thread.join(5)
            self.endpoint = self.cdn_endpoint = None

    # ----- what the handlers ask ---------------------------------------------------------------------------------

    def _log(self, method: str, path: str, range_header: str | None) -> None:
        with self._lock:
            self.requests.append((method, path, range_header))

    def _repo(self, repo_id: str) -> _Repo | None:
        with self._lock:
            return self._repos.get(repo_id)

    def _all_repos(self) -> list[_Repo]:
        with self._lock:
            return list(self._repos.values())

    def _take_cut(self, filename: str) -> int | None:
        with self._lock:
            return self.cut_after.pop(filename, None)

    def _is_corrupt(self, filename: str) -> bool:
        with self._lock:
            return filename in self.corrupt

    def _blob_by_sha256(self, sha256: str) -> _Blob | None:
        for repo in self._all_repos():
            for blob in repo.blobs.values():
                if blob.lfs and blob.sha256 == sha256:
                    return blob
        return None

    def _signature(self, path: str, expires: str) -> str:
        return hmac.new(self._secret, f"{path}|{expires}".encode(), hashlib.sha256).hexdigest()[:32]


def _slash_positions(folder: str) -> list[int]:
    """End positions of each ancestor folder of `folder` ("a/b" -> [1, 3]); none for the root."""
    if not folder:
        return []
    return [index for index, char in enumerate(folder) if char == "/"] + [len(folder)]


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, double: HubDouble, role: str, stopping: threading.Event) -> None:
        self.double, self.role, self.stopping = double, role, stopping
        self._open: set[socket.socket] = set()
        self._open_lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), _Handler)
        self.origin = f"http://127.0.0.1:{self.server_address[1]}"

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._open_lock:
            self._open.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._open_lock:
            self._open.discard(request)
        super().shutdown_request(request)

    def close_connections(self) -> None:
        """Ends the kept-alive connections, so that no handler thread outlives the server."""
        with self._open_lock:
            open_now = list(self._open)
        for connection in open_now:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)


class _Reply(Exception):
    """An answer decided deep in a route: raised, sent by the handler."""

    def __init__(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        super().__init__(status)
        self.status, self.body, self.headers = status, body, headers or {}


def _error(status: int, code: str | None, message: str, headers: dict[str, str] | None = None) -> _Reply:
    extra = dict(headers or {})
    if code is not None:
        extra["X-Error-Code"] = code
    extra["X-Error-Message"] = message
    return _Reply(status, {"error": message}, extra)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    # ----- http.server's entry points ----------------------------------------------------------------------------

    def do_GET(self) -> None:
        self._handle("GET")

    def do_HEAD(self) -> None:
        self._handle("HEAD")

    def do_POST(self) -> None:
        self._handle("POST")

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _handle(self, method: str) -> None:
        double = self.server.double
        double._log(method, self.path, self.headers.get("Range"))
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        try:
            try:
                if method == "POST":
                    raise _error(405, None, f"hub double: {method} is not served")
                if self.server.role == "cdn":
                    self._cdn(method)
                else:
                    self._hub(method)
            except _Reply as reply:
                self._send_reply(method, reply)
        except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError):
            self.close_connection = True

    # ----- sending ---------------------------------------------------------------------------------------------

    def _send_reply(self, method: str, reply: _Reply) -> None:
        if isinstance(reply.body, bytes):
            payload, content_type = reply.body, "text/plain; charset=utf-8"
        else:
            payload, content_type = json.dumps(reply.body).encode(), "application/json; charset=utf-8"
        self.send_response(reply.status)
        headers = {"Content-Type": content_type, **reply.headers, "Content-Length": str(len(payload))}
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        if method != "HEAD":
            self.wfile.write(payload)

    def _send_file(self, method: str, blob: _Blob, headers: dict[str, str], filename: str) -> None:
        """The file's bytes (or the asked range of them), with the faults the test set."""
        double = self.server.double
        data = _corrupted(blob.content) if double._is_corrupt(filename) else blob.content
        total = len(data)
        start, end, status = 0, total - 1, 200
        asked = self.headers.get("Range")
        if asked:
            match = _RANGE.fullmatch(asked)
            if match is None or "," in asked:
                raise _error(416, None, f"hub double: unsupported range {asked!r}",
                             {"Content-Range": f"bytes */{total}"})
            first, last = match.groups()
            if first:
                start, end = int(first), min(int(last), total - 1) if last else total - 1
            elif last:
                start = max(total - int(last), 0)
            if start >= total or start > end:
                raise _error(416, None, "Requested Range Not Satisfiable", {"Content-Range": f"bytes */{total}"})
            status = 206
        body = data[start: end + 1]
        self.send_response(status)
        for name, value in {**headers, "Accept-Ranges": "bytes", "Content-Type": "application/octet-stream",
                            "Content-Length": str(len(body))}.items():
            self.send_header(name, value)
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{end}/{total}")
        self.end_headers()
        if method == "HEAD":
            return
        cut = double._take_cut(filename)
        sent_limit = len(body) if cut is None else min(cut, len(body))
        sent = 0
        started = time.monotonic()
        while sent < sent_limit:
            if self.server.stopping.is_set():
                self.close_connection = True
                return
            rate = double.bytes_per_second
            size = _CHUNK if not rate else max(1, min(_CHUNK, rate // 20))
            piece = body[sent: min(sent + size, sent_limit)]
            self.wfile.write(piece)
            sent += len(piece)
            if rate:
                self.wfile.flush()
                wait = started + sent / rate - time.monotonic()
                if wait > 0:
                    self.server.stopping.wait(wait)
        self.wfile.flush()
        if sent < len(body):  # cut: the client sees the connection end before Content-Length bytes came
            self.close_connection = True

    # ----- the Hub ---------------------------------------------------------------------------------------------

    def _hub(self, method: str) -> None:
        raw_path = urlsplit(self.path).path
        if raw_path == "/api/models" or raw_path.startswith("/api/models/"):
            if method != "GET":
                raise _error(405, None, f"hub double: {method} {raw_path} is not served")
            if raw_path == "/api/models":
                self._list_models()
            else:
                self._repo_api(raw_path[len("/api/models/"):])
        elif raw_path == "/api/agent-harnesses":
            raise _Reply(200, _EMPTY_AGENT_REGISTRY)
        elif raw_path == "/api/whoami-v2":
            self._whoami()
        elif "/resolve/" in raw_path:
            self._resolve(method, raw_path)
        else:
            raise _error(404, None, f"hub double: no route for {raw_path}")

    def _query(self) -> dict[str, list[str]]:
        return parse_qs(urlsplit(self.path).query, keep_blank_values=True)

    def _authorization(self) -> str | None:
        return self.headers.get("Authorization")

    def _repo_not_found(self, repo_id: str) -> _Reply:
        # The Hub answers 401 to an anonymous request (a private repository looks the same), 404 to a signed one.
        status = 404 if self._authorization() else 401
        return _error(status, "RepoNotFound", "Repository not found")

    def _whoami(self) -> None:
        token = self.server.double.token
        if token is not None and self._authorization() == f"Bearer {token}":
            raise _Reply(200, {"type": "user", "id": "0" * 24, "name": "hub-double-user", "fullname": "Hub Double",
                               "auth": {"type": "access_token", "accessToken": {"role": "read"}}})
        raise _error(401, None, "Invalid credentials in Authorization header")

    def _check_revision(self, repo: _Repo, revision: str, headers: dict[str, str] | None = None) -> None:
        if revision not in ("main", "refs/heads/main", repo.sha):
            raise _error(404, "RevisionNotFound", f"Invalid rev id: {revision}", headers)

    def _check_gate(self, repo: _Repo, headers: dict[str, str]) -> None:
        token = self.server.double.token
        if not repo.gated or token is None:
            return
        given = self._authorization()
        name = repo.spec.repo_id
        if not given:
            raise _error(401, "GatedRepo", f"Access to model {name} is restricted. You must have access to it and be "
                         "authenticated to access it. Please log in.", headers)
        if given != f"Bearer {token}":
            raise _error(403, "GatedRepo", f"Access to model {name} is restricted and you are not in the authorized "
                         f"list. Visit {self.server.double.endpoint}/{name} to ask for access.", headers)

    # ----- /{repo_id}/resolve/{revision}/{filename} --------------------------------------------------------------

    def _resolve(self, method: str, raw_path: str) -> None:
        before, _, after = raw_path.partition("/resolve/")
        repo_id = unquote(before.lstrip("/"))
        raw_revision, _, raw_filename = after.partition("/")
        revision, filename = unquote(raw_revision), unquote(raw_filename)
        repo = self.server.double._repo(repo_id)
        if repo is None:  # datasets/..., spaces/... land here too: the double has models only
            raise self._repo_not_found(repo_id)
        commit = {"X-Repo-Commit": repo.sha}
        self._check_revision(repo, revision)
        self._check_gate(repo, commit)
        blob = repo.blobs.get(filename)
        if blob is None:
            raise _error(404, "EntryNotFound", "Entry not found", commit)
        if not blob.lfs:
            self._send_file(method, blob, {**commit, "ETag": f'"{blob.oid}"'}, filename)
            return
        location = self._signed_cdn_url(blob, filename)
        raise _Reply(302, f"Found. Redirecting to {location}".encode(), {
            **commit, "Location": location, "X-Linked-Etag": f'"{blob.sha256}"', "X-Linked-Size": str(blob.size),
            "ETag": f'"{blob.sha256}"', "Accept-Ranges": "bytes"})

    def _signed_cdn_url(self, blob: _Blob, filename: str) -> str:
        double = self.server.double
        path = f"/cdn-lfs/{blob.sha256}/{quote(filename)}"
        expires = str(int(time.time()) + 3600)
        query = urlencode({"Expires": expires, "Signature": double._signature(path, expires)})
        return f"{double.cdn_endpoint}{path}?{query}"

    # ----- /api/models -----------------------------------------------------------------------------------------

    def _list_models(self) -> None:
        query = self._query()
        repos = self.server.double._all_repos()
        search = (query.get("search") or [""])[-1].lower()
        if search:
            repos = [repo for repo in repos if search in repo.spec.repo_id.lower()]
        author = (query.get("author") or [""])[-1]
        if author:
            repos = [repo for repo in repos if repo.spec.repo_id.split("/")[0] == author and "/" in repo.spec.repo_id]
        for wanted in query.get("filter", []):
            repos = [repo for repo in repos if wanted in repo.all_tags or wanted == repo.spec.repo_id]
        pipeline = (query.get("pipeline_tag") or [""])[-1]
        if pipeline:
            repos = [repo for repo in repos if repo.spec.pipeline_tag == pipeline]
        if "gated" in query:
            gated = _flag(query, "gated")
            repos = [repo for repo in repos if bool(repo.gated) == gated]
        sort = (query.get("sort") or [""])[-1]
        if sort:
            if sort not in _SORT_KEYS:
                raise _error(400, None, f'Invalid sort parameter: "{sort}"')
            ascending = (query.get("direction") or ["-1"])[-1] == "1"
            repos.sort(key=lambda repo: _model_fields(repo, blobs=False)[sort], reverse=not ascending)
        offset = _cursor(query)
        limit = int((query.get("limit") or ["0"])[-1] or 0)
        size = min(limit, self.server.double.page_size) if limit > 0 else self.server.double.page_size
        page = repos[offset: offset + size]
        expand = query.get("expand")
        entries = []
        for repo in page:
            fields = _model_fields(repo, blobs=False)
            if expand:
                keys: tuple[str, ...] = ("_id", "id", *expand)
            else:
                keys = _COMPACT_KEYS + (_FULL_EXTRA_KEYS if _flag(query, "full") else ())
                keys += ("cardData",) if _flag(query, "cardData") or _flag(query, "full") else ()
                keys += ("config",) if _flag(query, "config") else ()
            entries.append({key: fields[key] for key in keys if fields.get(key) is not None})
        more = offset + size < len(repos) and (limit <= 0 or offset + size < limit)
        raise _Reply(200, entries, self._next_link(query, offset + size) if more else {})

    def _next_link(self, query: dict[str, list[str]], offset: int) -> dict[str, str]:
        following = {key: value for key, value in query.items() if key != "cursor"}
        following["cursor"] = [base64.urlsafe_b64encode(json.dumps({"offset": offset}).encode()).decode()]
        url = f"{self.server.double.endpoint}{urlsplit(self.path).path}?{urlencode(following, doseq=True)}"
        return {"Link": f'<{url}>; rel="next"'}

    def _repo_api(self, rest: str) -> None:
        """/api/models/{repo_id}[/revision/{rev}|/tree/{rev}[/{path}]|/refs]"""
        repo = next((candidate for candidate in self.server.double._all_repos()
                     if rest == candidate.spec.repo_id or rest.startswith(candidate.spec.repo_id + "/")), None)
        if repo is None:
            segments = rest.split("/")
            named = "/".join(segments[:2]) if len(segments) > 1 and segments[1] not in (
                "revision", "tree", "refs", "paths-info") else segments[0]
            raise self._repo_not_found(unquote(named))
        tail = rest[len(repo.spec.repo_id):].lstrip("/")
        query = self._query()
        if not tail:
            self._model_info(repo, query)
        kind, _, remainder = tail.partition("/")
        if kind == "revision" and remainder:
            self._check_revision(repo, unquote(remainder))
            self._model_info(repo, query)
        if kind == "tree" and remainder:
            raw_revision, _, raw_path = remainder.partition("/")
            self._check_revision(repo, unquote(raw_revision))
            self._tree(repo, unquote(raw_path).strip("/"), query)
        if kind == "refs" and not remainder:
            raise _Reply(200, {"branches": [{"name": "main", "ref": "refs/heads/main", "targetCommit": repo.sha}],
                               "converts": [], "tags": []})
        raise _error(404, None, f"hub double: no route for /api/models/{rest}")

    def _model_info(self, repo: _Repo, query: dict[str, list[str]]) -> None:
        blobs = _flag(query, "blobs")
        fields = _model_fields(repo, blobs=blobs)
        expand = query.get("expand")
        if expand and (blobs or _flag(query, "securityStatus")):
            raise _error(400, None, "`expand` cannot be used with `blobs` or `securityStatus`")
        if expand:
            info = {key: fields[key] for key in ("_id", "id", *expand) if fields.get(key) is not None}
        else:
            skipped = {"trendingScore", "downloadsAllTime", "config"}
            info = {key: value for key, value in fields.items() if key not in skipped and value is not None}
        if _flag(query, "securityStatus"):
            info["securityRepoStatus"] = {"scansDone": True, "filesWithIssues": []}
        raise _Reply(200, info)

    def _tree(self, repo: _Repo, folder: str, query: dict[str, list[str]]) -> None:
        if folder and folder not in repo.folders:
            raise _error(404, "EntryNotFound", f"{folder} does not exist on \"main\"", {"X-Repo-Commit": repo.sha})
        recursive, expand = _flag(query, "recursive"), _flag(query, "expand")
        prefix = f"{folder}/" if folder else ""
        entries: list[dict[str, Any]] = []
        for path in sorted(repo.folders):
            inside = path.startswith(prefix) and path != folder
            if inside and (recursive or "/" not in path[len(prefix):]):
                entries.append({"type": "directory", "oid": hashlib.sha1(
                    f"tree {repo.sha} {path}".encode()).hexdigest(), "size": 0, "path": path})
        for path, blob in repo.blobs.items():
            if path.startswith(prefix) and (recursive or "/" not in path[len(prefix):]):
                entry: dict[str, Any] = {"type": "file", "oid": blob.oid, "size": blob.size, "path": path}
                if blob.lfs:
                    entry["lfs"] = {"oid": blob.sha256, "size": blob.size, "pointerSize": blob.pointer_size}
                entries.append(entry)
        entries.sort(key=lambda entry: entry["path"])
        if expand:
            for entry in entries:
                entry["lastCommit"] = {"id": repo.sha, "title": "Upload files", "date": repo.spec.last_modified}
                if entry["type"] == "file":
                    entry["securityFileStatus"] = {"status": "safe", "avScan": {"virusFound": False, "virusNames":
                                                   None}, "pickleImportScan": None}
        size = 50 if expand else self.server.double.page_size
        offset = _cursor(query)
        more = offset + size < len(entries)
        raise _Reply(200, entries[offset: offset + size], self._next_link(query, offset + size) if more else {})

    # ----- the CDN ---------------------------------------------------------------------------------------------

    def _cdn(self, method: str) -> None:
        double = self.server.double
        parts = urlsplit(self.path)
        query = parse_qs(parts.query)
        expires, signature = (query.get("Expires") or [""])[-1], (query.get("Signature") or [""])[-1]
        denied = _Reply(403, b"<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>AccessDenied</Code>"
                             b"<Message>Access Denied</Message></Error>", {"Content-Type": "application/xml"})
        if not expires.isdigit() or int(expires) < time.time() or not hmac.compare_digest(
                signature, double._signature(parts.path, expires)):
            raise denied
        match = re.fullmatch(r"/cdn-lfs/([0-9a-f]{64})/(.+)", parts.path)
        blob = double._blob_by_sha256(match.group(1)) if match else None
        if match is None or blob is None:
            raise denied
        filename = unquote(match.group(2))
        name = filename.rsplit("/", 1)[-1]
        self._send_file(method, blob, {
            "ETag": f'"{hashlib.md5(blob.content).hexdigest()}"',
            "Content-Disposition": f"inline; filename*=UTF-8''{quote(name)}; filename=\"{name}\";",
            "Last-Modified": "Wed, 01 May 2024 12:00:00 GMT"}, filename)


def _cursor(query: dict[str, list[str]]) -> int:
    cursor = (query.get("cursor") or [""])[-1]
    if not cursor:
        return 0
    try:
        return int(json.loads(base64.urlsafe_b64decode(cursor.encode()))["offset"])
    except (ValueError, KeyError, TypeError) as exc:
        raise _error(400, None, f"Invalid cursor: {cursor}") from exc


def _model_fields(repo: _Repo, *, blobs: bool) -> dict[str, Any]:
    """Every property the double knows of a model, under the Hub's names."""
    spec = repo.spec
    siblings: list[dict[str, Any]] = []
    for path, blob in repo.blobs.items():
        sibling: dict[str, Any] = {"rfilename": path}
        if blobs:
            sibling.update(blobId=blob.oid, size=blob.size)
            if blob.lfs:
                sibling["lfs"] = {"sha256": blob.sha256, "size": blob.size, "pointerSize": blob.pointer_size}
        siblings.append(sibling)
    return {
        "_id": hashlib.sha1(spec.repo_id.encode()).hexdigest()[:24],
        "id": spec.repo_id,
        "modelId": spec.repo_id,
        "author": spec.repo_id.split("/")[0] if "/" in spec.repo_id else None,
        "sha": repo.sha,
        "lastModified": spec.last_modified,
        "createdAt": spec.last_modified,
        "private": False,
        "disabled": False,
        "gated": repo.gated,
        "pipeline_tag": spec.pipeline_tag,
        "library_name": spec.library_name,
        "tags": list(repo.all_tags),
        "downloads": spec.downloads,
        "downloadsAllTime": spec.downloads,
        "likes": spec.likes,
        "trendingScore": 0,
        "cardData": spec.card_data,
        "siblings": siblings,
        "spaces": [],
        "usedStorage": sum(blob.size for blob in repo.blobs.values()),
    }


# ----- pointing huggingface_hub at the double ------------------------------------------------------------------

_TOKEN_VARIABLES = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_OIDC_RESOURCE", "HF_OIDC_ID_TOKEN")


@contextlib.contextmanager
def huggingface_hub_pointed_at(endpoint: str, *, cache_dir: str | Path | None = None,
                               token: str | None = None) -> Iterator[None]:
    """huggingface_hub, in this process, talks to `endpoint` (online, whatever HF_HUB_OFFLINE said at its import),
    with `token` as the machine's token (none by default), and keeps its cache in `cache_dir` if given. Restores
    everything after. Not for tests run side by side in threads: it changes process-wide settings."""
    from huggingface_hub import constants, hf_api
    from huggingface_hub.utils import _detect_agent

    endpoint = endpoint.rstrip("/")
    patches: list[tuple[Any, str, Any]] = [
        (constants, "ENDPOINT", endpoint),
        (constants, "HUGGINGFACE_CO_URL_TEMPLATE", endpoint + "/{repo_id}/resolve/{revision}/{filename}"),
        (constants, "HF_HUB_OFFLINE", False),
        (constants, "HF_HUB_DISABLE_IMPLICIT_TOKEN", token is None),
        (hf_api.api, "endpoint", endpoint),
        (_detect_agent, "_registry", dict(_EMPTY_AGENT_REGISTRY)),
    ]
    if cache_dir is not None:
        patches.append((constants, "HF_HUB_CACHE", str(cache_dir)))
    variables: dict[str, str | None] = {name: None for name in _TOKEN_VARIABLES}
    variables.update(HF_ENDPOINT=endpoint, HF_HUB_OFFLINE="0", TRANSFORMERS_OFFLINE="0")
    if token is not None:
        variables["HF_TOKEN"] = token
    if cache_dir is not None:
        variables["HF_HUB_CACHE"] = str(cache_dir)
    saved_attributes = [(owner, name, getattr(owner, name)) for owner, name, _ in patches]
    saved_variables = {name: os.environ.get(name) for name in variables}
    try:
        for owner, name, value in patches:
            setattr(owner, name, value)
        _set_variables(variables)
        yield
    finally:
        for owner, name, value in reversed(saved_attributes):
            setattr(owner, name, value)
        _set_variables(saved_variables)


def _set_variables(variables: dict[str, str | None]) -> None:
    for name, value in variables.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def hub_env(endpoint: str, hf_home: str | Path) -> dict[str, str]:
    """Environment variables for a subprocess (the app, a CLI) that should use the double: set before huggingface_hub
    is imported there, they are read as they should be. HF_HOME of its own and an empty HF_TOKEN: no token of the
    machine's is sent; the agent-harness registry (fetched from the double) and the cache go there."""
    home = Path(hf_home)
    return {"HF_ENDPOINT": endpoint.rstrip("/"), "HF_HUB_OFFLINE": "0", "TRANSFORMERS_OFFLINE": "0",
            "HF_HOME": str(home), "HF_HUB_CACHE": str(home / "hub"), "HF_HUB_DISABLE_TELEMETRY": "1",
            "HF_TOKEN": ""}
