"""Running an eval set: each case on each target, `repeats` times with seeds `seed`, `seed + 1`, ... (the same
seeds on every target), through the compare runner (app/compare/compare_run.py): the targets answer one case at
once, sharing loaded models. Each answer is checked (checks.py) as it comes."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from app.agent.loop import ToolSettings
from app.compare.compare_run import ClientFor, run_all
from app.compare.results import TargetResult
from app.compare.targets import Target
from app.domain.conversation import Conversation, Message
from app.evals.cases import EvalCase, EvalSet
from app.evals.checks import CheckResult, Judge, evaluate
from app.tools.policy import RunPolicy, policy_for
from app.tools.tool_registry import ToolRegistry


@dataclass(frozen=True)
class CaseRun:
    """One case, on one target, once."""

    case: str
    target: str
    repeat: int
    seed: int
    checks: tuple[CheckResult, ...]
    result: TargetResult

    @property
    def passed(self) -> bool:
        return all(check.passed for check in self.checks)

    def why_failed(self) -> str:
        """Why this run failed, in a line (empty when it passed): the turn's error, else its first failed check."""
        if self.result.error:
            return f"the turn failed: {self.result.error}"
        failed = next((check for check in self.checks if not check.passed), None)
        return "" if failed is None else f"{failed.kind}: {failed.detail}"

    def to_json(self) -> dict[str, Any]:
        metrics = self.result.metrics
        return {"case": self.case, "target": self.target, "repeat": self.repeat, "seed": self.seed,
                "passed": self.passed, "answer": self.result.answer, "error": self.result.error,
                "checks": [{"type": c.kind, "passed": c.passed, "detail": c.detail, "model_judged": c.model_judged}
                           for c in self.checks],
                "latency_s": round(self.result.total_time_s, 4), "completion_tokens": metrics.completion_tokens,
                "time_to_first_token_s": metrics.time_to_first_token_s,
                "tool_calls": len(self.result.calls), "valid_tool_calls": sum(c.valid for c in self.result.calls)}


def conversation_of(case: EvalCase) -> Conversation:
    """The case's messages as the app's conversation (checked as an import's are)."""
    return Conversation([Message.from_openai(message.model_dump(exclude_none=True)) for message in case.messages])


def targets_for(case: EvalCase, targets: Sequence[Target], seed: int) -> list[Target]:
    """The targets as this case runs them: its sampling and system prompt over each one's own, and the run's seed."""
    chosen = case.sampling.chosen()
    return [replace(target, params=replace(target.params, **chosen, seed=seed),
                    system_prompt=target.system_prompt if case.system_prompt is None else case.system_prompt)
            for target in targets]


def tools_for(case: EvalCase, registry: ToolRegistry, approved: dict[str, RunPolicy],
              max_rounds: int) -> ToolSettings | None:
    if not case.tools:
        return None
    chosen = registry.subset(case.tools)
    return ToolSettings(chosen, choice=case.tool_choice, max_rounds=max_rounds,
                        policies={tool.name: policy_for(tool, approved) for tool in chosen})


def run_set(eval_set: EvalSet, targets: Sequence[Target], client_for: ClientFor, registry: ToolRegistry, *,
            repeats: int = 1, seed: int = 0, judge: Judge | None = None, approved: Sequence[str] = (),
            max_rounds: int = 4, timeout_s: float | None = None,
            on_run: Callable[[CaseRun], None] | None = None) -> list[CaseRun]:
    """Every case on every target, `repeats` times. A tool the set names that is not here is an error before any
    run (ValueError)."""
    unknown = sorted({name for case in eval_set.cases for name in case.tools if name not in registry})
    if unknown:
        raise ValueError(f"the set uses tools this app does not have: {', '.join(unknown)} (it has "
                         f"{', '.join(registry.names)})")
    policies: dict[str, RunPolicy] = dict.fromkeys(approved, "auto")
    runs: list[CaseRun] = []
    for case in eval_set.cases:
        tools = tools_for(case, registry, policies, max_rounds)
        for repeat in range(repeats):
            chosen = targets_for(case, targets, seed + repeat)
            results = run_all(chosen, conversation_of(case), client_for, tools, timeout_s=timeout_s)
            for target, result in zip(chosen, results, strict=True):
                checks = tuple(evaluate(check, result, case.question, judge) for check in case.checks)
                run = CaseRun(case.name, target.label, repeat, seed + repeat, checks, result)
                runs.append(run)
                if on_run is not None:
                    on_run(run)
    return runs
