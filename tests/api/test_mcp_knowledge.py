"""search_knowledge through the app's MCP server, with the MCP SDK's own client over stdio: the local user's
documents, kept in the database the app uses (DEMO_DATABASE_URL), searched read-only with sources."""

from __future__ import annotations

import asyncio

from jsonschema import Draft202012Validator

from app.config import LOCAL_OWNER
from app.knowledge.ingest import add_file
from app.storage import open_database
from app.storage.knowledge import KnowledgeStore
from tests.api.test_mcp_server import reader, sessions, stdio_server, text_of  # noqa: F401 (a fixture)
from tests.knowledge_fixtures import FACTS


def test_an_mcp_client_searches_the_users_documents_with_sources(sessions, tmp_path):  # noqa: F811
    url = f"sqlite:///{tmp_path / 'app.db'}"
    engine = open_database(url)
    knowledge = KnowledgeStore(engine)
    history = knowledge.create_collection(LOCAL_OWNER, "Local history")
    add_file(knowledge, LOCAL_OWNER, history.id, "notes.md",
             f"# Harbour\n\n{FACTS[37][0]}\n\n# Abbey\n\n{FACTS[158][0]}".encode())
    knowledge.create_collection("someone-else", "Theirs")
    engine.dispose()

    async def scenario() -> None:
        env = {"DEMO_SESSIONS_DIR": str(sessions), "DEMO_DATABASE_URL": url}
        async with stdio_server(env, tmp_path / "server.log") as client:
            listed = {tool.name: tool for tool in (await client.list_tools()).tools}
            tool = listed["search_knowledge"]
            assert tool.annotations == reader("Search my documents", open_world=False)  # read-only, closed world
            result = await client.call_tool("search_knowledge", {"query": FACTS[158][1]})
            assert not result.is_error
            Draft202012Validator(tool.output_schema).validate(result.structured_content)
            first = result.structured_content["results"][0]
            assert (first["number"], first["document"], first["collection"], first["location"]) == (
                1, "notes.md", "Local history", "Abbey")
            assert "[1] notes.md, Abbey" in text_of(result) and "quoted data" in text_of(result)
            missing = await client.call_tool("search_knowledge", {"query": "pears", "collection": "Theirs"})
            assert missing.is_error and "'Local history'" in text_of(missing)  # only the user's own are named

    asyncio.run(scenario())
