"""Tests report through assertions, not prints (issue 49): no test module under tests/ or an
integration's tests/ calls print() or turns pytest's capture off (capsys/capfd.disabled()), so
nothing lands among pytest's progress lines. Code a test runs in a child process (a script in a
string) and a module's ``if __name__ == "__main__":`` block (run by hand to write a README table)
may print. Counts that matter go to ``record_property`` (``pytest --junitxml``)."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def modules_to_check() -> list[Path]:
    return sorted(
        {*REPO.glob("tests/**/*.py"), *REPO.glob("integrations/*/tests/**/*.py"), REPO / "conftest.py"}
    )


def _is_main_block(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.If)
        and isinstance(node.test, ast.Compare)
        and isinstance(node.test.left, ast.Name)
        and node.test.left.id == "__name__"
    )


def loud_calls(source: str) -> list[tuple[int, str]]:
    """(line, what) for each print() and capture switched off, outside ``__main__`` blocks."""
    tree = ast.parse(source)
    skip = {id(n) for top in tree.body if _is_main_block(top) for n in ast.walk(top)}
    found = []
    for node in ast.walk(tree):
        if id(node) in skip or not isinstance(node, ast.Call):
            continue
        f = node.func
        if isinstance(f, ast.Name) and f.id == "print":
            found.append((node.lineno, "print()"))
        elif (
            isinstance(f, ast.Attribute)
            and f.attr == "disabled"
            and isinstance(f.value, ast.Name)
            and f.value.id in ("capsys", "capfd")
        ):
            found.append((node.lineno, f"{f.value.id}.disabled()"))
    return found


def test_no_test_prints_or_turns_capture_off() -> None:
    loud = [
        f"{path.relative_to(REPO)}:{line}: {what}"
        for path in modules_to_check()
        for line, what in loud_calls(path.read_text(encoding="utf-8"))
    ]
    assert not loud, "a test reports by assertions or record_property, not output:\n" + "\n".join(loud)


def test_the_check_sees_prints_but_not_child_scripts_or_main_blocks() -> None:
    source = (
        "import sys\n"
        "CHILD = 'print(1)'\n"
        "def test_a(capsys):\n"
        "    print('x')\n"
        "    with capsys.disabled():\n"
        "        pass\n"
        "if __name__ == '__main__':\n"
        "    print('table')\n"
    )
    assert loud_calls(source) == [(4, "print()"), (5, "capsys.disabled()")]
