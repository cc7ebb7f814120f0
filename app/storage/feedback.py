"""FeedbackStore: the thumbs up and down people gave answers, counted per model. The feedback itself is kept with
its answer (a message's `feedback`, app/storage/schema.py), so it lives and goes with the conversation, its
versions and its exports; this reads it back across one owner's history. Only the messages that hold feedback are
decoded (their JSON names it), and an earlier answer kept as a version of a regenerated one still counts."""

from __future__ import annotations

import builtins
import logging
from collections.abc import Iterable
from dataclasses import dataclass

from pydantic import ValidationError
from sqlalchemy import false, select

from app.domain.conversation import Message
from app.storage import codec
from app.storage.sessions import EngineStore
from app.storage.tables import ConversationRow as C
from app.storage.tables import MessageRow as M

log = logging.getLogger(__name__)
UNKNOWN_MODEL = "(model not recorded)"  # answers written before answers named their model, or imported ones


@dataclass(frozen=True)
class FeedbackCount:
    """One model's thumbs, over one owner's conversations."""

    model: str
    up: int
    down: int
    comments: int  # ratings that came with a comment

    @property
    def rated(self) -> int:
        return self.up + self.down

    @property
    def share_up(self) -> float:
        return self.up / self.rated if self.rated else 0.0


@dataclass(frozen=True)
class RatedAnswer:
    """An answer with its feedback, and the question it answered (what an eval set is made from)."""

    conversation_id: str
    question: str
    answer: Message


class FeedbackStore(EngineStore):
    def counts(self, owner: str) -> builtins.list[FeedbackCount]:
        """Each model's thumbs, most rated first (then by name)."""
        tally: dict[str, list[int]] = {}
        for _, _, message in self._with_feedback(owner):
            for _, answer in _rated(message, ""):
                assert answer.feedback is not None
                counts = tally.setdefault(answer.model or UNKNOWN_MODEL, [0, 0, 0])
                counts[0 if answer.feedback.rating == "up" else 1] += 1
                counts[2] += bool(answer.feedback.comment.strip())
        found = [FeedbackCount(model, up, down, comments) for model, (up, down, comments) in tally.items()]
        return sorted(found, key=lambda count: (-count.rated, count.model))

    def rated_answers(self, owner: str) -> builtins.list[RatedAnswer]:
        """Every answer of the owner's that has feedback, in its conversation's order, with the question it
        answered; those in kept versions too."""
        found: builtins.list[RatedAnswer] = []
        with_feedback = self._with_feedback(owner)
        questions = self._questions({(conversation_id, seq) for conversation_id, seq, _ in with_feedback})
        for conversation_id, seq, message in with_feedback:
            question = questions.get((conversation_id, seq), "")
            found.extend(RatedAnswer(conversation_id, asked, answer) for asked, answer in _rated(message, question))
        return found

    def _with_feedback(self, owner: str) -> builtins.list[tuple[str, int, Message]]:
        """The owner's shown messages whose record holds feedback (their own or a kept version's). One that cannot
        be read is skipped (and logged): the history itself says why it cannot be shown."""
        with self._reading() as session:
            rows = session.execute(
                select(M.conversation_id, M.seq, M.payload).join(C, C.id == M.conversation_id)
                .where(C.owner == owner, M.deleted == false(), M.payload.contains('"feedback":'))
                .order_by(C.created_at, M.conversation_id, M.seq)).all()
        found = []
        for conversation_id, seq, payload in rows:
            try:
                found.append((conversation_id, seq, codec.decode_message_json(payload)))
            except ValidationError:
                log.warning("Skipped an unreadable message (%s #%d) while reading feedback", conversation_id, seq)
        return found

    def _questions(self, places: set[tuple[str, int]]) -> dict[tuple[str, int], str]:
        """For each (conversation, seq): the text of the last user message before it."""
        questions: dict[tuple[str, int], str] = {}
        with self._reading() as session:
            for conversation_id in {place[0] for place in places}:
                users = session.execute(select(M.seq, M.payload).where(
                    M.conversation_id == conversation_id, M.deleted == false(),
                    M.payload.startswith('{"role":"user"')).order_by(M.seq)).all()
                for place in (p for p in places if p[0] == conversation_id):
                    before = [payload for seq, payload in users if seq < place[1]]
                    try:
                        questions[place] = codec.decode_message_json(before[-1]).content if before else ""
                    except ValidationError:
                        questions[place] = ""
        return questions


def _rated(message: Message, question: str) -> Iterable[tuple[str, Message]]:
    """The message and every message in its versions that has feedback, each with its question: a version headed
    by a user message (an earlier edit) asks its own."""
    if message.role == "assistant" and message.feedback is not None:
        yield question, message
    for version in message.versions:
        asked = question
        for kept in version:
            if kept.role == "user":
                asked = kept.content
            yield from _rated(kept, asked)
