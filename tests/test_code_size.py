"""Size limits of the library (issue 17, acceptance): no file in ``src/privml`` over
600 lines, and no function over 80 lines unless a comment says why.

A function's length runs from its ``def`` line to its last line, docstring included.
A long function is accepted when a comment containing ``long-function:`` and a
reason sits on the line before its ``def`` (or before its first decorator) or at
the top of its body, between the ``def`` and its first statement after the
docstring. The two allow-lists below are explicit and may only shrink: each entry
says why it is there, and an entry that is no longer needed fails the test.
"""

from __future__ import annotations

import ast
import io
import tokenize
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "privml"
MAX_FILE_LINES = 600
MAX_FUNCTION_LINES = 80
MARK = "long-function:"

#: Files over the limit that have not been split yet (issue 17 asks for none; the DP-CD
#: module was the first split). Path relative to src/privml -> why it is still whole.
LONG_FILES: dict[str, str] = {}

#: Long functions in files that other sessions are editing while this test was written, so
#: that no comment could be added there: (path relative to src/privml, qualified name) -> why.
#: Replace each entry by a ``# long-function:`` comment in the function (or split it).
LONG_FUNCTIONS_PENDING: dict[tuple[str, str], str] = {}


def _sources() -> list[Path]:
    return sorted(SRC.rglob("*.py"))


def _relative(path: Path) -> str:
    return path.relative_to(SRC).as_posix()


def _functions(tree: ast.AST, prefix: str = "") -> list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """Every function and method with its qualified name (nested ones included)."""
    found: list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]] = []
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            found.append((prefix + node.name, node))
            found.extend(_functions(node, f"{prefix}{node.name}.<locals>."))
        elif isinstance(node, ast.ClassDef):
            found.extend(_functions(node, f"{prefix}{node.name}."))
        else:
            found.extend(_functions(node, prefix))
    return found


def _marked_lines(source: str) -> set[int]:
    """Lines with a real comment (not a string) carrying ``long-function:`` and a reason."""
    lines = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT and MARK in token.string:
            if token.string.split(MARK, 1)[1].strip():
                lines.add(token.start[0])
    return lines


def _explained(node: ast.FunctionDef | ast.AsyncFunctionDef, marked: set[int]) -> bool:
    """A marked comment from the line before the def (or its decorators) to the body's first statement."""
    first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    body = node.body
    head = body[0]
    has_docstring = isinstance(head, ast.Expr) and isinstance(head.value, ast.Constant) and isinstance(
        head.value.value, str
    )
    statements = body[1:] if has_docstring else body
    last = statements[0].lineno - 1 if statements else (node.end_lineno or node.lineno)
    return any(first - 1 <= line <= last for line in marked)


def _long_functions() -> list[tuple[str, str, int, bool]]:
    """(path, qualified name, length, explained) of every function over the limit."""
    out = []
    for path in _sources():
        source = path.read_text(encoding="utf-8")
        tree = ast.parse(source)
        marked = _marked_lines(source)
        for name, node in _functions(tree):
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            if length > MAX_FUNCTION_LINES:
                out.append((_relative(path), name, length, _explained(node, marked)))
    return out


def _line_count(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def test_no_file_over_the_limit():
    long = {_relative(p): _line_count(p) for p in _sources() if _line_count(p) > MAX_FILE_LINES}
    unexplained = {path: n for path, n in long.items() if path not in LONG_FILES}
    assert not unexplained, f"files over {MAX_FILE_LINES} lines (split them): {unexplained}"


@pytest.mark.parametrize("path", sorted(LONG_FILES))
def test_allowed_long_file_is_still_long(path):
    file = SRC / path
    assert file.is_file() and _line_count(file) > MAX_FILE_LINES, (
        f"{path} is now within {MAX_FILE_LINES} lines (or gone): remove it from LONG_FILES"
    )


def test_no_long_function_without_a_reason():
    unexplained = [
        f"{path}: {name} ({length} lines)"
        for path, name, length, explained in _long_functions()
        if not explained and (path, name) not in LONG_FUNCTIONS_PENDING
    ]
    assert not unexplained, (
        f"functions over {MAX_FUNCTION_LINES} lines: split them, or add a '# {MARK} <reason>' comment "
        "at the top of the body:\n" + "\n".join(unexplained)
    )


def test_pending_long_functions_still_need_their_entry():
    still = {(path, name) for path, name, _, explained in _long_functions() if not explained}
    stale = sorted(set(LONG_FUNCTIONS_PENDING) - still)
    assert not stale, f"remove these from LONG_FUNCTIONS_PENDING (short now, or explained by a comment): {stale}"


def test_the_checker_sees_comments_and_ignores_strings():
    source = (
        "def f():\n"
        '    """Doc."""\n'
        "    # long-function: a reason\n"
        "    return 1\n"
        "\n"
        "def g():\n"
        "    x = '# long-function: in a string'\n"
        "    return x\n"
        "\n"
        "# long-function: reason above the def\n"
        "def h():\n"
        "    return 2\n"
        "\n"
        "def k():\n"
        "    # long-function:\n"
        "    return 3\n"
    )
    tree = ast.parse(source)
    marked = _marked_lines(source)
    verdict = {name: _explained(node, marked) for name, node in _functions(tree)}
    assert verdict == {"f": True, "g": False, "h": True, "k": False}
