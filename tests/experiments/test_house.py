"""The experiments wing stays small and readable: a rule checked on the source.

Truth: the source itself, read with ``ast``.  No function in ``jaxsynth/experiments/``
has more than ``MAX_LINES`` lines of code (docstrings, comments and blank lines apart),
and no private one more than ``MAX_PARAMETERS`` parameters (``self`` and ``cls`` apart):
past that, a function holds several steps that deserve names, or options that deserve
an object.
"""

from __future__ import annotations

import ast
import io
import tokenize
from pathlib import Path

import pytest

import jaxsynth

WING = Path(jaxsynth.__file__).parent / "experiments"
MAX_LINES = 60
MAX_PARAMETERS = 8


def _code_lines(source: str, node: ast.AST) -> int:
    """Lines of ``node`` that hold code: not blank, not only a comment, not its docstring."""
    lines = set(range(node.lineno, node.end_lineno + 1))
    body = node.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        lines -= set(range(body[0].lineno, body[0].end_lineno + 1))
    code = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type not in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT,
                              tokenize.DEDENT, tokenize.ENDMARKER):
            code.update(range(token.start[0], token.end[0] + 1))
    return len(lines & code)


def _functions():
    for path in sorted(WING.glob("*.py")):
        source = path.read_text()
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield f"{path.name}:{node.name}", source, node


def test_the_rule_counts_code_lines_and_parameters():
    source = 'def f(a, b):\n    """Doc\n    string."""\n    # a comment\n\n    return (a +\n' \
             '            b)\n'
    node = ast.parse(source).body[0]
    assert _code_lines(source, node) == 3  # the def line and the two lines of the return


FUNCTIONS = list(_functions())


@pytest.mark.parametrize("where, source, node", FUNCTIONS, ids=[f[0] for f in FUNCTIONS])
def test_functions_are_short_and_private_ones_take_few_parameters(where, source, node):
    assert _code_lines(source, node) <= MAX_LINES, where
    if node.name.startswith("_") and not node.name.startswith("__"):
        args = node.args
        names = [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs]
        names += [a.arg for a in (args.vararg, args.kwarg) if a is not None]
        assert len([n for n in names if n not in ("self", "cls")]) <= MAX_PARAMETERS, where
