"""How fast is the conversation store where a page waits on it?

One owner with 10,000 saved conversations (4 messages each, 1 in 100 mentioning "lighthouse") and one conversation
of 1,000 messages (questions, tool calls with metrics, tool outputs, answers, a 100 KB image every 100 messages),
saved through the store's own append. Then, each timed N times after a warm-up: opening the long conversation
(get), the history list (the newest 50), the list with a search term that 1 in 100 conversations match, and with
one that none match (every message of the owner is looked at). Target: 100 ms for each.

    .venv/bin/python -m bench.storage [--url postgresql+psycopg://...] [--conversations 10000] [--runs 30]

Without --url: a SQLite file in a temp folder. With one: that database, under an owner of its own, removed after.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import delete, insert

from app.domain.conversation import AnswerMetrics, Attachment, Message, ToolCall
from app.storage import ConversationStore, open_database
from app.storage.codec import encode_message_json, search_text, title_from
from app.storage.tables import ConversationRow, MessageRow

TARGET_MS = 100.0
WORDS = ("the quick brown fox jumps over a lazy dog while seven wizards quietly judge boxing matches near "
         "the old harbour ").split()


def prose(seed: int, chars: int) -> str:
    words, index = [], seed
    while sum(len(word) + 1 for word in words) < chars:
        words.append(WORDS[index % len(WORDS)])
        index = index * 7 + 3
    return " ".join(words)


def small_conversation(index: int) -> list[Message]:
    topic = "the lighthouse keeper" if index % 100 == 0 else f"topic number {index}"
    return [Message("user", f"Tell me about {topic}. " + prose(index, 120)),
            Message("assistant", prose(index + 1, 700),
                    metrics=AnswerMetrics(120, 180, 0.21, 31.0, 6.0, "stop")),
            Message("user", "And more? " + prose(index + 2, 80)),
            Message("assistant", prose(index + 3, 500), metrics=AnswerMetrics(400, 120, 0.3, 30.5, 4.2, "stop"))]


def long_conversation(count: int) -> list[Message]:
    image = os.urandom(100_000)
    messages: list[Message] = []
    while len(messages) < count:
        turn = len(messages)
        messages += [
            Message("user", prose(turn, 200)),
            Message("assistant", "", tool_calls=[ToolCall("python", {"code": prose(turn, 150)})],
                    metrics=AnswerMetrics(900, 60, 0.4, 29.0, 2.5, "tool_calls")),
            Message("tool", prose(turn, 300), name="python", tool_status="ok", duration_s=0.8,
                    display_text=prose(turn + 1, 1000),
                    attachments=[Attachment("image", "plot.png", data=image)] if turn % 100 == 0 else []),
            Message("assistant", prose(turn + 2, 1500), metrics=AnswerMetrics(1500, 400, 0.5, 28.0, 14.8, "stop")),
        ]
    return messages[:count]


def fill(store: ConversationStore, owner: str, conversations: int) -> None:
    """Bulk rows straight into the tables (the store would take one transaction per message), 1 s apart."""
    start = datetime.now(UTC) - timedelta(seconds=conversations + 10)
    for first in range(0, conversations, 1000):
        heads, rows = [], []
        for index in range(first, min(first + 1000, conversations)):
            messages, id, at = small_conversation(index), str(uuid.uuid4()), start + timedelta(seconds=index)
            heads.append({"id": id, "owner": owner, "page": "chat", "title": title_from(messages[0]), "settings": {},
                          "version": 1, "message_count": len(messages), "created_at": at, "updated_at": at})
            rows += [{"conversation_id": id, "seq": seq, "deleted": False, "search_text": search_text(message),
                      "payload": encode_message_json(message), "created_at": at}
                     for seq, message in enumerate(messages)]
        with store.engine.begin() as connection:
            connection.execute(insert(ConversationRow), heads)
            connection.execute(insert(MessageRow), rows)


def timed(action: Callable[[], object], runs: int) -> list[float]:
    for _ in range(3):
        action()
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        action()
        times.append((time.perf_counter() - started) * 1000)
    return times


def p95(times: list[float]) -> float:
    return sorted(times)[math.ceil(0.95 * len(times)) - 1]


def report(name: str, times: list[float], target: float | None = TARGET_MS) -> None:
    median = statistics.median(times)
    verdict = "" if target is None else ("ok" if p95(times) <= target else "OVER")
    target_text = "" if target is None else f"{target:.0f}"
    print(f"{name:<52} {median:>9.1f} {p95(times):>9.1f} {target_text:>10} {verdict:>5}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="a database URL (default: a SQLite file in a temp folder)")
    parser.add_argument("--conversations", type=int, default=10_000)
    parser.add_argument("--messages", type=int, default=1_000, help="messages of the long conversation")
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as folder:
        engine = open_database(args.url or f"sqlite:///{Path(folder) / 'conversations.db'}")
        store, owner = ConversationStore(engine), f"bench-{uuid.uuid4().hex[:8]}"
        print(f"{engine.dialect.name} {engine.dialect.server_version_info or ''}: filling {args.conversations:,} "
              f"conversations...", flush=True)
        started = time.perf_counter()
        fill(store, owner, args.conversations)
        print(f"  filled in {time.perf_counter() - started:.1f} s", flush=True)
        long = store.create(owner, "chat")
        appends = []
        for message in long_conversation(args.messages):
            began = time.perf_counter()
            store.append(owner, long, message)
            appends.append((time.perf_counter() - began) * 1000)
        try:
            print(f"\n{'operation':<52} {'median ms':>9} {'p95 ms':>9} {'target ms':>10}")
            report(f"append one message (each of {args.messages:,})", appends, None)
            assert len(store.get(owner, long).messages) == args.messages
            report(f"get: open a conversation of {args.messages:,} messages",
                   timed(lambda: store.get(owner, long), args.runs))
            total = args.conversations + 1
            assert len(store.list(owner)) == 50
            report(f"list: newest 50 of {total:,}", timed(lambda: store.list(owner), args.runs))
            assert len(store.list(owner, search="LIGHTHOUSE")) == 50
            report(f"list: newest 50 of {total:,} matching a term (1 in 100)",
                   timed(lambda: store.list(owner, search="LIGHTHOUSE"), args.runs))
            assert store.list(owner, search="no such words") == []
            report(f"list: search {total:,} for a term none match",
                   timed(lambda: store.list(owner, search="no such words"), args.runs))
        finally:
            with engine.begin() as connection:
                connection.execute(delete(ConversationRow).where(ConversationRow.owner == owner))
            engine.dispose()


if __name__ == "__main__":
    main()
