"""OpenAI's Files and Vector stores endpoints on our server (app/frontends/api/knowledge/), with the openai SDK as a
client would use them: a 300-page PDF uploaded, put in a vector store and searched for a fact on page 212; files the
server cannot read fail with why and take nothing down; owners stay apart; a collection made on the Knowledge page
is a vector store of the local user. On SQLite and on a real PostgreSQL server."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import openai
import pytest

from app.config import LOCAL_OWNER, ServerSettings
from app.frontends.api.server_app import create_app
from app.knowledge.ingest import add_file
from app.knowledge.vector_stores import VectorStores
from app.storage.api_files import ApiFileStore
from app.storage.knowledge import KnowledgeStore
from harness.local_http import serving
from tests.knowledge_fixtures import FACTS, long_pdf_bytes

KEY = "sk-test-vector-stores"


@contextmanager
def server(engine, tiny_client, api_key: str | None = KEY) -> Iterator[openai.OpenAI]:
    stores = VectorStores(KnowledgeStore(engine), ApiFileStore(engine))
    with serving(create_app(ServerSettings(api_key=api_key), client=tiny_client, vector_stores=stores)) as base:
        yield openai.OpenAI(base_url=f"{base}/v1", api_key=api_key or "none", max_retries=0)


@pytest.fixture(scope="module")
def pdf() -> bytes:
    return long_pdf_bytes()


def test_a_long_pdf_is_uploaded_put_in_a_vector_store_and_searched(engine, tiny_client, pdf):
    with server(engine, tiny_client) as client:
        uploaded = client.files.create(file=("parish-records.pdf", pdf), purpose="assistants")
        assert uploaded.id.startswith("file-") and uploaded.bytes == len(pdf)
        assert uploaded.filename == "parish-records.pdf" and uploaded.purpose == "assistants"
        assert [file.id for file in client.files.list()] == [uploaded.id]
        assert client.files.retrieve(uploaded.id).bytes == len(pdf)
        assert client.files.content(uploaded.id).content == pdf

        store = client.vector_stores.create(name="Parish records", file_ids=[uploaded.id])
        assert store.status == "completed" and store.name == "Parish records"
        assert (store.file_counts.completed, store.file_counts.failed, store.file_counts.total) == (1, 0, 1)
        assert store.usage_bytes == len(pdf)
        added = client.vector_stores.files.list(store.id).data
        assert [(file.id, file.status, file.last_error) for file in added] == [(uploaded.id, "completed", None)]

        results = client.vector_stores.search(store.id, query=FACTS[212][1]).data
        assert results[0].file_id == uploaded.id and results[0].filename == "parish-records.pdf"
        assert results[0].attributes == {"location": "page 212"} and results[0].score == 1.0
        assert "eleven shillings" in results[0].content[0].text
        assert all(0 <= result.score <= 1 for result in results) and len(results) <= 10
        assert len(client.vector_stores.search(store.id, query=FACTS[37][1], max_num_results=2).data) <= 2

        # The same name again is a vector store of its own (the app's collection names are unique: numbered).
        again = client.vector_stores.create(name="Parish records")
        assert again.id != store.id and again.name == "Parish records (2)"
        listed = client.vector_stores.list()
        assert [found.id for found in listed.data] == [again.id, store.id]
        assert client.vector_stores.update(again.id, name="Empty one").name == "Empty one"
        assert client.vector_stores.delete(again.id).deleted

        # Taken out of the vector store, the file is found no more; deleted, it is gone everywhere.
        client.vector_stores.files.delete(uploaded.id, vector_store_id=store.id)
        assert client.vector_stores.search(store.id, query=FACTS[212][1]).data == []
        client.vector_stores.files.create_and_poll(vector_store_id=store.id, file_id=uploaded.id)
        assert client.vector_stores.search(store.id, query=FACTS[212][1]).data
        assert client.files.delete(uploaded.id).deleted
        assert client.vector_stores.search(store.id, query=FACTS[212][1]).data == []
        assert client.vector_stores.retrieve(store.id).file_counts.total == 0
        with pytest.raises(openai.NotFoundError, match="No such file"):
            client.files.retrieve(uploaded.id)


def test_files_it_cannot_read_fail_with_why_and_the_rest_goes_on(engine, tiny_client, pdf):
    with server(engine, tiny_client) as client:
        store = client.vector_stores.create(name="Mixed")
        binary = client.files.create(file=("setup.exe", b"MZ\x90\x00" * 100), purpose="assistants")
        damaged = client.files.create(file=("broken.pdf", b"%PDF-1.7\n" + b"\x00garbage" * 200), purpose="assistants")
        good = client.files.create(file=("records.pdf", pdf), purpose="user_data")
        unsupported = client.vector_stores.files.create_and_poll(vector_store_id=store.id, file_id=binary.id)
        assert unsupported.status == "failed" and unsupported.last_error.code == "unsupported_file"
        assert "'exe' are not read" in unsupported.last_error.message
        invalid = client.vector_stores.files.create_and_poll(vector_store_id=store.id, file_id=damaged.id)
        assert invalid.status == "failed" and invalid.last_error.code == "invalid_file"
        assert invalid.last_error.message
        assert client.vector_stores.files.create_and_poll(vector_store_id=store.id, file_id=good.id).status == \
            "completed"
        counts = client.vector_stores.retrieve(store.id).file_counts
        assert (counts.completed, counts.failed, counts.total) == (1, 2, 3)
        failed = client.vector_stores.files.list(store.id, filter="failed").data
        assert {file.id for file in failed} == {binary.id, damaged.id}
        assert client.vector_stores.search(store.id, query=FACTS[158][1]).data[0].attributes == {
            "location": "page 158"}

        with pytest.raises(openai.NotFoundError, match="No such file"):
            client.vector_stores.files.create(vector_store_id=store.id, file_id="file-missing")
        with pytest.raises(openai.NotFoundError, match="No such vector store"):
            client.vector_stores.search("no-such-store", query="pears")
        with pytest.raises(openai.BadRequestError, match="keep no metadata"):
            client.vector_stores.create(name="Tagged", metadata={"team": "a"})
        with pytest.raises(openai.BadRequestError, match="chunking_strategy auto"):
            client.vector_stores.files.create(vector_store_id=store.id, file_id=good.id, chunking_strategy={
                "type": "static", "static": {"max_chunk_size_tokens": 400, "chunk_overlap_tokens": 100}})
        with pytest.raises(openai.UnprocessableEntityError):
            client.files.create(file=("notes.txt", b"hello"), purpose="no-such-purpose")  # type: ignore[arg-type]
        assert client.vector_stores.files.list(store.id).data  # still there, still answering


def test_an_upload_over_the_limit_is_refused_before_it_is_read(engine, tiny_client, monkeypatch):
    monkeypatch.setenv("DEMO_KNOWLEDGE_MAX_FILE_MB", "1")
    with server(engine, tiny_client) as client:
        with pytest.raises(openai.APIStatusError) as refused:
            client.files.create(file=("big.txt", b"word " * 600_000), purpose="assistants")  # 3 MB
        assert refused.value.status_code == 413
        with pytest.raises(openai.BadRequestError, match="files up to 1 MB"):
            client.files.create(file=("big.txt", b"word " * 300_000), purpose="assistants")  # 1.4 MB
        assert client.files.create(file=("small.txt", b"a small note"), purpose="assistants").bytes == 12
        assert [file.filename for file in client.files.list()] == ["small.txt"]


def test_owners_stay_apart_and_the_local_user_has_the_knowledge_pages_collections(engine, tiny_client, pdf):
    knowledge = KnowledgeStore(engine)
    history = knowledge.create_collection(LOCAL_OWNER, "Local history")
    add_file(knowledge, LOCAL_OWNER, history.id, "notes.md", f"# Harbour\n\n{FACTS[37][0]}".encode())
    with server(engine, tiny_client, "sk-alice") as alice, server(engine, tiny_client, "sk-bob") as bob:
        theirs = alice.files.create(file=("records.pdf", pdf), purpose="assistants")
        store = alice.vector_stores.create(name="Alice's", file_ids=[theirs.id])
        assert bob.files.list().data == [] and bob.vector_stores.list().data == []
        for attempt in (lambda: bob.files.retrieve(theirs.id), lambda: bob.files.content(theirs.id),
                        lambda: bob.vector_stores.retrieve(store.id), lambda: bob.files.delete(theirs.id),
                        lambda: bob.vector_stores.search(store.id, query="pears"),
                        lambda: bob.vector_stores.files.create(vector_store_id=store.id, file_id=theirs.id)):
            with pytest.raises(openai.NotFoundError):
                attempt()
        assert [found.name for found in alice.vector_stores.list().data] == ["Alice's"]
    with server(engine, tiny_client, None) as local:  # no API key: the app's own user
        stores = local.vector_stores.list().data
        assert [found.name for found in stores] == ["Local history"]
        assert stores[0].file_counts.completed == 1
        found = local.vector_stores.search(history.id, query=FACTS[37][1]).data
        assert found[0].filename == "notes.md" and found[0].attributes == {"location": "Harbour"}
        assert found[0].file_id.startswith("document-")  # added on the Knowledge page: no API file
        assert "Swansea" in found[0].content[0].text


def passages_of(engine) -> int:
    from sqlalchemy import func, select

    from app.storage.tables import KnowledgeChunkRow

    with engine.connect() as connection:
        return connection.scalar(select(func.count()).select_from(KnowledgeChunkRow))


def test_documents_the_api_did_not_read_stay_and_shared_bytes_stay_for_the_other_file(engine, tiny_client):
    knowledge = KnowledgeStore(engine)
    notes = f"# Harbour\n\n{FACTS[37][0]}\n\n# Abbey\n\n{FACTS[158][0]}".encode()
    page = knowledge.create_collection(LOCAL_OWNER, "From the Knowledge page")
    add_file(knowledge, LOCAL_OWNER, page.id, "notes.md", notes)
    with server(engine, tiny_client, None) as client:
        copy = client.files.create(file=("copy.md", notes), purpose="assistants")
        assert client.vector_stores.files.create_and_poll(vector_store_id=page.id, file_id=copy.id).status == \
            "completed"
        client.vector_stores.files.delete(copy.id, vector_store_id=page.id)
        client.vector_stores.files.create_and_poll(vector_store_id=page.id, file_id=copy.id)
        assert client.files.delete(copy.id).deleted
        assert [document.name for document in knowledge.documents(LOCAL_OWNER, page.id)] == ["notes.md"]

        # Two files of the same bytes in one store: one document; either file going leaves it to the other.
        store = client.vector_stores.create(name="Shared")
        first, second = (client.files.create(file=(name, notes), purpose="assistants") for name in ("a.md", "b.md"))
        for file in (first, second):
            client.vector_stores.files.create_and_poll(vector_store_id=store.id, file_id=file.id)
        assert len(knowledge.documents(LOCAL_OWNER, store.id)) == 1
        assert client.files.delete(first.id).deleted
        assert [file.id for file in client.vector_stores.files.list(store.id)] == [second.id]
        assert client.vector_stores.search(store.id, query=FACTS[158][1]).data[0].file_id == second.id
        client.vector_stores.files.delete(second.id, vector_store_id=store.id)
        assert knowledge.documents(LOCAL_OWNER, store.id) == []


def test_two_adds_of_one_file_at_once_make_one_document_and_a_delete_leaves_nothing(engine, tiny_client, pdf):
    from concurrent.futures import ThreadPoolExecutor

    with server(engine, tiny_client) as client:
        store = client.vector_stores.create(name="Raced")
        file = client.files.create(file=("records.pdf", pdf), purpose="assistants")
        with ThreadPoolExecutor(2) as pool:
            added = list(pool.map(lambda _: client.vector_stores.files.create(vector_store_id=store.id,
                                                                               file_id=file.id), range(2)))
        assert [result.status for result in added] == ["completed", "completed"]
        assert client.vector_stores.retrieve(store.id).file_counts.completed == 1
        assert client.vector_stores.search(store.id, query=FACTS[212][1]).data[0].file_id == file.id
        assert client.files.delete(file.id).deleted
        assert passages_of(engine) == 0


def test_a_file_deleted_while_it_is_read_into_a_store_leaves_nothing_behind(engine, tiny_client, pdf):
    import threading
    import time

    with server(engine, tiny_client) as client:
        store = client.vector_stores.create(name="Deleted meanwhile")
        file = client.files.create(file=("records.pdf", pdf), purpose="assistants")
        outcome: list[object] = []

        def add() -> None:
            try:
                outcome.append(client.vector_stores.files.create(vector_store_id=store.id, file_id=file.id).status)
            except openai.APIStatusError as exc:
                outcome.append(exc.status_code)

        adding = threading.Thread(target=add)
        adding.start()
        time.sleep(0.3)  # reading 300 pages takes longer
        assert client.files.delete(file.id).deleted
        adding.join(60)
        assert outcome in (["completed"], [404]), outcome  # never a 500
        assert passages_of(engine) == 0 and client.vector_stores.retrieve(store.id).file_counts.total == 0


def test_the_owners_files_are_limited_and_names_lose_control_characters(engine, tiny_client, monkeypatch):
    monkeypatch.setenv("DEMO_KNOWLEDGE_MAX_MB", "1")
    with server(engine, tiny_client) as client:
        client.files.create(file=("one.txt", b"x" * 600_000), purpose="assistants")
        with pytest.raises(openai.BadRequestError, match="DEMO_KNOWLEDGE_MAX_MB"):
            client.files.create(file=("two.txt", b"y" * 600_000), purpose="assistants")
        # The SDK escapes control characters in a file name; a hand-made request need not.
        boundary = "x-boundary"
        body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nassistants\r\n"
                f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"bad\x00name\x07.txt\"\r\n"
                f"Content-Type: text/plain\r\n\r\na note\r\n--{boundary}--\r\n").encode()
        named = httpx.post(f"{client.base_url}files", content=body, headers={
            "Authorization": f"Bearer {KEY}", "Content-Type": f"multipart/form-data; boundary={boundary}"})
        assert named.status_code == 200 and named.json()["filename"] == "badname.txt"
        store = client.vector_stores.create(name="Tab\tand\x00nul")
        assert store.name == "Tab andnul"
        assert client.vector_stores.update(store.id, name="Re\x00named").name == "Renamed"
        with pytest.raises(openai.BadRequestError, match="do not expire"):
            client.files.create(file=("t.txt", b"t"), purpose="assistants",
                                expires_after={"anchor": "created_at", "seconds": 3600})
