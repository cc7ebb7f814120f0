"""The Responses API's file_search tool on our server, through the openai SDK (whole and streamed) and the Agents
SDK's FileSearchTool, unchanged: a 300-page PDF in a vector store, a question whose answer is on page 212, the
passages quoted to the model as data with their sources, a `file_search_call` output item, and the answer's [n]
markers as file citations. A scripted model writes the answer, so what it cites is known."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from app.config import ServerSettings
from app.domain.conversation import PASSAGES_PREAMBLE
from app.frontends.api.server_app import create_app
from app.knowledge.vector_stores import VectorStores
from app.storage import open_database
from app.storage.api_files import ApiFileStore
from app.storage.knowledge import KnowledgeStore
from app.storage.responses import ResponseStore
from harness.local_http import serving
from tests.fake_client import ScriptedClient, text_reply
from tests.knowledge_fixtures import FACTS, long_pdf_bytes

MODEL = "scripted-model"
QUESTION = FACTS[212][1]
ANSWER = "The keeper earned eleven shillings a week [1]."
SEARCH = {"type": "file_search"}


class Server:
    def __init__(self, base: str, client: ScriptedClient, store_id: str, file_id: str) -> None:
        self.base, self.client, self.store_id, self.file_id = base, client, store_id, file_id
        self.sdk = openai.OpenAI(base_url=f"{base}/v1", api_key="none", max_retries=0)

    def tool(self, **more: Any) -> dict[str, Any]:
        return {**SEARCH, "vector_store_ids": [self.store_id], **more}

    def last_prompt(self) -> list[dict[str, Any]]:
        return self.client.requests[-1].messages


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[Server]:
    engine = open_database(f"sqlite:///{tmp_path_factory.mktemp('file-search')}/api.db")
    client = ScriptedClient()
    app = create_app(ServerSettings(), client=client, response_store=ResponseStore(engine),
                     vector_stores=VectorStores(KnowledgeStore(engine), ApiFileStore(engine)))
    with serving(app) as base:
        sdk = openai.OpenAI(base_url=f"{base}/v1", api_key="none", max_retries=0)
        uploaded = sdk.files.create(file=("parish-records.pdf", long_pdf_bytes()), purpose="assistants")
        store = sdk.vector_stores.create(name="Parish records", file_ids=[uploaded.id])
        yield Server(base, client, store.id, uploaded.id)
    engine.dispose()


def quoted(prompt: list[dict[str, Any]]) -> str:
    """What the model read of the last user message."""
    return next(message["content"] for message in reversed(prompt) if message["role"] == "user")


def test_the_page_that_answers_is_quoted_and_cited(server):
    server.client.add_reply(text_reply("The keeper earned ", "eleven shillings a week [1]."))
    response = server.sdk.responses.create(model=MODEL, input=QUESTION, tools=[server.tool()],
                                           include=["file_search_call.results"])
    searched, message = response.output
    assert searched.type == "file_search_call" and searched.status == "completed"
    assert searched.queries == [QUESTION] and searched.id.startswith("fs_")
    first = searched.results[0]
    assert (first.file_id, first.filename, first.attributes, first.score) == (
        server.file_id, "parish-records.pdf", {"location": "page 212"}, 1.0)
    assert "eleven shillings" in first.text and len(searched.results) <= 5

    # The model read the passages with the question, numbered, marked as data, page 212 first.
    read = quoted(server.last_prompt())
    assert read.startswith(QUESTION) and PASSAGES_PREAMBLE in read
    assert "[1] parish-records.pdf, page 212\n" in read and FACTS[212][0] in read

    assert response.output_text == ANSWER
    [citation] = message.content[0].annotations
    assert citation.type == "file_citation" and citation.file_id == server.file_id
    assert citation.filename == "parish-records.pdf" and ANSWER[:citation.index].endswith("[1]")
    # Stored as answered: a GET gives the same items.
    assert server.sdk.responses.retrieve(response.id).output == response.output


def test_results_are_left_out_unless_included_and_markers_without_a_passage_cite_nothing(server):
    server.client.add_reply(text_reply("See [1, 2] and [9]."))
    common = "Which parish field was near the harbour?"  # words on many pages of the filler
    response = server.sdk.responses.create(model=MODEL, input=common, tools=[server.tool(max_num_results=2)],
                                           store=False)
    searched, message = response.output
    assert searched.results is None and searched.queries == [common]
    assert re.findall(r"^\[(\d)\] parish-records\.pdf", quoted(server.last_prompt()), re.M) == ["1", "2"]
    annotations = message.content[0].annotations
    assert [(a.index, a.file_id) for a in annotations] == [(len("See [1, 2]"), server.file_id)] * 2


def test_a_stream_gives_openai_s_events_in_order(server):
    server.client.add_reply(text_reply("Eleven ", "shillings [1]."))
    with server.sdk.responses.stream(model=MODEL, input=QUESTION, tools=[server.tool()], store=False,
                                     include=["file_search_call.results"]) as stream:
        events = list(stream)
        final = stream.get_final_response()
    kinds = [event.type for event in events]
    assert kinds[:7] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.file_search_call.in_progress", "response.file_search_call.searching",
                         "response.file_search_call.completed", "response.output_item.done"]
    assert events[2].item.type == "file_search_call" and events[2].output_index == 0
    assert events[2].item.status == "in_progress" and events[2].item.results is None
    assert events[6].item.status == "completed" and events[6].item.results[0].attributes == {
        "location": "page 212"}
    deltas = [event for event in events if event.type == "response.output_text.delta"]
    assert all(event.output_index == 1 for event in deltas)
    [added] = [event for event in events if event.type == "response.output_text.annotation.added"]
    assert added.annotation.file_id == server.file_id and added.annotation_index == 0
    assert kinds.index("response.output_text.annotation.added") < kinds.index("response.output_text.done")
    assert kinds[-1] == "response.completed" and [e.sequence_number for e in events] == list(range(len(events)))
    assert final.output_text == "Eleven shillings [1]."
    assert final.output[1].content[0].annotations[0].file_id == server.file_id


def test_a_follow_up_reads_only_its_own_question_s_passages(server):
    server.client.add_reply(text_reply(ANSWER))
    first = server.sdk.responses.create(model=MODEL, input=QUESTION, tools=[server.tool()])
    server.client.add_reply(text_reply("It carried the wire [1]."))
    follow_up = FACTS[37][1]
    second = server.sdk.responses.create(model=MODEL, input=follow_up, tools=[server.tool()],
                                         previous_response_id=first.id)
    assert second.output[0].queries == [follow_up] and second.output_text == "It carried the wire [1]."
    prompt = server.last_prompt()
    assert [message["role"] for message in prompt] == ["user", "assistant", "user"]
    assert prompt[0]["content"] == QUESTION and prompt[1]["content"] == ANSWER  # the earlier search is not read
    assert "page 37" in quoted(prompt) and FACTS[212][0] not in quoted(prompt)


def test_tool_choice_none_searches_nothing_and_file_search_can_be_forced(server):
    server.client.add_reply(text_reply("I do not know."))
    plain = server.sdk.responses.create(model=MODEL, input=QUESTION, tools=[server.tool()], tool_choice="none",
                                        store=False)
    assert [item.type for item in plain.output] == ["message"] and quoted(server.last_prompt()) == QUESTION
    assert plain.output[0].content[0].annotations == []
    server.client.add_reply(text_reply(ANSWER))
    forced = server.sdk.responses.create(model=MODEL, input=QUESTION, tools=[server.tool()], store=False,
                                         tool_choice={"type": "file_search"})
    assert forced.output[0].type == "file_search_call" and server.client.requests[-1].tools is None


@pytest.mark.parametrize("tools, choice, status, says", [
    ([{**SEARCH, "vector_store_ids": ["vs_nobody"]}], None, 404, "tools.0.vector_store_ids: No such vector store"),
    ([{**SEARCH, "vector_store_ids": []}], None, 400, "tools.0.vector_store_ids"),
    ([{**SEARCH, "vector_store_ids": ["vs_x"], "filters": {"type": "eq", "key": "a", "value": 1}}], None, 400,
     "no attribute filters"),
    ([{**SEARCH, "vector_store_ids": ["vs_x"], "ranking_options": {"hybrid_search": {
        "embedding_weight": 1, "text_weight": 1}}}], None, 400, "fixed weights"),
    ([{**SEARCH, "vector_store_ids": ["vs_x"], "max_num_results": 51}], None, 400, "max_num_results"),
    ([{**SEARCH, "vector_store_ids": ["vs_x"]}, {**SEARCH, "vector_store_ids": ["vs_y"]}], None, 400,
     "one file_search tool"),
    ([], {"type": "file_search"}, 400, "needs a file_search tool"),
    ([{**SEARCH, "vector_store_ids": ["vs_x"], "filters": {}}], None, 400, "no attribute filters"),
    ([{**SEARCH, "vector_store_ids": ["vs_x"], "ranking_options": {"ranker": "none"}}], None, 400, "ranker"),
    ([{**SEARCH, "vector_store_ids": ["v" * 101]}], None, 400, "vector_store_ids"),
])
def test_what_cannot_be_searched_is_refused_with_why(server, tools, choice, status, says):
    extra = {"tool_choice": choice} if choice else {}
    before = len(server.client.requests)
    with pytest.raises(openai.APIStatusError) as refused:
        server.sdk.responses.create(model=MODEL, input=QUESTION, tools=tools, store=False, **extra)
    assert refused.value.status_code == status and says in refused.value.message
    assert len(server.client.requests) == before  # nothing was generated


def test_many_results_are_cut_to_what_fits_half_the_context_window(server):
    server.client.add_reply(text_reply("Many [6]."))
    common = "Which parish field was near the harbour?"
    response = server.sdk.responses.create(model=MODEL, input=common, tools=[server.tool(max_num_results=50)],
                                           include=["file_search_call.results"], store=False)
    results = response.output[0].results
    # The scripted model's window is 4,096 tokens: passages get half, at 4 characters a token.
    assert 1 < len(results) < 50 and sum(len(result.text) for result in results) <= 2048 * 4
    quoted_numbers = re.findall(r"^\[(\d+)\] parish-records\.pdf", quoted(server.last_prompt()), re.M)
    assert quoted_numbers == [str(n) for n in range(1, len(results) + 1)]  # what is reported is what was read
    assert len(response.output[1].content[0].annotations) == (1 if len(results) >= 6 else 0)


def test_a_forced_search_with_nothing_to_search_for_is_refused(server):
    with pytest.raises(openai.BadRequestError, match="no text to search for"):
        server.sdk.responses.create(model=MODEL, input=[{"role": "developer", "content": "Be brief."}],
                                    tools=[server.tool()], tool_choice={"type": "file_search"}, store=False)


@pytest.mark.parametrize("echoed, status", [
    ({"status": ["completed"]}, 200),  # a status that is not one is stored as "completed" (it was a 500)
    ({"queries": ["q" * 600_000], "results": [{"text": "r" * 600_000}]}, 413),  # stored text counts too
])
def test_odd_echoed_file_search_calls_are_answered(server, echoed, status):
    item = {"type": "file_search_call", "id": "fs_1", "queries": ["q"], "status": "completed", **echoed}
    if status == 200:
        server.client.add_reply(text_reply("Fine."))
    answer = httpx.post(f"{server.base}/v1/responses", timeout=60, headers={"Authorization": "Bearer none"}, json={
        "model": MODEL, "input": [item, {"role": "user", "content": "hi"}]})
    assert answer.status_code == status, answer.text
    if status == 200:
        listed = server.sdk.responses.input_items.list(answer.json()["id"], order="asc").data
        assert listed[0].type == "file_search_call" and listed[0].status == "completed"


def test_an_input_echoing_a_file_search_call_is_taken(server):
    """Clients without stored responses (the Agents SDK's to_input_list) send the earlier output items back."""
    server.client.add_reply(text_reply(ANSWER))
    first = server.sdk.responses.create(model=MODEL, input=QUESTION, tools=[server.tool()], store=False,
                                        include=["file_search_call.results"])
    echoed = [{"role": "user", "content": QUESTION},
              *(item.model_dump(exclude_none=True) for item in first.output),
              {"role": "user", "content": "Thank you."}]
    server.client.add_reply(text_reply("You are welcome."))
    again = server.sdk.responses.create(model=MODEL, input=echoed, store=True)
    assert again.output_text == "You are welcome." and [m["role"] for m in server.last_prompt()] == [
        "user", "assistant", "user"]
    listed = server.sdk.responses.input_items.list(again.id, order="asc").data
    assert listed[1].type == "file_search_call" and listed[1].results[0].filename == "parish-records.pdf"


def test_the_agents_sdk_file_search_tool_works_unchanged(server):
    from agents import Agent, FileSearchTool, OpenAIResponsesModel, Runner, set_tracing_disabled
    from agents.items import ToolCallItem

    set_tracing_disabled(True)  # the SDK's traces go to OpenAI's servers otherwise

    async def run() -> tuple[Any, Any]:
        client = openai.AsyncOpenAI(base_url=f"{server.base}/v1", api_key="none", max_retries=0)
        agent = Agent(name="Archivist", instructions="Answer from the parish records.",
                      model=OpenAIResponsesModel(MODEL, client),
                      tools=[FileSearchTool(vector_store_ids=[server.store_id], max_num_results=3,
                                            include_search_results=True)])
        first = await Runner.run(agent, QUESTION)
        second = await Runner.run(agent, [*first.to_input_list(), {"role": "user", "content": FACTS[37][1]}])
        return first, second

    server.client.add_reply(text_reply(ANSWER))
    server.client.add_reply(text_reply("The schooner Marigold [1]."))
    first, second = asyncio.run(run())
    assert first.final_output == ANSWER
    [searched] = [item.raw_item for item in first.new_items if isinstance(item, ToolCallItem)]
    assert searched.type == "file_search_call" and searched.results[0].attributes == {"location": "page 212"}
    assert len(searched.results) <= 3
    assert second.final_output == "The schooner Marigold [1]." and "page 37" in quoted(server.last_prompt())
    assert server.last_prompt()[0]["role"] == "system"  # the agent's instructions
