"""Arithmetic on an `ast` parse tree: only numbers, operators and a few math functions, never `eval`."""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable

from app.tools.tool_registry import ToolError

MAX_EXPRESSION_CHARS = 500
MAX_EXPONENT = 10_000  # 2 ** 10_000 is instant; 9 ** 9 ** 9 would hang the process
MAX_RESULT_DIGITS = 4_300

_BINARY: dict[type, Callable[[float, float], float]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
}
_UNARY: dict[type, Callable[[float], float]] = {ast.UAdd: operator.pos, ast.USub: operator.neg}
_FUNCTIONS: dict[str, Callable[..., float]] = {
    "sqrt": math.sqrt, "sin": math.sin, "cos": math.cos, "tan": math.tan, "log": math.log, "exp": math.exp,
    "abs": abs, "round": round,
}
_CONSTANTS = {"pi": math.pi, "e": math.e}


def evaluate(expression: str) -> int | float:
    text = expression.strip().replace("^", "**").replace("×", "*").replace("÷", "/")
    if not text:
        raise ToolError("the expression is empty.")
    if len(text) > MAX_EXPRESSION_CHARS:
        raise ToolError(f"the expression is longer than {MAX_EXPRESSION_CHARS} characters.")
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError:
        raise ToolError(f"{expression!r} is not an arithmetic expression.") from None
    try:
        value = _eval(tree.body)
    except ZeroDivisionError:
        raise ToolError("division by zero.") from None
    except (ValueError, OverflowError) as exc:
        raise ToolError(f"the result is undefined or too large ({exc}).") from None
    if isinstance(value, int) and value.bit_length() > MAX_RESULT_DIGITS * 3.33:
        raise ToolError("the result has too many digits to show.")
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return int(value)
    return value


def _eval(node: ast.AST) -> int | float:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value  # type: ignore[return-value]  # int or float: checked on the line above
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        return _BINARY[type(node.op)](_eval(node.left), _eval(node.right))
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
        base, exponent = _eval(node.left), _eval(node.right)
        if abs(exponent) > MAX_EXPONENT or (abs(base) > 1 and abs(exponent) * math.log2(abs(base)) > 4 * MAX_EXPONENT):
            raise ToolError("the power is too large to compute.")
        return base**exponent
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_eval(node.operand))
    if isinstance(node, ast.Name) and node.id in _CONSTANTS:
        return _CONSTANTS[node.id]
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in _FUNCTIONS
        and not node.keywords
        and 1 <= len(node.args) <= 2
    ):
        return _FUNCTIONS[node.func.id](*(_eval(arg) for arg in node.args))
    shown = ast.unparse(node) if isinstance(node, ast.expr) else type(node).__name__
    raise ToolError(f"{shown!r} is not allowed: only numbers, + - * / // % **, parentheses, "
                    f"{', '.join(_FUNCTIONS)} and pi, e.")
