"""A `judge` check's model: a target that reads the question, the answer and the rubric, and answers in JSON
(`{"meets": true|false, "reason": "..."}`, held to that shape by constrained decoding where the backend has it).
Its verdict is marked model-judged wherever it shows: a small model's judgement is a hint, not a fact."""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from dataclasses import replace

from app.clients.client_protocol import ClientError, ResponseFormat
from app.compare.compare_run import ClientFor
from app.compare.targets import Target
from app.evals.checks import Judge

VERDICT = ResponseFormat("json_schema", {
    "type": "object", "additionalProperties": False, "required": ["meets", "reason"],
    "properties": {"meets": {"type": "boolean"}, "reason": {"type": "string", "maxLength": 300}}}, name="verdict")
_INSTRUCTIONS = ("You grade an assistant's answer against a rubric. Reply with JSON only: "
                 '{"meets": true or false, "reason": "one short sentence"}.')


def judge_from(targets: Sequence[Target], client_for: ClientFor, max_new_tokens: int = 160) -> Judge:
    """A Judge that asks the target whose label a check names (one of `targets`, greedy, at most
    `max_new_tokens`). A label no target has, a model that fails or a reply that is no verdict: not met, saying
    why."""
    by_label = {target.label: target for target in targets}

    def judge(rubric: str, question: str, answer: str, label: str) -> tuple[bool, str]:
        target = by_label.get(label)
        if target is None:
            return False, f"no target is labelled {label!r} (the targets: {', '.join(by_label)})"
        prompt = (f"Rubric: {rubric}\n\nQuestion: {question}\n\nAnswer: {answer}\n\n"
                  "Does the answer meet the rubric?")
        params = replace(target.params, temperature=0.0, max_new_tokens=max_new_tokens, seed=0)
        messages = [{"role": "system", "content": _INSTRUCTIONS}, {"role": "user", "content": prompt}]
        try:
            text = "".join(delta.text for delta in client_for(target.settings).stream(
                messages, params, threading.Event(), None, VERDICT))  # type: ignore[arg-type]
            verdict = json.loads(text)
            if not isinstance(verdict, dict) or not isinstance(verdict.get("meets"), bool):
                return False, "the judge's reply was no verdict"  # "false" as a string is not true
            return verdict["meets"], str(verdict.get("reason", ""))[:300]
        except ClientError as exc:
            return False, f"the judge failed: {exc}"
        except (ValueError, KeyError, TypeError):
            return False, "the judge's reply was no verdict"

    return judge
