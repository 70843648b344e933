"""Small units (issue 34): no function over 80 lines and no class over 250, read from the code itself.

Every function (a method, a nested function, async or not) and every class of the two apps and of the
bot package (dashboard/, rtvi_monitor/, sdk/src/), their migrations aside, counts from its first
decorator line to its last line. One that is longer fails here with its file, line, name and length:
split it along a real seam (a class's separate responsibilities into collaborating classes, a long
function into named steps), never one rule across files to get under the limit.
"""

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
TREES = ("dashboard", "rtvi_monitor", "sdk/src")
SKIPPED = {"migrations", "tests", "bench"}  # folders whose code is not the product's
MAX_FUNCTION_LINES = 80
MAX_CLASS_LINES = 250
UNITS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def span(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> tuple[int, int]:
    """A function's or class's first line (its first decorator's, else its def's or class's) and its length
    from there to its last line."""
    first = min([node.lineno, *(decorator.lineno for decorator in node.decorator_list)])
    return first, node.end_lineno - first + 1


def too_long(source: str, filename: str = "<source>") -> list[tuple[int, str, int, int]]:
    """(first line, qualified name, lines, limit) of every function and class of `source` over its limit."""
    found = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, UNITS):
                name = f"{prefix}{child.name}"
                limit = MAX_CLASS_LINES if isinstance(child, ast.ClassDef) else MAX_FUNCTION_LINES
                first, length = span(child)
                if length > limit:
                    found.append((first, name, length, limit))
                visit(child, f"{name}.")
            else:
                visit(child, prefix)

    visit(ast.parse(source, filename), "")
    return found


def modules():
    for tree in TREES:
        for path in sorted((ROOT / tree).rglob("*.py")):
            if SKIPPED.isdisjoint(path.relative_to(ROOT).parts):
                yield path


def test_no_function_over_80_lines_and_no_class_over_250():
    offenders = [
        f"{path.relative_to(ROOT)}:{line} {name}: {length} lines (at most {limit})"
        for path in modules()
        for line, name, length, limit in too_long(path.read_text(encoding="utf-8"), str(path))
    ]
    assert not offenders, "Units over the size limit:\n" + "\n".join(offenders)


def test_it_reads_every_tree():
    read = {path.relative_to(ROOT).parts[0] for path in modules()}
    assert read == {"dashboard", "rtvi_monitor", "sdk"}
    assert not any("migrations" in path.parts for path in modules())


def _function(lines: int, decorators: int = 0, indent: str = "") -> str:
    body = [f"{indent}@staticmethod"] * decorators + [f"{indent}def f():"]
    body += [f"{indent}    x = {i}" for i in range(lines - 1 - decorators)]
    return "\n".join(body) + "\n"


@pytest.mark.parametrize(
    "source, expected",
    [
        (_function(80), []),
        (_function(81), [(1, "f", 81, 80)]),
        (_function(81, decorators=2), [(1, "f", 81, 80)]),  # the decorators count
        ("async " + _function(81), [(1, "f", 81, 80)]),
        ("class C:\n" + _function(81, indent="    "), [(2, "C.f", 81, 80)]),  # a method, named by its class
        ("def outer():\n" + _function(81, indent="    "), [(1, "outer", 82, 80), (2, "outer.f", 81, 80)]),
        ("class C:\n" + "    x = 1\n" * 249, []),
        ("class C:\n" + "    x = 1\n" * 250, [(1, "C", 251, 250)]),
    ],
)
def test_the_measure(source, expected):
    assert too_long(source) == expected
