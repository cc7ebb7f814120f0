"""The Hub double (tests/hub_double.py) through the real huggingface_hub client: what the app's model library relies
on (search, a repository's files and checksums, downloads that resume, gated and missing repositories) works against
it as against huggingface.co, and nothing leaves 127.0.0.1."""

from __future__ import annotations

import hashlib
import os
import socket
import time
from pathlib import Path

import huggingface_hub
import pytest
from huggingface_hub import HfApi, constants, file_download, hf_hub_download, snapshot_download
from huggingface_hub.errors import (
    GatedRepoError,
    RemoteEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)

from tests.hub_double import HubDouble, HubRepo, git_blob_id, huggingface_hub_pointed_at

CONFIG = b'{"model_type": "llama", "hidden_size": 64}'
README = b"---\nlicense: apache-2.0\n---\n# Tiny chat\n"
WEIGHTS = bytes(range(256)) * 16  # 4 kB, LFS by its name
GGUF = b"GGUF" + bytes(range(200)) * 20
BIG = hashlib.sha256(b"seed").digest() * 6_250  # 200 kB, LFS by its size and name
NOTES = b"n" * 12_000  # LFS by its size alone (no LFS suffix)
CHAT = "demo-org/tiny-chat"
GGUF_REPO = "demo-org/tiny-chat-GGUF"
GATED = "locked-org/gated-model"
TOKEN = "hf_double_test_token"


@pytest.fixture
def no_network_but_loopback(monkeypatch: pytest.MonkeyPatch):
    """Refuses any connection or name lookup that is not 127.0.0.1 (or localhost), and remembers the attempts: a
    library that swallows the error (huggingface_hub's best-effort fetches) still fails the test."""
    attempts: list[object] = []
    real_connect, real_getaddrinfo = socket.socket.connect, socket.getaddrinfo

    def connect(self: socket.socket, address: object) -> None:
        host = address[0] if isinstance(address, tuple) else None
        if self.family in (socket.AF_INET, socket.AF_INET6) and host not in ("127.0.0.1", "::1"):
            attempts.append(address)
            raise OSError(f"the test tried to leave 127.0.0.1: {address!r}")
        real_connect(self, address)  # type: ignore[arg-type]

    def getaddrinfo(host: object, *args: object, **kwargs: object) -> object:
        if host not in ("127.0.0.1", "localhost", "::1", None):
            attempts.append(host)
            raise socket.gaierror(f"the test tried to look up {host!r}")
        return real_getaddrinfo(host, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    yield attempts
    assert attempts == [], f"something tried to leave 127.0.0.1: {attempts}"


@pytest.fixture
def double() -> HubDouble:
    hub = HubDouble()
    hub.add(HubRepo(CHAT, {"config.json": CONFIG, "README.md": README, "model.safetensors": WEIGHTS,
                           "big.bin": BIG, "docs/notes.txt": NOTES, "docs/deep/extra.json": b"{}"},
                    card_data={"license": "apache-2.0", "language": ["en"]}, tags=("conversational",),
                    pipeline_tag="text-generation", library_name="transformers", downloads=1234, likes=56))
    hub.add(HubRepo(GGUF_REPO, {"tiny-Q4_K_M.gguf": GGUF, "README.md": b"# gguf\n"}, card_data={"license": "mit"},
                    downloads=99_999, likes=3))
    hub.add(HubRepo(GATED, {"config.json": CONFIG, "model.safetensors": WEIGHTS}, gated="manual",
                    card_data={"license": "llama3"}, pipeline_tag="text-generation"))
    return hub


@pytest.fixture
def hub(double: HubDouble, tmp_path: Path, no_network_but_loopback: list[object], monkeypatch: pytest.MonkeyPatch):
    """The double serving, huggingface_hub pointed at it with its cache in tmp_path; the Xet path must not run."""

    def no_xet(*args: object, **kwargs: object) -> None:
        raise AssertionError("huggingface_hub took its Xet path")

    monkeypatch.setattr(file_download, "xet_get", no_xet)
    with double.serve() as endpoint, huggingface_hub_pointed_at(endpoint, cache_dir=tmp_path / "hub"):
        yield double


def test_the_helper_points_huggingface_hub_at_the_double_and_restores_it(double: HubDouble):
    before = (constants.ENDPOINT, constants.HUGGINGFACE_CO_URL_TEMPLATE, constants.HF_HUB_OFFLINE,
              huggingface_hub.hf_api.api.endpoint, os.environ.get("HF_ENDPOINT"))
    with double.serve() as endpoint, huggingface_hub_pointed_at(endpoint):
        assert endpoint.startswith("http://127.0.0.1:")
        assert constants.ENDPOINT == endpoint == os.environ["HF_ENDPOINT"] == huggingface_hub.hf_api.api.endpoint
        assert constants.HF_HUB_OFFLINE is False
        assert huggingface_hub.hf_hub_url(CHAT, "config.json") == f"{endpoint}/{CHAT}/resolve/main/config.json"
    assert (constants.ENDPOINT, constants.HUGGINGFACE_CO_URL_TEMPLATE, constants.HF_HUB_OFFLINE,
            huggingface_hub.hf_api.api.endpoint, os.environ.get("HF_ENDPOINT")) == before
    assert double.endpoint is None  # stopped


def test_list_models_with_search_finds_the_repository(hub: HubDouble):
    found = list(HfApi(endpoint=hub.endpoint).list_models(search="tiny-chat", sort="downloads", limit=10))
    assert [model.id for model in found] == [GGUF_REPO, CHAT]  # most downloaded first
    chat = found[1]
    assert (chat.downloads, chat.likes, chat.pipeline_tag, chat.library_name) == (1234, 56, "text-generation",
                                                                                  "transformers")
    assert {"conversational", "transformers", "safetensors", "license:apache-2.0"} <= set(chat.tags or ())
    assert "gguf" in (found[0].tags or ())
    # The module-level function too (an HfApi built at import), and the Hub's query parameters as sent.
    assert [model.id for model in huggingface_hub.list_models(filter="gguf")] == [GGUF_REPO]
    assert list(huggingface_hub.list_models(search="nothing-like-this")) == []
    searched = hub.requested("GET", "/api/models?")[0][1]
    assert "search=tiny-chat" in searched and "sort=downloads" in searched and "limit=10" in searched
    full = next(iter(HfApi().list_models(search=GATED, full=True, cardData=True)))
    assert full.gated == "manual" and full.sha == hub.commit(GATED) and full.card_data.license == "llama3"
    assert [s.rfilename for s in full.siblings or []] == ["config.json", "model.safetensors"]
    expanded = next(iter(HfApi().list_models(search=GATED, expand=["gated", "cardData"])))
    assert (expanded.gated, expanded.card_data.license, expanded.downloads, expanded.tags) == ("manual", "llama3",
                                                                                              None, None)


def test_list_models_pages_through_the_link_header(hub: HubDouble):
    hub.page_size = 2
    for index in range(5):
        hub.add(HubRepo(f"pages/model-{index}", {"README.md": b"x"}))
    assert [model.id for model in HfApi().list_models(author="pages")] == [f"pages/model-{i}" for i in range(5)]
    assert len(hub.requested("GET", "/api/models?")) == 3


def test_model_info_gives_sizes_checksums_gate_and_licence(hub: HubDouble):
    info = HfApi().model_info(CHAT, files_metadata=True)
    assert info.sha == hub.commit(CHAT) and len(info.sha) == 40
    assert info.card_data is not None and info.card_data.license == "apache-2.0"
    assert info.gated is False and info.pipeline_tag == "text-generation" and info.library_name == "transformers"
    assert (info.downloads, info.likes) == (1234, 56) and info.last_modified is not None
    assert info.used_storage == sum(map(len, (CONFIG, README, WEIGHTS, BIG, NOTES, b"{}")))
    siblings = {sibling.rfilename: sibling for sibling in info.siblings or []}
    assert set(siblings) == {"config.json", "README.md", "model.safetensors", "big.bin", "docs/notes.txt",
                             "docs/deep/extra.json"}
    config, weights, notes = siblings["config.json"], siblings["model.safetensors"], siblings["docs/notes.txt"]
    assert config.size == len(CONFIG) and config.lfs is None and config.blob_id == git_blob_id(CONFIG)
    assert weights.size == len(WEIGHTS) and weights.lfs is not None
    assert weights.lfs.sha256 == hashlib.sha256(WEIGHTS).hexdigest() and weights.lfs.size == len(WEIGHTS)
    assert 120 < weights.lfs.pointer_size < 140 and weights.blob_id != git_blob_id(WEIGHTS)  # the pointer's id
    assert notes.lfs is not None and notes.lfs.sha256 == hashlib.sha256(NOTES).hexdigest()  # over 10 kB
    # A gated repository's card is public, as on the Hub; without files_metadata the siblings carry only names.
    gated = HfApi().model_info(GATED)
    assert gated.gated == "manual" and gated.card_data is not None and gated.card_data.license == "llama3"
    assert [(s.rfilename, s.size, s.lfs) for s in gated.siblings or []] == [("config.json", None, None),
                                                                           ("model.safetensors", None, None)]
    assert HfApi().model_info(CHAT, revision=hub.commit(CHAT)).sha == hub.commit(CHAT)


def test_list_repo_tree_and_files(hub: HubDouble):
    api = HfApi()
    assert api.list_repo_files(CHAT) == ["README.md", "big.bin", "config.json", "docs/deep/extra.json",
                                         "docs/notes.txt", "model.safetensors"]
    top = {entry.path: type(entry).__name__ for entry in api.list_repo_tree(CHAT)}
    assert top == {"README.md": "RepoFile", "big.bin": "RepoFile", "config.json": "RepoFile", "docs": "RepoFolder",
                   "model.safetensors": "RepoFile"}
    assert [entry.path for entry in api.list_repo_tree(CHAT, path_in_repo="docs")] == ["docs/deep", "docs/notes.txt"]
    big = next(entry for entry in api.list_repo_tree(CHAT, expand=True) if entry.path == "big.bin")
    assert big.lfs is not None and big.lfs.sha256 == hashlib.sha256(BIG).hexdigest() and big.size == len(BIG)
    assert big.last_commit is not None and big.last_commit.oid == hub.commit(CHAT)
    with pytest.raises(RemoteEntryNotFoundError):
        list(api.list_repo_tree(CHAT, path_in_repo="nowhere"))


def test_hf_hub_download_fetches_git_and_lfs_files_byte_exact(hub: HubDouble, tmp_path: Path):
    config = Path(hf_hub_download(CHAT, "config.json"))
    weights = Path(hf_hub_download(CHAT, "model.safetensors"))
    assert config.read_bytes() == CONFIG and weights.read_bytes() == WEIGHTS
    # The cache's layout: snapshots/<commit>/<file> -> blobs/<git blob id or sha256>.
    snapshot = tmp_path / "hub" / f"models--{CHAT.replace('/', '--')}" / "snapshots" / hub.commit(CHAT)
    assert config == snapshot / "config.json" and config.resolve().name == git_blob_id(CONFIG)
    assert weights.resolve().name == hashlib.sha256(WEIGHTS).hexdigest() == hub.etag(CHAT, "model.safetensors")
    # A git file comes from /resolve; an LFS file is redirected to the CDN origin, as on the Hub.
    assert hub.requested("HEAD", f"/{CHAT}/resolve/main/config.json")
    assert hub.requested("GET", f"/{CHAT}/resolve/main/config.json")
    assert hub.requested("GET", "/cdn-lfs/") and not hub.requested("GET", f"/{CHAT}/resolve/main/model.safetensors")
    # At the commit sha, and again from the cache (no new request).
    assert Path(hf_hub_download(CHAT, "docs/notes.txt", revision=hub.commit(CHAT))).read_bytes() == NOTES
    count = len(hub.requests)
    assert Path(hf_hub_download(CHAT, "docs/notes.txt", revision=hub.commit(CHAT))).read_bytes() == NOTES
    assert len(hub.requests) == count


def test_a_cut_connection_is_resumed_with_a_range_request(hub: HubDouble, monkeypatch: pytest.MonkeyPatch):
    """huggingface_hub retries a dropped transfer itself (after 1 s), from the bytes it has written, with Range.
    It writes in chunks of DOWNLOAD_CHUNK_SIZE (10 MiB) and loses a partial chunk: the app lowers it (1 MiB), and
    this test to 16 KiB, so the 70,000 bytes before the cut keep 4 chunks (65,536 bytes) to resume from."""
    monkeypatch.setattr(constants, "DOWNLOAD_CHUNK_SIZE", 16 * 1024)
    hub.cut_after["big.bin"] = 70_000
    path = Path(hf_hub_download(CHAT, "big.bin"))
    assert path.read_bytes() == BIG
    transfers = hub.requested("GET", "/big.bin")
    assert [range_header for _, _, range_header in transfers] == [None, "bytes=65536-"]
    assert hub.cut_after == {}  # once
    assert not list(path.resolve().parent.glob("*.incomplete"))


def test_a_cut_within_the_first_chunk_starts_over_without_range(hub: HubDouble):
    """With the default 10 MiB chunks nothing of a smaller file is written before the cut: the retry asks for all."""
    hub.cut_after["big.bin"] = 70_000
    assert Path(hf_hub_download(CHAT, "big.bin")).read_bytes() == BIG
    assert [range_header for _, _, range_header in hub.requested("GET", "/big.bin")] == [None, None]


def test_a_download_stopped_midway_leaves_nothing_to_resume(hub: HubDouble, monkeypatch: pytest.MonkeyPatch,
                                                           tmp_path: Path):
    """huggingface_hub 2.4 writes to `<blob>.<random>.incomplete` and deletes it when the call fails: the next
    hf_hub_download starts from byte 0 (no Range). A cancel from the progress bar, as the app's, is such a failure."""
    from huggingface_hub.utils import tqdm as hub_tqdm

    monkeypatch.setattr(constants, "DOWNLOAD_CHUNK_SIZE", 16 * 1024)

    class Stopped(Exception):
        pass

    received: list[int] = []

    class StopAfterTwoChunks(hub_tqdm):
        def update(self, n: float | None = 1) -> bool | None:
            received.append(int(n or 0))
            if len(received) > 2:
                raise Stopped
            return super().update(n)

    with pytest.raises(Stopped):
        hf_hub_download(CHAT, "big.bin", tqdm_class=StopAfterTwoChunks)
    blobs = tmp_path / "hub" / f"models--{CHAT.replace('/', '--')}" / "blobs"
    assert list(blobs.iterdir()) == []  # no partial file left
    assert Path(hf_hub_download(CHAT, "big.bin")).read_bytes() == BIG
    assert [range_header for _, _, range_header in hub.requested("GET", "/big.bin")] == [None, None]


def test_snapshot_download_with_allow_patterns_fetches_only_the_matching_files(hub: HubDouble):
    folder = Path(snapshot_download(CHAT, allow_patterns=["*.json"]))
    got = sorted(path.relative_to(folder).as_posix() for path in folder.rglob("*") if path.is_file())
    assert got == ["config.json", "docs/deep/extra.json"]
    assert (folder / "config.json").read_bytes() == CONFIG and folder.name == hub.commit(CHAT)
    fetched = {path.rsplit("/", 1)[-1] for _, path, _ in hub.requested("GET") if "/resolve/" in path}
    assert fetched == {"config.json", "extra.json"}
    assert hub.requested("GET", f"/api/models/{CHAT}/revision/main")
    assert hub.requested("GET", f"/api/models/{CHAT}/tree/{hub.commit(CHAT)}?recursive=true")


def test_a_gated_repository_needs_the_token(hub: HubDouble):
    hub.token = TOKEN
    with pytest.raises(GatedRepoError) as anonymous:
        hf_hub_download(GATED, "config.json")
    assert anonymous.value.response.status_code == 401
    with pytest.raises(GatedRepoError) as stranger:
        hf_hub_download(GATED, "model.safetensors", token="hf_someone_else")
    assert stranger.value.response.status_code == 403
    with pytest.raises(GatedRepoError):
        snapshot_download(GATED)
    assert Path(hf_hub_download(GATED, "config.json", token=TOKEN)).read_bytes() == CONFIG
    assert Path(hf_hub_download(GATED, "model.safetensors", token=TOKEN)).read_bytes() == WEIGHTS
    assert HfApi(token=TOKEN).whoami()["name"] == "hub-double-user"


def test_the_token_given_to_the_helper_is_the_machines(double: HubDouble, tmp_path: Path,
                                                       no_network_but_loopback: list[object]):
    double.token = TOKEN
    with double.serve() as endpoint, huggingface_hub_pointed_at(endpoint, cache_dir=tmp_path, token=TOKEN):
        assert Path(hf_hub_download(GATED, "config.json")).read_bytes() == CONFIG


def test_missing_repositories_files_and_revisions_raise_the_hubs_errors(hub: HubDouble):
    with pytest.raises(RepositoryNotFoundError):
        HfApi().model_info("nobody/nothing")
    with pytest.raises(RepositoryNotFoundError):
        hf_hub_download("nobody/nothing", "config.json")
    with pytest.raises(RepositoryNotFoundError):
        snapshot_download("nobody/nothing")
    with pytest.raises(RemoteEntryNotFoundError):
        hf_hub_download(CHAT, "missing.txt")
    with pytest.raises(RevisionNotFoundError):
        hf_hub_download(CHAT, "config.json", revision="no-such-branch")
    with pytest.raises(RevisionNotFoundError):
        HfApi().model_info(CHAT, revision="0" * 40)
    assert HfApi().repo_exists(CHAT) and not HfApi().repo_exists("nobody/nothing")
    assert HfApi().file_exists(CHAT, "config.json") and not HfApi().file_exists(CHAT, "missing.txt")


def test_corrupt_bytes_pass_hf_hub_download_and_fail_verification(hub: HubDouble, tmp_path: Path):
    """hf_hub_download checks the size only: checking the bytes is the caller's job (or verify_repo_checksums')."""
    hub.corrupt.update({"model.safetensors", "config.json"})
    weights = Path(hf_hub_download(CHAT, "model.safetensors")).read_bytes()
    config = Path(hf_hub_download(CHAT, "config.json")).read_bytes()
    assert len(weights) == len(WEIGHTS) and weights != WEIGHTS
    assert hashlib.sha256(weights).hexdigest() != hub.sha256(CHAT, "model.safetensors")
    assert len(config) == len(CONFIG) and git_blob_id(config) != hub.blob_id(CHAT, "config.json")
    hf_hub_download(CHAT, "README.md")
    verification = HfApi().verify_repo_checksums(CHAT, cache_dir=tmp_path / "hub")
    assert sorted(mismatch["path"] for mismatch in verification.mismatches) == ["config.json", "model.safetensors"]


def test_bytes_per_second_throttles_the_transfer(hub: HubDouble):
    hub.bytes_per_second = 40_000
    started = time.monotonic()
    assert Path(hf_hub_download(CHAT, "docs/notes.txt")).read_bytes() == NOTES  # 12 kB at 40 kB/s
    assert time.monotonic() - started >= 0.25
