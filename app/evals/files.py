"""Eval sets to and from files a person writes by hand: YAML (a .json file is YAML too). A file is refused whole,
with the place of its first mistakes (`cases[2].checks[0].seconds: Input should be greater than 0`); it is
bounded in size, and YAML aliases are refused (a few lines of them can stand for billions of values)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from app.domain.validation import describe
from app.evals.cases import EvalSet

MAX_FILE_BYTES = 10 * 2**20


class EvalFileError(ValueError):
    """An eval set file that cannot be used, and why."""


def read_set(path: Path) -> EvalSet:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise EvalFileError(f"Cannot read {path}: {exc.strerror or exc}.") from None
    return parse_set(raw, str(path))


def parse_set(raw: bytes, where: str = "the file") -> EvalSet:
    if len(raw) > MAX_FILE_BYTES:
        raise EvalFileError(f"{where} has {len(raw):,} bytes; an eval set file has at most {MAX_FILE_BYTES:,}.")
    try:
        text = raw.decode("utf-8-sig")
        for event in yaml.parse(text, Loader=yaml.SafeLoader):
            if isinstance(event, yaml.AliasEvent):
                raise EvalFileError(f"{where} uses a YAML alias (*name): write each value out instead.")
        data: Any = yaml.safe_load(text)
        # JSON's values only: YAML's dates, binary, sets and .nan would pass the cases' Any fields and break
        # later (a stored document is JSON).
        data = json.loads(json.dumps(data, allow_nan=False))
    except UnicodeDecodeError:
        raise EvalFileError(f"{where} is not UTF-8 text.") from None
    except yaml.YAMLError as exc:
        raise EvalFileError(f"{where} is not YAML or JSON: {exc}".rstrip()) from None
    except RecursionError:
        raise EvalFileError(f"{where} nests its values too deeply.") from None
    except (TypeError, ValueError) as exc:
        raise EvalFileError(f"{where} holds a value JSON cannot ({exc}): a date, binary data, a set or NaN. Quote it "
                            "if it is text.") from None
    if not isinstance(data, dict):
        raise EvalFileError(f"{where} must hold one eval set: a mapping with name and cases.")
    try:
        return EvalSet.model_validate(data)
    except ValidationError as exc:
        raise EvalFileError(describe(exc, where)) from None
    except RecursionError:
        raise EvalFileError(f"{where} nests its values too deeply.") from None


def set_to_yaml(eval_set: EvalSet) -> str:
    """The set as YAML, keys in the order a person reads them, defaults left out."""
    return yaml.safe_dump(_plain(eval_set), sort_keys=False, allow_unicode=True, width=120)


def set_to_json(eval_set: EvalSet) -> str:
    return json.dumps(_plain(eval_set), ensure_ascii=False, indent=2) + "\n"


def _plain(eval_set: EvalSet) -> dict[str, Any]:
    return eval_set.model_dump(mode="json", by_alias=True, exclude_defaults=True)
