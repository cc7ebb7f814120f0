"""The Responses API's `file_search` tool, run by this server over its vector stores (app/knowledge/vector_stores.py,
the same knowledge collections the Chat and the Knowledge page use).

OpenAI's model decides when to search and writes the queries; a small local model cannot be trusted to, so here a
request that offers `file_search` (and does not say tool_choice "none") is searched once, before the answer, with
its last user message, and the passages go onto that message as the Chat's do: numbered, with their sources,
marked as data rather than instructions (app/domain/conversation.py). The response carries what OpenAI's does: a
`file_search_call` output item first (its results when the request includes "file_search_call.results"), then the
answer, whose [n] markers become `file_citation` annotations of the files they cite.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from openai.types.responses.response_output_text import AnnotationFileCitation
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from app.domain.conversation import Attachment, Source
from app.frontends.api.chat_completions.chat_protocol import APIError
from app.knowledge.passages import PASSAGES_PER_QUESTION
from app.knowledge.vector_stores import SearchResult

RESULTS_INCLUDE = "file_search_call.results"
MAX_QUERY_CHARS = 4000  # as the vector store search endpoint takes
# "[2]", "[1, 3]", "[1][2]": the citation markers the passages' preamble asks the model to write.
_MARKER = re.compile(r"\[(\d{1,3}(?:\s*,\s*\d{1,3})*)\]")


class _RankingOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    ranker: Literal["auto", "default-2024-11-15"] | None = None
    score_threshold: float | None = Field(None, ge=0, le=1)
    hybrid_search: dict[str, Any] | None = None


class _FileSearchTool(BaseModel):
    model_config = ConfigDict(extra="forbid")  # a field this server cannot act on is refused, not ignored

    type: Literal["file_search"]
    vector_store_ids: list[Annotated[str, Field(min_length=1, max_length=100)]] = Field(min_length=1, max_length=16)
    max_num_results: int | None = Field(None, ge=1, le=50)
    ranking_options: _RankingOptions | None = None
    filters: dict[str, Any] | None = None


@dataclass(frozen=True)
class FileSearch:
    """A request's file_search tool: where to search, how many passages, and whether its results are shown."""

    vector_store_ids: list[str]
    max_results: int
    score_threshold: float | None
    include_results: bool
    param: str  # where the tool sits in the request, for errors
    forced: bool  # tool_choice names file_search (or "required"): a request with nothing to search for is refused


def file_search(tools: list[dict[str, Any]] | None, tool_choice: Any, include: list[str] | None
                ) -> FileSearch | None:
    """The request's file_search tool, checked (400 for what cannot be honoured); None when it has none or its
    tool_choice is "none"."""
    found = [(index, tool) for index, tool in enumerate(tools or ())
             if isinstance(tool, dict) and tool.get("type") == "file_search"]
    if not found:
        if isinstance(tool_choice, dict) and tool_choice.get("type") == "file_search":
            raise APIError(400, 'tool_choice {"type": "file_search"} needs a file_search tool in tools.',
                           param="tool_choice")
        return None
    if len(found) > 1:
        raise APIError(400, "Send one file_search tool; list every vector store in its vector_store_ids.",
                       param=f"tools.{found[1][0]}")
    index, raw = found[0]
    where = f"tools.{index}"
    try:
        tool = _FileSearchTool.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(part) for part in first.get("loc", ()))
        raise APIError(400, f"{where}.{field}: {first.get('msg', 'invalid')}", param=f"{where}.{field}") from exc
    if tool.filters is not None:
        raise APIError(400, "file_search takes no attribute filters here (files carry no attributes).",
                       param=f"{where}.filters")
    ranking = tool.ranking_options
    if ranking is not None and ranking.hybrid_search is not None:
        raise APIError(400, "file_search fuses its rankings with fixed weights here (reciprocal rank): leave out "
                            "hybrid_search.",
                       param=f"{where}.ranking_options.hybrid_search")
    if tool_choice == "none":
        return None
    forced = tool_choice == "required" or (isinstance(tool_choice, dict) and tool_choice.get("type") == "file_search")
    return FileSearch(list(dict.fromkeys(tool.vector_store_ids)), tool.max_num_results or PASSAGES_PER_QUESTION,
                      ranking.score_threshold if ranking else None, RESULTS_INCLUDE in (include or ()), where, forced)


def question(messages: list[dict[str, Any]]) -> str:
    """What to search for: the text of the last user message (chat messages, as `chat_messages` made them)."""
    for message in reversed(messages):
        if message.get("role") != "user":
            continue
        content = message.get("content")
        text = content if isinstance(content, str) else " ".join(
            part.get("text", "") for part in content or () if isinstance(part, dict) and part.get("type") == "text")
        return " ".join(text.split())[:MAX_QUERY_CHARS]
    return ""


def fitting(results: list[SearchResult], budget_chars: int) -> list[SearchResult]:
    """The best results, in order, as many as fit in `budget_chars` of prompt (each with its source line)."""
    kept: list[SearchResult] = []
    used = 0
    for result in results:
        used += len(result.text) + len(result.filename) + len(result.location) + 16
        if used > budget_chars:
            break
        kept.append(result)
    return kept


def passages(results: list[SearchResult]) -> Attachment | None:
    """The results as the passages attachment the model reads with the question, numbered from 1."""
    if not results:
        return None
    files = list(dict.fromkeys(result.filename for result in results))
    return Attachment(kind="passages", name=f"{len(results)} passage{'s' if len(results) != 1 else ''} from "
                                            + ", ".join(files), note="file_search",
                      sources=[Source(number, result.filename, result.location, result.text)
                               for number, result in enumerate(results, 1)])


def citations(text: str, results: list[SearchResult]) -> list[AnnotationFileCitation]:
    """A file_citation for each [n] in the answer that names a passage: the file it came from, at the index just
    after the marker (the marker stays in the text)."""
    found: list[AnnotationFileCitation] = []
    for match in _MARKER.finditer(text):
        for number in (int(part) for part in match.group(1).split(",")):
            if 1 <= number <= len(results):
                result = results[number - 1]
                found.append(AnnotationFileCitation(type="file_citation", file_id=result.file_id,
                                                    filename=result.filename, index=match.end()))
    return found
