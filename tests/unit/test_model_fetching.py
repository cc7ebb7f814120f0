"""Fetching models (app/models/hub.py, app/models/downloads.py) through the real huggingface_hub client, against a
local double of the Hugging Face Hub on 127.0.0.1 (tests/hub_double.py) that serves a tiny GGUF and a tiny
safetensors folder written in the test: search, a repository's choices, a download with progress, a dropped
connection and a cancel resumed, a corrupted file refused and deleted, a full disk refused before any byte, gated
repositories, deletion, and offline as the default."""

from __future__ import annotations

import os
import time
from dataclasses import replace
from pathlib import Path

import pytest

from app.models import hub
from app.models.discovery import Source, discover
from app.models.downloads import Download, Downloads
from app.models.recommended import RECOMMENDED, for_machine
from tests.hub_double import HubDouble, HubRepo, huggingface_hub_pointed_at
from tests.model_fixtures import write_folder, write_gguf

GGUF_REPO = "ggml-org/Qwen3-1.7B-GGUF"  # named as a recommended one: its Q4_K_M file is picked from the listing
BIG = 1_500_000  # bytes of the Q4_K_M file: six of the transfer's 256 KiB chunks


@pytest.fixture(scope="module")
def model_bytes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, bytes]]:
    made = tmp_path_factory.mktemp("made")
    gguf = write_gguf(made / "tiny.gguf", name="Tiny Qwen").read_bytes()
    # Padding after the tensors keeps the file readable and makes it large enough to cut, throttle and resume.
    big = gguf + b"\0" * (BIG - len(gguf))
    folder = write_folder(made / "folder")
    return {
        GGUF_REPO: {"Qwen3-1.7B-Q4_K_M.gguf": big, "Qwen3-1.7B-Q8_0.gguf": gguf,
                    "Qwen3-1.7B-F16-00001-of-00002.gguf": gguf, "Qwen3-1.7B-F16-00002-of-00002.gguf": b"\0" * 64,
                    "mmproj-Qwen3-f16.gguf": b"projector" * 100, "README.md": b"---\nlicense: apache-2.0\n---\n"},
        "acme/tiny-chat": {**{path.name: path.read_bytes() for path in folder.iterdir()},
                           "pytorch_model.bin": b"pickle" * 100, "onnx/model.onnx": b"onnx" * 100},
    }


@pytest.fixture
def hub_double(model_bytes, tmp_path, monkeypatch):
    double = HubDouble()
    double.add(HubRepo(GGUF_REPO, model_bytes[GGUF_REPO], card_data={"license": "apache-2.0"}, tags=("gguf",),
                       pipeline_tag="text-generation", downloads=500))
    double.add(HubRepo("acme/tiny-chat", model_bytes["acme/tiny-chat"], card_data={"license": "apache-2.0"},
                       pipeline_tag="text-generation", library_name="transformers", downloads=20))
    double.add(HubRepo("acme/gated-chat", model_bytes["acme/tiny-chat"], gated="manual",
                       card_data={"license": "other", "license_name": "acme-community"}))
    double.token = "hf_test_token"
    monkeypatch.setenv("DEMO_ALLOW_DOWNLOADS", "1")
    with double.serve() as url, huggingface_hub_pointed_at(url, cache_dir=tmp_path / "hub"):
        yield double


def _wait(download: Download, until: float = 30.0) -> None:
    deadline = time.monotonic() + until
    while download.running and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not download.running, "the download did not finish in time"


def _resolves(double: HubDouble) -> list[tuple[str, str, str | None]]:
    return [request for request in double.requests if "/resolve/" in request[1] and request[0] == "GET"]


# ----- offline by default -----------------------------------------------------------------------------------------

def test_nothing_is_contacted_unless_the_user_allows_downloads(hub_double, monkeypatch):
    monkeypatch.delenv("DEMO_ALLOW_DOWNLOADS")
    with pytest.raises(hub.HubUnavailable, match="DEMO_ALLOW_DOWNLOADS=1"):
        hub.search("qwen")
    with pytest.raises(hub.HubUnavailable, match="DEMO_ALLOW_DOWNLOADS=1"):
        hub.repository(GGUF_REPO)
    assert hub_double.requests == []


# ----- what a repository offers -----------------------------------------------------------------------------------

def test_search_and_a_repository_s_choices(hub_double):
    found = hub.search("qwen3")
    assert [model.repo_id for model in found] == [GGUF_REPO]
    assert found[0].has_gguf and found[0].licence == "apache-2.0" and found[0].downloads == 500
    repo = hub.repository(GGUF_REPO)
    assert len(repo.revision) == 40 and repo.licence == "apache-2.0" and not repo.needs_acknowledgement
    # One choice per quantization: a split file by its first part, no projector.
    assert [file.name for file in repo.gguf_choices] == [
        "Qwen3-1.7B-F16-00001-of-00002.gguf", "Qwen3-1.7B-Q4_K_M.gguf", "Qwen3-1.7B-Q8_0.gguf"]
    split = hub.gguf_plan(repo, "Qwen3-1.7B-F16-00001-of-00002.gguf")
    assert [file.name for file in split.files] == [
        "Qwen3-1.7B-F16-00001-of-00002.gguf", "Qwen3-1.7B-F16-00002-of-00002.gguf", "mmproj-Qwen3-f16.gguf"]
    assert all(file.sha256 for file in split.files if file.name.endswith(".gguf"))
    folder = hub.folder_plan(hub.repository("acme/tiny-chat"))
    names = {file.name for file in folder.files}
    assert {"config.json", "model.safetensors", "tokenizer_config.json", "README.md"} <= names
    assert "pytorch_model.bin" not in names and "onnx/model.onnx" not in names  # weights in other formats
    with pytest.raises(hub.HubUnavailable, match="no safetensors model folder"):
        hub.folder_plan(repo)
    with pytest.raises(hub.HubUnavailable, match="has no model"):
        hub.repository("acme/missing")


def test_a_recommended_model_picks_its_quantization_from_the_listing(hub_double):
    recommended = next(item for item in RECOMMENDED if item.repo_id == GGUF_REPO)
    plan = recommended.plan(hub.repository(GGUF_REPO))
    assert plan.main == "Qwen3-1.7B-Q4_K_M.gguf" and "mmproj-Qwen3-f16.gguf" in {f.name for f in plan.files}
    on_a_laptop = {fit.recommendation.repo_id: fit for fit in for_machine(16 * 2**30, None)}
    assert on_a_laptop[GGUF_REPO].fits and not on_a_laptop["Qwen/Qwen3-32B"].fits
    assert "NVIDIA GPU" in on_a_laptop["Qwen/Qwen3-32B"].reason
    with_a_gpu = {fit.recommendation.repo_id: fit for fit in for_machine(64 * 2**30, 141 * 10**9)}
    assert with_a_gpu["Qwen/Qwen3-32B"].fits
    roles = {item.role for item in RECOMMENDED}
    assert {"laptop", "vision", "reasoning", "gpu", "speech", "embedding"} <= roles


# ----- downloading ------------------------------------------------------------------------------------------------

def test_a_download_shows_progress_is_checked_and_lands_in_the_library(hub_double, tmp_path):
    plan = hub.gguf_plan(hub.repository(GGUF_REPO), "Qwen3-1.7B-Q4_K_M.gguf")
    hub_double.bytes_per_second = 1_500_000
    download = Downloads().start(plan)
    seen = []
    while download.running:
        seen.append(download.progress())
        time.sleep(0.05)
    progress = download.progress()
    assert progress.state == "done", progress.message
    assert progress.done_bytes == plan.total_bytes and progress.fraction == 1.0
    middle = [p for p in seen if p.state == "downloading" and 0 < p.done_bytes < plan.total_bytes]
    assert middle, "no progress was seen between the start and the end"
    assert any(p.bytes_per_second and p.seconds_left is not None for p in middle)
    assert sorted(p.done_bytes for p in seen) == [p.done_bytes for p in seen]  # it never goes back
    assert progress.path == hub.snapshot_path(plan) and progress.path.read_bytes()[:4] == b"GGUF"
    found = discover([Source("Hugging Face cache", tmp_path / "hub", "hf-cache")])
    assert [model.name for model in found] == [f"{GGUF_REPO}/Qwen3-1.7B-Q4_K_M.gguf"]
    assert found[0].files.engine == "llamacpp" and found[0].files.name.endswith("Q4_K_M.gguf")


def test_a_dropped_connection_is_resumed_where_it_stopped(hub_double):
    plan = hub.gguf_plan(hub.repository(GGUF_REPO), "Qwen3-1.7B-Q4_K_M.gguf")
    hub_double.cut_after["Qwen3-1.7B-Q4_K_M.gguf"] = 700_000
    download = Downloads().start(plan)
    _wait(download)
    assert download.progress().state == "done", download.progress().message
    ranges = [rng for _, path, rng in _resolves(hub_double) if path.endswith("Q4_K_M.gguf") and rng]
    # Continued from the last whole chunk written before the cut, not from the start.
    assert ranges and 262_144 <= int(ranges[0].removeprefix("bytes=").split("-")[0]) <= 700_000
    assert download.progress().path.stat().st_size == BIG


def test_a_cancel_keeps_what_was_fetched_and_the_next_download_continues_it(hub_double):
    plan = hub.gguf_plan(hub.repository(GGUF_REPO), "Qwen3-1.7B-Q4_K_M.gguf")
    hub_double.bytes_per_second = 400_000
    downloads = Downloads()
    first = downloads.start(plan)
    assert downloads.start(plan) is first  # the same plan is not fetched twice at once
    while first.progress().done_bytes < 262_144:
        assert first.running
        time.sleep(0.02)
    first.cancel()
    _wait(first)
    assert first.progress().state == "cancelled"
    kept = hub.present_bytes(plan)
    assert kept >= 262_144
    hub_double.bytes_per_second = None
    second = downloads.start(plan)
    assert second is not first
    _wait(second)
    assert second.progress().state == "done", second.progress().message
    ranges = [rng for _, path, rng in _resolves(hub_double) if path.endswith("Q4_K_M.gguf") and rng]
    assert ranges and int(ranges[-1].removeprefix("bytes=").split("-")[0]) == kept


def test_a_file_that_does_not_match_its_checksum_is_refused_and_deleted(hub_double):
    plan = hub.gguf_plan(hub.repository(GGUF_REPO), "Qwen3-1.7B-Q8_0.gguf")
    hub_double.corrupt.add("Qwen3-1.7B-Q8_0.gguf")
    download = Downloads().start(plan)
    _wait(download)
    progress = download.progress()
    assert progress.state == "failed" and "checksum" in progress.message and "deleted" in progress.message
    assert not hub.snapshot_path(plan).exists()
    blobs = hub.repo_folder(GGUF_REPO) / "blobs"
    assert not any(blob.name.startswith(plan.files[0].sha256 or "-") for blob in blobs.iterdir())  # nor a part
    assert hub.present_bytes(replace(plan, files=plan.files[:1])) == 0


def test_a_download_the_disk_cannot_hold_is_refused_before_it_starts(hub_double):
    plan = hub.gguf_plan(hub.repository(GGUF_REPO), "Qwen3-1.7B-Q8_0.gguf")
    huge = replace(plan, files=tuple(replace(file, size=10**17) for file in plan.files))  # 100 PB listed
    with pytest.raises(hub.NotEnoughSpace, match="free"):
        hub.check_space(huge)
    download = Downloads().start(huge)
    _wait(download)
    assert download.progress().state == "failed" and "HF_HUB_CACHE" in download.progress().message
    assert _resolves(hub_double) == []  # not one byte was asked for


def test_a_gated_repository_says_so_and_downloads_with_a_token(hub_double, tmp_path):
    repo = hub.repository("acme/gated-chat")
    assert repo.gated == "manual" and repo.needs_acknowledgement
    assert repo.licence == "other (acme-community)"
    plan = hub.folder_plan(repo)
    refused = Downloads().start(plan)
    _wait(refused)
    assert refused.progress().state == "failed" and "HF_TOKEN" in refused.progress().message
    with huggingface_hub_pointed_at(os.environ["HF_ENDPOINT"], cache_dir=tmp_path / "hub", token="hf_test_token"):
        allowed = Downloads().start(plan)
        _wait(allowed)
    assert allowed.progress().state == "done", allowed.progress().message


def test_a_fetched_folder_loads_on_its_engine_and_can_be_deleted(hub_double, tmp_path):
    plan = hub.folder_plan(hub.repository("acme/tiny-chat"))
    download = Downloads().start(plan)
    _wait(download)
    folder = download.progress().path
    assert folder is not None and (folder / "config.json").is_file() and not (folder / "pytorch_model.bin").exists()
    cache = Source("Hugging Face cache", tmp_path / "hub", "hf-cache")
    [model] = discover([cache])
    assert model.name == "acme/tiny-chat" and model.files.engine in ("hf", "vllm") and not model.files.problems
    freed = hub.delete_from_cache(folder)
    assert freed >= sum(file.size for file in plan.files if file.name.endswith(".safetensors"))
    assert discover([cache]) == [] and not hub.repo_folder("acme/tiny-chat").exists()
    with pytest.raises(ValueError, match="not in the Hugging Face cache"):
        hub.delete_from_cache(tmp_path)


def test_deleting_one_gguf_keeps_the_other_files_of_its_repository(hub_double):
    repo = hub.repository(GGUF_REPO)
    paths = []
    for name in ("Qwen3-1.7B-Q8_0.gguf", "Qwen3-1.7B-F16-00001-of-00002.gguf"):
        download = Downloads().start(hub.gguf_plan(repo, name))
        _wait(download)
        paths.append(download.progress().path)
    split_plan = hub.gguf_plan(repo, "Qwen3-1.7B-F16-00001-of-00002.gguf")
    hub.delete_from_cache(paths[1])  # the split model: both parts; the projector stays for the other model
    assert paths[0].is_file() and not paths[1].exists()
    assert not (paths[1].parent / "Qwen3-1.7B-F16-00002-of-00002.gguf").exists()
    assert (paths[1].parent / "mmproj-Qwen3-f16.gguf").exists()
    hub.delete_from_cache(paths[0])  # the last model: the projector goes with it, and the repository's folder
    assert not hub.repo_folder(GGUF_REPO).exists()
    assert not hub.snapshot_path(split_plan).parent.exists()


def test_a_hostile_listing_cannot_name_a_file_outside_the_cache(hub_double):
    """A repository's listing names the files on disk (their names, and their checksums as blob names): one that
    climbs out of the repository, or whose checksum is not one, is not offered; a repository id that is not
    org/name is refused before anything is asked."""
    from huggingface_hub.hf_api import BlobLfsInfo, RepoSibling

    good = "a" * 64
    siblings = [RepoSibling("ok.gguf", 10, None, BlobLfsInfo(10, good, 120)),
                RepoSibling("../../escape.gguf", 10, None, BlobLfsInfo(10, good, 120)),
                RepoSibling("/etc/passwd", 10, "b" * 40, None),
                RepoSibling("sub\\..\\x.gguf", 10, None, BlobLfsInfo(10, good, 120)),
                RepoSibling("bad-sha.gguf", 10, None, BlobLfsInfo(10, "../../x", 120)),
                RepoSibling("bad-blob.json", 10, "../../x", None),
                RepoSibling("config.json", 10, "c" * 40, None)]
    kept = [hub._remote_file(sibling) for sibling in siblings]
    assert [file.name for file in kept if file] == ["ok.gguf", "config.json"]
    for hostile in ("../x", "a/b/c", "..", "org/..", "org/name/../../x"):
        with pytest.raises(hub.HubUnavailable, match="not a repository id"):
            hub.repository(hostile)
    assert hub_double.requests == []


def test_a_partial_file_longer_than_the_file_is_started_again(hub_double):
    plan = hub.gguf_plan(hub.repository(GGUF_REPO), "Qwen3-1.7B-Q8_0.gguf")
    blobs = hub.repo_folder(GGUF_REPO) / "blobs"
    blobs.mkdir(parents=True)
    (blobs / f"{plan.files[0].sha256}.incomplete").write_bytes(b"x" * (plan.files[0].size + 40))
    download = Downloads().start(plan)
    _wait(download)
    assert download.progress().state == "done", download.progress().message


def test_two_downloads_sharing_a_file_fetch_it_once(hub_double):
    repo = hub.repository(GGUF_REPO)
    hub_double.bytes_per_second = 2_000_000
    plans = [hub.gguf_plan(repo, name) for name in ("Qwen3-1.7B-Q4_K_M.gguf", "Qwen3-1.7B-Q8_0.gguf")]
    downloads = Downloads()
    started = [downloads.start(plan) for plan in plans]  # both want the projector
    for download in started:
        _wait(download)
        assert download.progress().state == "done", download.progress().message
    fetched = [path for method, path, _ in hub_double.requests
               if method == "GET" and path.startswith("/cdn-lfs/") and "mmproj-Qwen3" in path]
    assert len(fetched) == 1, fetched  # the second found it done under the blob's lock


def test_deleting_never_reaches_outside_the_repository(hub_double, tmp_path):
    """A snapshot link that points out of the cache, a path that climbs out with `..`, and a blob kept in the
    cache's shared store: none of what they point to is deleted."""
    plan = hub.gguf_plan(hub.repository(GGUF_REPO), "Qwen3-1.7B-Q8_0.gguf")
    download = Downloads().start(plan)
    _wait(download)
    model = download.progress().path
    outside = tmp_path / "lm-studio-model.gguf"
    outside.write_bytes(b"someone else's")
    planted = model.parent / "planted.gguf"
    planted.symlink_to(outside)  # a link in the snapshot to a file of another tool
    hub.delete_from_cache(planted)
    assert outside.read_bytes() == b"someone else's" and not planted.exists()
    with pytest.raises(ValueError, match="not in the Hugging Face cache"):
        hub.delete_from_cache(model.parent / ".." / ".." / ".." / ".." / "lm-studio-model.gguf")
    assert outside.exists()
    # A blob that is itself a link into the shared store (huggingface_hub's Xet layout): the store entry stays.
    cache = tmp_path / "hub"
    store = cache / "blobs" / "ab" / ("ab" + "0" * 62)
    store.parent.mkdir(parents=True)
    store.write_bytes(b"shared payload")
    blob = hub.repo_folder(GGUF_REPO) / "blobs" / ("f" * 64)
    blob.symlink_to(os.path.relpath(store, blob.parent))
    other = model.parent / "other-Q2_K.gguf"
    other.symlink_to(os.path.relpath(blob, other.parent))
    hub.delete_from_cache(other)
    assert store.read_bytes() == b"shared payload" and not blob.exists() and model.is_file()


def test_the_cache_is_huggingface_hub_s_own(hub_double, tmp_path):
    from huggingface_hub import constants

    from app.models.discovery import hf_cache_dir

    assert hf_cache_dir() == Path(constants.HF_HUB_CACHE) == tmp_path / "hub"


def test_a_hostile_search_answer_is_shown_without_a_crash(hub_double, model_bytes):
    hub_double.add(HubRepo("acme/qwen3-odd", model_bytes[GGUF_REPO], downloads=-5,
                           pipeline_tag=7))  # type: ignore[arg-type]
    found = {model.repo_id: model for model in hub.search("qwen3")}
    odd = found["acme/qwen3-odd"]
    assert odd.downloads == 0 and odd.task is None and odd.has_gguf
