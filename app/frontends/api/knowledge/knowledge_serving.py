"""The Files and Vector stores endpoints (OpenAI's /v1/files and /v1/vector_stores, with their files and search)
over the app's knowledge (app/knowledge/vector_stores.py): a vector store is a knowledge collection.

Whose they are: on a server without an API key, the local user's, the same collections as the Knowledge page's
and the MCP server's search_knowledge; on a server with DEMO_API_KEY, the key's own. A file added to a vector store
is read before the answer comes, so it is "completed" or "failed" (with why) at once; a client that polls, as the
SDKs' `create_and_poll` do, gets that on its first look. Uploads may be as large as DEMO_KNOWLEDGE_MAX_FILE_MB.
"""

from __future__ import annotations

import builtins
import hashlib
import logging
from collections.abc import Callable
from typing import Annotated, Any, Literal

from fastapi import FastAPI, Form, Query, UploadFile
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response
from openai.types import FileDeleted, FileObject, VectorStore, VectorStoreDeleted
from openai.types.vector_stores import VectorStoreFile, VectorStoreFileDeleted

from app.config import LOCAL_OWNER
from app.frontends.api.api_errors import documented_errors
from app.frontends.api.chat_completions.chat_protocol import APIError
from app.frontends.api.knowledge import knowledge_protocol as kp
from app.frontends.api.lazy_open import LazyOpen
from app.knowledge.vector_stores import NotFound, SearchResult, VectorStores
from app.storage import open_database
from app.storage.api_files import ApiFileStore
from app.storage.errors import StorageError
from app.storage.knowledge import KnowledgeRefused, KnowledgeStore

log = logging.getLogger(__name__)


class KnowledgeEndpoints:
    """/v1/files and /v1/vector_stores. The database is opened at the first use: a server whose database is down
    still answers what needs none of it, and these say 503."""

    def __init__(self, api_key: str | None, open_stores: Callable[[], VectorStores] | None = None) -> None:
        self.owner = LOCAL_OWNER if not api_key else "api-key:" + hashlib.sha256(api_key.encode()).hexdigest()[:32]
        self._stores = LazyOpen(open_stores or _open_vector_stores, lambda _: (
            "Files and vector stores are unavailable: the server cannot open its database (DEMO_DATABASE_URL)."),
            (StorageError,))

    def register(self, app: FastAPI) -> None:
        errors = documented_errors(400, 401, 404, 413, 422, 503)
        app.post("/v1/files", response_model=FileObject, responses=errors)(self.upload)
        app.get("/v1/files", responses=errors)(self.list_files)
        app.get("/v1/files/{file_id}", response_model=FileObject, responses=errors)(self.retrieve_file)
        app.get("/v1/files/{file_id}/content", response_class=Response, responses=errors)(self.file_content)
        app.delete("/v1/files/{file_id}", response_model=FileDeleted, responses=errors)(self.delete_file)
        app.post("/v1/vector_stores", response_model=VectorStore, responses=errors)(self.create)
        app.get("/v1/vector_stores", responses=errors)(self.list)
        app.get("/v1/vector_stores/{vector_store_id}", response_model=VectorStore, responses=errors)(self.retrieve)
        app.post("/v1/vector_stores/{vector_store_id}", response_model=VectorStore, responses=errors)(self.update)
        app.delete("/v1/vector_stores/{vector_store_id}", response_model=VectorStoreDeleted,
                   responses=errors)(self.delete)
        app.post("/v1/vector_stores/{vector_store_id}/files", response_model=VectorStoreFile,
                 responses=errors)(self.add_file)
        app.get("/v1/vector_stores/{vector_store_id}/files", responses=errors)(self.list_store_files)
        app.get("/v1/vector_stores/{vector_store_id}/files/{file_id}", response_model=VectorStoreFile,
                responses=errors)(self.retrieve_store_file)
        app.delete("/v1/vector_stores/{vector_store_id}/files/{file_id}", response_model=VectorStoreFileDeleted,
                   responses=errors)(self.remove_store_file)
        app.post("/v1/vector_stores/{vector_store_id}/search", responses=errors)(self.search)

    # ----- files -------------------------------------------------------------------------------------------------

    async def upload(self, file: UploadFile, purpose: Annotated[kp.FilePurpose, Form()],
                     expires_after_anchor: Annotated[str | None, Form(alias="expires_after[anchor]")] = None,
                     expires_after_seconds: Annotated[str | None, Form(alias="expires_after[seconds]")] = None,
                     ) -> FileObject:
        if expires_after_anchor is not None or expires_after_seconds is not None:
            raise APIError(400, "Files here do not expire: delete one when it is no longer needed.",
                           param="expires_after")
        data = await file.read()
        saved = await self._run(lambda stores: stores.save_file(self.owner, file.filename or "file", purpose, data))
        return kp.file_object(saved)

    async def list_files(self, purpose: str | None = None, limit: int = Query(10_000, ge=1, le=10_000),
                         order: Literal["asc", "desc"] = "desc", after: str | None = None) -> dict[str, Any]:
        files = await self._run(lambda stores: stores.files.files(self.owner, purpose, order == "desc", after,
                                                                  limit + 1))
        listed = kp.page([kp.file_object(file) for file in files], lambda file: file.id, limit)
        return listed

    async def retrieve_file(self, file_id: str) -> FileObject:
        found = await self._run(lambda stores: stores.files.get(self.owner, file_id))
        if found is None:
            raise _missing_file(file_id)
        return kp.file_object(found)

    async def file_content(self, file_id: str) -> Response:
        data = await self._run(lambda stores: stores.files.content(self.owner, file_id))
        if data is None:
            raise _missing_file(file_id)
        return Response(data, media_type="application/octet-stream")

    async def delete_file(self, file_id: str) -> FileDeleted:
        if not await self._run(lambda stores: stores.delete_file(self.owner, file_id)):
            raise _missing_file(file_id)
        return FileDeleted(id=file_id, deleted=True, object="file")

    # ----- vector stores -----------------------------------------------------------------------------------------

    async def create(self, body: kp.VectorStoreCreate) -> VectorStore:
        kp.check_create(body)
        created = await self._run(lambda stores: stores.create(self.owner, body.name, body.file_ids))
        return kp.vector_store(created)

    async def list(self, limit: int = Query(20, ge=1, le=100), order: Literal["asc", "desc"] = "desc",
                   after: str | None = None, before: str | None = None) -> dict[str, Any]:
        found = await self._run(lambda stores: stores.list(self.owner))
        listed = [kp.vector_store(store) for store in (found if order == "desc" else found[::-1])]
        return kp.page(listed, lambda store: store.id, limit, after, before)

    async def retrieve(self, vector_store_id: str) -> VectorStore:
        return kp.vector_store(await self._run(lambda stores: stores.get(self.owner, vector_store_id)))

    async def update(self, vector_store_id: str, body: kp.VectorStoreUpdate) -> VectorStore:
        kp.check_create(body)
        if body.name is None:
            return await self.retrieve(vector_store_id)
        name = body.name
        return kp.vector_store(await self._run(lambda stores: stores.rename(self.owner, vector_store_id, name)))

    async def delete(self, vector_store_id: str) -> VectorStoreDeleted:
        if not await self._run(lambda stores: stores.delete(self.owner, vector_store_id)):
            raise _missing_store(vector_store_id)
        return VectorStoreDeleted(id=vector_store_id, deleted=True, object="vector_store.deleted")

    # ----- files in a vector store -------------------------------------------------------------------------------

    async def add_file(self, vector_store_id: str, body: kp.VectorStoreFileCreate) -> VectorStoreFile:
        kp.check_file(body)
        added = await self._run(lambda stores: stores.add_file(self.owner, vector_store_id, body.file_id))
        return kp.vector_store_file(added)

    async def list_store_files(self, vector_store_id: str, limit: int = Query(20, ge=1, le=100),
                               order: Literal["asc", "desc"] = "desc", after: str | None = None,
                               before: str | None = None,
                               filter: Literal["in_progress", "completed", "failed", "cancelled"] | None = None,
                               ) -> dict[str, Any]:
        found = await self._run(lambda stores: stores.vector_store_files(self.owner, vector_store_id))
        listed = [kp.vector_store_file(added) for added in (found[::-1] if order == "desc" else found)
                  if filter is None or added.status == filter]
        return kp.page(listed, lambda added: added.id, limit, after, before)

    async def retrieve_store_file(self, vector_store_id: str, file_id: str) -> VectorStoreFile:
        found = await self._run(lambda stores: stores.vector_store_file(self.owner, vector_store_id, file_id))
        return kp.vector_store_file(found)

    async def remove_store_file(self, vector_store_id: str, file_id: str) -> VectorStoreFileDeleted:
        await self._run(lambda stores: stores.remove_file(self.owner, vector_store_id, file_id))
        return VectorStoreFileDeleted(id=file_id, deleted=True, object="vector_store.file.deleted")

    async def search(self, vector_store_id: str, body: kp.VectorStoreSearch) -> dict[str, Any]:
        query = kp.check_search(body)
        threshold = body.ranking_options.score_threshold if body.ranking_options else None
        found = await self.search_stores([vector_store_id], query, body.max_num_results, threshold)
        results = [kp.search_result(result) for result in found]
        return {"object": "vector_store.search_results.page", "search_query": [query], "data": results,
                "has_more": False, "next_page": None}

    async def search_stores(self, vector_store_ids: builtins.list[str], query: str, limit: int,
                            score_threshold: float | None = None) -> builtins.list[SearchResult]:
        """The passages of these vector stores that best match `query`, best first: the Responses API's
        file_search. 404 for a vector store this owner does not have."""
        found = await self._run(lambda stores: stores.search(self.owner, vector_store_ids, query, limit))
        return [result for result in found if score_threshold is None or result.score >= score_threshold]

    # ----- the stores --------------------------------------------------------------------------------------------

    async def _run(self, action: Any) -> Any:
        """`action(stores)` on a worker thread, its refusals answered in OpenAI's error shape."""
        stores = await run_in_threadpool(self._stores.get)
        try:
            return await run_in_threadpool(action, stores)
        except NotFound as exc:
            raise APIError(404, str(exc), code="not_found") from exc
        except KnowledgeRefused as exc:
            raise APIError(400, str(exc)) from exc
        except StorageError as exc:
            log.warning("Knowledge storage failed: %s", exc)
            raise APIError(503, "The server's database is unavailable; try again later.",
                           kind="service_unavailable") from exc


def _open_vector_stores() -> VectorStores:
    engine = open_database()
    return VectorStores(KnowledgeStore(engine), ApiFileStore(engine))


def _missing_file(file_id: str) -> APIError:
    return APIError(404, f"No such file: {file_id}.", param="file_id", code="not_found")


def _missing_store(vector_store_id: str) -> APIError:
    return APIError(404, f"No such vector store: {vector_store_id}.", param="vector_store_id", code="not_found")
