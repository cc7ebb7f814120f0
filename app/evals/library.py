"""Eval sets kept in the app's database (app/storage/eval_sets.py), checked on the way in and out against
cases.py; and cases made from the app's own conversations: a turn saved as a test case, and the answers a person
rated down offered as candidates."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from app.domain.conversation import Conversation
from app.domain.conversation import Message as DomainMessage
from app.domain.validation import describe
from app.evals.cases import Check, EvalCase, EvalSet, Sampling
from app.storage.errors import VersionConflict
from app.storage.eval_sets import EvalSetStore
from app.storage.feedback import FeedbackStore


class EvalLibraryError(ValueError):
    """A case or a set that cannot be stored, and why."""


def stored_set(store: EvalSetStore, owner: str, name: str) -> tuple[EvalSet, int] | None:
    """The owner's set `name` and its version; None when there is none. EvalLibraryError when what is stored no
    longer passes the checks (written by another version)."""
    found = store.get(owner, name)
    if found is None:
        return None
    try:
        return EvalSet.model_validate(found.document), found.version
    except ValidationError as exc:
        raise EvalLibraryError(describe(exc, f"the stored set {name!r}")) from None


def save_set(store: EvalSetStore, owner: str, eval_set: EvalSet, replace: bool = False) -> None:
    """Store a whole set (an import): a new name, or, with `replace`, over the owner's set of that name."""
    document = eval_set.model_dump(mode="json", by_alias=True, exclude_defaults=True)
    existing = store.get(owner, eval_set.name)
    if existing is None:
        store.save(owner, eval_set.name, document)
    elif replace:
        store.save(owner, eval_set.name, document, expected_version=existing.version)
    else:
        raise EvalLibraryError(f"You have an eval set named {eval_set.name!r} already: import it under another "
                               "name, or replace it.")


def add_case(store: EvalSetStore, owner: str, set_name: str, case: EvalCase) -> str:
    """Add `case` to the owner's set `set_name` (made if needed); a name taken in the set gets a number. Returns
    the case's name as stored. Retries once when another tab changed the set meanwhile."""
    for _ in range(2):
        current = stored_set(store, owner, set_name)
        cases = list(current[0].cases) if current else []
        taken = {existing.name for existing in cases}
        name, number = case.name, 2
        while name in taken:
            name, number = f"{case.name} ({number})", number + 1
        named = case.model_copy(update={"name": name})
        try:
            grown = EvalSet(name=set_name, description=current[0].description if current else "",
                            cases=[*cases, named])
        except ValidationError as exc:
            raise EvalLibraryError(describe(exc, f"the set {set_name!r}")) from None
        document = grown.model_dump(mode="json", by_alias=True, exclude_defaults=True)
        try:
            store.save(owner, set_name, document, expected_version=current[1] if current else None)
            return name
        except VersionConflict:
            continue
    raise EvalLibraryError(f"The set {set_name!r} kept changing in another tab: try again.")


def case_from_turn(conversation: Conversation, answer_index: int, name: str, checks: Sequence[Check], *,
                   page: str = "chat", tools: Sequence[str] = (), tool_choice: str = "auto",
                   system_prompt: str | None = None, sampling: Sampling | None = None) -> EvalCase:
    """The case for the answer that starts at message `answer_index`: the conversation up to the question before
    it (text only: pictures are left out; a user's documents and retrieved passages are kept as the model read
    them), with the page's tools and settings.
    EvalLibraryError when there is no question before it, or the case does not pass its checks."""
    messages = conversation.messages[:answer_index]
    if not messages or messages[-1].role != "user":
        raise EvalLibraryError("Only an answer to a message can become a test case.")
    try:
        return EvalCase.model_validate({
            "name": name, "page": page, "tools": list(tools), "tool_choice": tool_choice,
            "system_prompt": system_prompt, "sampling": sampling or Sampling(), "checks": list(checks),
            "messages": [_plain(message) for message in messages]})
    except ValidationError as exc:
        raise EvalLibraryError(describe(exc, "the test case")) from None


def _plain(message: DomainMessage) -> dict[str, Any]:
    """A message as a case keeps it: OpenAI's shape, text only (a user's documents and passages as the model read
    them)."""
    data: dict[str, Any] = {"role": message.role,
                            "content": message.prompt_text(current=False) if message.role == "user" else
                            message.content}
    if message.tool_calls:
        data["tool_calls"] = [dict(call.to_openai()) for call in message.tool_calls]
    if message.role == "tool":
        data["tool_call_id"] = message.tool_call_id or ""
    return data


@dataclass(frozen=True)
class Candidate:
    """An answer the person rated down, offered as a test case: its question, what was wrong, and which model."""

    conversation_id: str
    question: str
    answer: str
    comment: str
    model: str


def thumbs_down_candidates(feedback: FeedbackStore, owner: str) -> list[Candidate]:
    return [Candidate(rated.conversation_id, rated.question, rated.answer.content,
                      rated.answer.feedback.comment if rated.answer.feedback else "", rated.answer.model)
            for rated in feedback.rated_answers(owner)
            if rated.answer.feedback is not None and rated.answer.feedback.rating == "down" and rated.question]
