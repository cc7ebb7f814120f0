"""`search_knowledge`: the user's knowledge collections as a tool, on the Tools pages and through the app's MCP
server. It only reads, and only the user's own documents (closed world), so its hints say so; its results carry
their sources, numbered, so the model cites them, and the passages are marked as quoted data like those the Chat
page retrieves."""

from __future__ import annotations

from typing import Any

from app.domain.conversation import Attachment, Source
from app.knowledge.retrieval import Retrieval
from app.storage.errors import StorageError
from app.storage.knowledge import KnowledgeStore
from app.tools.tool_registry import ToolError, ToolHints, ToolOutput, ToolRegistry

HINTS = ToolHints.reader("Search my documents", open_world=False)
MAX_RESULTS = 8
OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"results": {"type": "array", "items": {
        "type": "object",
        "properties": {"number": {"type": "integer"}, "document": {"type": "string"},
                       "collection": {"type": "string"}, "location": {"type": "string"},
                       "text": {"type": "string"}},
        "required": ["number", "document", "collection", "location", "text"]}}},
    "required": ["results"],
}


class KnowledgeSearch:
    """One user's knowledge as a tool."""

    def __init__(self, store: KnowledgeStore, owner: str) -> None:
        self.store = store
        self.owner = owner

    def search_knowledge(self, query: str, collection: str = "", limit: int = 5) -> ToolOutput:
        """Search the user's own documents (their knowledge collections) for passages that answer a question.
        Cite each passage you use as [n] with its number.

        Args:
            query: The question or the words to look for, in plain language.
            collection: The name of one collection to search; empty searches all of the user's collections.
            limit: How many passages to return, 1 to 8.
        """
        try:
            collections = self.store.collections(self.owner)
        except StorageError as exc:
            raise ToolError(f"the user's documents cannot be searched now: {exc}") from exc
        if collection.strip():
            wanted = [c for c in collections if c.name.casefold() == collection.strip().casefold()]
            if not wanted:
                listed = ", ".join(repr(c.name) for c in collections) or "none"
                raise ToolError(f"there is no collection named {collection!r}; the user's collections: {listed}.")
            collections = wanted
        if not collections:
            return ToolOutput("The user has no documents in knowledge yet.", structured={"results": []})
        names = {c.id: c.name for c in collections}
        hits = Retrieval(self.store).search(self.owner, list(names), query, max(1, min(int(limit), MAX_RESULTS)))
        if not hits:
            return ToolOutput(f"No passage of the user's documents matches {query!r}.", structured={"results": []})
        results = [{"number": n, "document": hit.document_name, "collection": names.get(hit.collection_id, ""),
                    "location": hit.location, "text": hit.text} for n, hit in enumerate(hits, 1)]
        # The same quoting as the Chat page's passages: marked as data, and no passage can end the block early.
        quoted = Attachment("passages", "search results", sources=[
            Source(n, hit.document_name, hit.location, hit.text, hit.passage_id) for n, hit in enumerate(hits, 1)])
        return ToolOutput(quoted.prompt_text(), structured={"results": results})


def knowledge_tools(store: KnowledgeStore, owner: str) -> ToolRegistry:
    tools = ToolRegistry()
    tools.register(KnowledgeSearch(store, owner).search_knowledge, timeout_s=30, hints=HINTS,
                   output_schema=OUTPUT_SCHEMA)
    return tools
