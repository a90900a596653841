"""No function in services/ is longer than 80 lines (issue 34): a command body is options,
one use case and one renderer; a long domain function is split into the phases its
comments name. Counted from the `def` line to the last line of the body (decorators not
counted, nested functions counted within their parent and on their own)."""

from __future__ import annotations

import ast
from pathlib import Path

import services

LIMIT = 80
ROOT = Path(services.__file__).parent


def functions(tree: ast.AST, prefix: str = "") -> list[tuple[str, int, int]]:
    """(qualified name, def line, lines) of every function in `tree`, nested ones too."""
    out: list[tuple[str, int, int]] = []
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            end = node.end_lineno or node.lineno
            out.append((prefix + node.name, node.lineno, end - node.lineno + 1))
            out += functions(node, f"{prefix}{node.name}.")
        elif isinstance(node, ast.ClassDef):
            out += functions(node, f"{prefix}{node.name}.")
        else:
            out += functions(node, prefix)
    return out


def test_no_function_in_services_is_longer_than_80_lines() -> None:
    too_long = [
        f"{path.relative_to(ROOT.parent)}:{line} {name} ({length} lines)"
        for path in sorted(ROOT.rglob("*.py"))
        for name, line, length in functions(ast.parse(path.read_text(encoding="utf-8")))
        if length > LIMIT
    ]
    assert not too_long, f"functions over {LIMIT} lines: " + "; ".join(too_long)


def test_the_count_includes_nested_functions_and_methods() -> None:
    body = "".join(f"            x{i} = {i}\n" for i in range(81))
    source = f"class C:\n    def m(self):\n        def inner():\n{body}        return inner\n"
    found = {name: length for name, _, length in functions(ast.parse(source))}
    assert found == {"C.m": 84, "C.m.inner": 82}
