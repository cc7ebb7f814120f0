"""An MCP server whose tools ask the user something mid-call (elicitation, form mode), for the tests. Written with
the SDK's resolvers, which ask the way the negotiated protocol wants: inside the call's result (2026-07-28's
multi-round-trip requests) or as a request of its own (earlier versions).

    python asking_server.py            # over stdin/stdout, as mcp.json starts it
"""

from __future__ import annotations

from typing import Annotated, Literal

from mcp.server import MCPServer
from mcp.server.mcpserver import AcceptedElicitation, CancelledElicitation, Elicit, ElicitationResult, Resolve
from mcp.types import ToolAnnotations
from pydantic import BaseModel, Field

server = MCPServer("asking", log_level="CRITICAL")


class Booking(BaseModel):
    guests: int = Field(description="How many people", ge=1, le=12)
    time: Literal["19:00", "20:00", "21:00"] = Field(description="When")
    vegetarian: bool = Field(default=False, description="A vegetarian menu")
    note: str = Field(default="", description="Anything else")


class Confirmation(BaseModel):
    sure: bool = Field(description="Really?")


def ask_booking(restaurant: str) -> Elicit[Booking]:
    return Elicit(f"Booking at {restaurant}: how many guests, and when?", Booking)


@server.tool(annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=False, openWorldHint=False))
async def book_table(restaurant: str,
                     booking: Annotated[ElicitationResult[Booking], Resolve(ask_booking)]) -> str:
    """Book a table at a restaurant; asks the user how many guests and when."""
    if not isinstance(booking, AcceptedElicitation):
        return f"No booking at {restaurant}: the user chose {booking.action}."
    data = booking.data
    menu = " (vegetarian)" if data.vegetarian else ""
    return f"Booked {restaurant} for {data.guests} at {data.time}{menu}. {data.note}".strip()


def ask_once() -> Elicit[Confirmation]:
    return Elicit("Wipe everything?", Confirmation)


def ask_twice(first: Annotated[ElicitationResult[Confirmation], Resolve(ask_once)]
              ) -> Elicit[Confirmation] | CancelledElicitation:
    if isinstance(first, AcceptedElicitation) and first.data.sure:
        return Elicit("Really wipe everything? This cannot be undone.", Confirmation)
    return CancelledElicitation()


@server.tool(annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=True, openWorldHint=False))
async def wipe(sure: Annotated[ElicitationResult[Confirmation], Resolve(ask_twice)]) -> str:
    """Wipe everything, after asking twice."""
    return "Wiped." if isinstance(sure, AcceptedElicitation) and sure.data.sure else "Nothing was wiped."


if __name__ == "__main__":
    server.run("stdio")
