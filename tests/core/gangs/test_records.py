"""Only the gang book writes a gang's record (``core/gangs/book.py``): every other module of
``extender/`` reads it and asks the book for a change, so a record cannot drift from the
lifecycle table and the notices that go with each change.
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

from extender.core.gangs.record import GangRecord

ROOT = Path(__file__).resolve().parents[3] / "extender"
BOOK = ROOT / "core" / "gangs" / "book.py"
FIELDS = {f.name for f in dataclasses.fields(GangRecord)}
MUTATORS = {"append", "add", "clear", "discard", "extend", "insert", "pop", "popitem", "remove", "setdefault",
            "update"}


def writes(source: str) -> list[str]:
    """Each place that assigns to, or changes in place, a field named like a record's on an
    object other than ``self`` (``rec.reason = ...``, ``rec.waiting[k] = ...``,
    ``rec.refused.clear()``), as ``line: text``."""
    found: list[tuple[int, str]] = []

    def field_of(node: ast.AST) -> str | None:
        while isinstance(node, ast.Subscript):
            node = node.value
        if isinstance(node, ast.Attribute) and node.attr in FIELDS and not (
                isinstance(node.value, ast.Name) and node.value.id == "self"):
            return node.attr
        return None

    for node in ast.walk(ast.parse(source)):
        targets: list[ast.AST] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = node.targets
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in MUTATORS:
            targets = [node.func.value]
        for target in targets:
            for part in ast.walk(target) if isinstance(target, ast.Tuple) else [target]:
                if field_of(part) is not None:
                    found.append((node.lineno, ast.unparse(node).splitlines()[0]))
    return [f"{line}: {text}" for line, text in sorted(found)]


def test_only_the_book_writes_a_gang_record():
    checked = [p for p in sorted(ROOT.rglob("*.py")) if p != BOOK and "api/v1" not in p.as_posix()]
    assert len(checked) > 50
    for path in checked:
        assert writes(path.read_text()) == [], f"{path.relative_to(ROOT.parent)} writes a gang record"


def test_the_book_writes_its_records():
    # The detector sees what the book does (a check that cannot fail proves nothing).
    assert len(writes(BOOK.read_text())) > 20


def test_the_detector_sees_each_kind_of_write():
    source = """
rec.reason = choice.reason
rec.round += 1
rec.waiting[key] = (uid, node)
rec.refused.clear()
a, rec.phase = 1, 2
self.reason = "its own field"
reason = rec.reason
rec.members.count(x)
"""
    assert [w.split(": ", 1)[1] for w in writes(source)] == [
        "rec.reason = choice.reason", "rec.round += 1", "rec.waiting[key] = (uid, node)", "rec.refused.clear()",
        "a, rec.phase = (1, 2)"]
