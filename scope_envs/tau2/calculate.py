"""A bound on tau2's `calculate` tool, which evaluates its expression with Python's `eval`.

tau2 allows digits, `+ - * / ( ) .` and spaces, so `9**9**9` passes its check and then computes a
number with hundreds of millions of digits, holding the process for hours. `check_expression`
evaluates the same expression with the same Python arithmetic, refusing any power, product or
nesting whose result would be too large, before tau2 runs it; every expression it lets through
gives tau2 exactly the result it always gave.
"""

from __future__ import annotations

import ast
import math
import operator

from scope_envs.core.tools import ToolError

MAX_LENGTH = 1_000  # characters: far beyond any price calculation
MAX_DEPTH = 400  # nested operations (a sum of n terms nests n deep)
MAX_BITS = 4_096  # of an integer intermediate result (about 1,200 digits)
_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}


def check_expression(expression: str) -> None:
    """Raises `ToolError` for an expression too large or too deep to evaluate quickly."""
    if len(expression) > MAX_LENGTH:
        raise ToolError(f"the expression is longer than {MAX_LENGTH} characters")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return  # tau2's own eval reports it, as it always did
    _value(tree.body, 0)


def _value(node: ast.AST, depth: int) -> float | int:
    if depth > MAX_DEPTH:
        raise ToolError(f"the expression nests more than {MAX_DEPTH} operations")
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return _bounded(node.value)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_value(node.operand, depth + 1))
    if isinstance(node, ast.BinOp) and type(node.op) in (*_BINARY, ast.Pow):
        left, right = _value(node.left, depth + 1), _value(node.right, depth + 1)
        if isinstance(node.op, ast.Pow):
            return _power(left, right)
        try:
            return _bounded(_BINARY[type(node.op)](left, right))
        except (ZeroDivisionError, OverflowError):
            return 0  # tau2's eval raises the same error on its own; only size matters here
    return 0  # anything else fails in tau2's eval as it always did


def _power(base: float | int, exponent: float | int) -> float | int:
    if isinstance(base, int) and isinstance(exponent, int) and exponent > 0 and abs(base) > 1:
        if exponent * math.log2(abs(base)) > MAX_BITS:
            raise ToolError("the result of a power in the expression is too large to calculate")
    try:
        return _bounded(base**exponent)
    except (ZeroDivisionError, OverflowError, ValueError):
        return 0


def _bounded(value: float | int | complex) -> float | int:
    if isinstance(value, complex):
        return 0  # a negative number to a fractional power: tau2's float() fails on it as before
    if isinstance(value, int) and value.bit_length() > MAX_BITS:
        raise ToolError("an intermediate result of the expression is too large to calculate")
    return value
