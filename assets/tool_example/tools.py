"""The tool of the word-problem example: a calculator, as in Agent Lightning's calc_x.

Every public function here with type hints and a docstring is offered to the model as a tool.
calculator("1 / (3/2)") -> "2/3 = around 0.666667";  calculator("90 - 75") -> "15"
"""

import ast
import operator
from fractions import Fraction

_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
        ast.Pow: operator.pow, ast.USub: operator.neg, ast.UAdd: operator.pos}


def _eval(node: ast.AST) -> Fraction:
    if isinstance(node, ast.Expression):
        return _eval(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return Fraction(str(node.value))
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow) and (right.denominator != 1 or abs(right) > 64):
            raise ValueError("only small whole-number powers")
        return _OPS[type(node.op)](left, right)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_eval(node.operand))
    raise ValueError(f"unsupported expression: {ast.dump(node)[:60]}")


def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression exactly (+ - * / ** and parentheses; % means /100).

    Args:
        expression: the expression, e.g. "90 / (1/4)" or "30%"
    """
    value = _eval(ast.parse(expression.replace("%", "/100"), mode="eval"))
    if value.denominator == 1:
        return str(value.numerator)
    return f"{value} = around {float(value):.6g}"
