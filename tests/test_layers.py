"""The house of floors (STYLE.md): cli -> commands -> app -> adapters -> service -> core.

Every import in ``extender/`` points to the same floor or lower, no two modules import each
other (directly or around a circle), the core imports only itself and the standard library,
and no hand-written module or class grows past the sizes the issue set.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "extender"

FLOORS = (
    # (module prefix, floor): the longest matching prefix decides.
    ("extender.core", 0),
    ("extender.settings", 0),
    ("extender.api", 0),  # generated protobuf code and its generator
    ("extender.service", 2),
    ("extender.adapters", 4),
    ("extender.app", 5),
    ("extender.topotext", 5),  # the drawing format: its words become the label presets' keys
    ("extender.localcluster", 5),  # a wing: nobody below commands imports it (test below)
    ("extender.commands", 6),
    ("extender.cli", 7),
    ("extender.__main__", 8),
    ("extender", 0),  # the package's own __init__
)
GENERATED = ("extender/api/v1/",)


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def floor(module: str) -> int:
    prefix, level = max(((p, f) for p, f in FLOORS if module == p or module.startswith(p + ".")),
                        key=lambda pf: len(pf[0]))
    return level


def imports(path: Path) -> set[str]:
    """Every module named in an import anywhere in the file (function-level and TYPE_CHECKING too)."""
    tree = ast.parse(path.read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.level:
                raise AssertionError(f"{path}: relative import of {node.module}; use the absolute name")
            found.add(node.module)
            # ``from extender.core import book`` imports the module extender.core.gangs.book
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


MODULES = {module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def graph() -> dict[str, set[str]]:
    """Module -> the railyard modules it imports."""
    return {name: {m for m in imports(path) if m in MODULES and m != name} for name, path in MODULES.items()}


def test_every_import_points_down_or_sideways():
    for name, targets in graph().items():
        for target in targets:
            if name.startswith(target + "."):
                continue  # a module may import its own package's __init__
            assert floor(target) <= floor(name), f"{name} (floor {floor(name)}) imports {target} (floor {floor(target)})"


def test_no_import_circles():
    g = graph()
    # A submodule naming its own package (``from extender.core import book`` in core/x.py) is
    # not an arrow back to the package's __init__ for this purpose; every other edge counts.
    edges = {n: {t for t in ts if not n.startswith(t + ".")} for n, ts in g.items()}
    done: set[str] = set()

    def visit(node: str, stack: list[str]) -> None:
        if node in stack:
            raise AssertionError("import circle: " + " -> ".join(stack[stack.index(node):] + [node]))
        if node in done:
            return
        for t in sorted(edges[node]):
            visit(t, stack + [node])
        done.add(node)

    for n in sorted(edges):
        visit(n, [])


def test_the_detector_finds_a_circle():
    # The circle check itself, on a made-up graph (a check that cannot fail proves nothing).
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}}
    found = []

    def visit(node, stack):
        if node in stack:
            found.append(stack[stack.index(node):] + [node])
            return
        for t in sorted(edges[node]):
            visit(t, stack + [node])
    visit("a", [])
    assert found == [["a", "b", "c", "a"]]


def test_core_is_pure():
    allowed_outside = set(sys.stdlib_module_names) - {"socket", "threading", "time", "http", "urllib",
                                                      "logging", "asyncio", "subprocess", "os", "ssl"}
    cores = [p for n, p in MODULES.items() if n.startswith("extender.core")]
    assert cores
    for path in cores:
        for name in imports(path):
            top = name.split(".")[0]
            assert name.startswith("extender.core") or top in allowed_outside or name == "__future__", \
                f"{path.name} imports {name}"


def test_service_imports_no_adapter_command_localcluster_or_app():
    banned = ("extender.adapters", "extender.commands", "extender.localcluster", "extender.app", "extender.cli")
    service = [name for name in MODULES if name == "extender.service" or name.startswith("extender.service.")]
    assert len(service) > 1
    for name in service:
        for target in graph()[name]:
            assert not target.startswith(banned), f"{name} imports {target}"


def test_localcluster_is_a_wing():
    for name, targets in graph().items():
        if name.startswith(("extender.core", "extender.service", "extender.adapters",
                            "extender.app", "extender.topotext")):
            assert not any(t.startswith("extender.localcluster") for t in targets), f"{name} imports localcluster"


def test_transport_adapters_do_not_import_each_other():
    groups = ("extender.adapters.http", "extender.adapters.grpc", "extender.adapters.k8s")
    for name, targets in graph().items():
        own = next((g for g in groups if name.startswith(g)), None)
        if own is None:
            continue
        for target in targets:
            assert not any(target.startswith(g) for g in groups if g != own), f"{name} imports {target}"


LONG_CLASSES: dict[str, str] = {
    "extender.core.devices.ledger:DeviceLedger": "the DRA objects and the indexes between them (devices by pool and "
                                                 "node, claims by holder, pool and device) kept in step: capacity, "
                                                 "usage and demand all read the same indexes",
    "extender.core.cluster.state:ClusterState": "the cluster's nodes, pods and reservations with the per-node "
                                                "counters (used, reserved, taken, rails) every write moves in "
                                                "step; a reservation and its slots' counters change together",
    "extender.core.gangs.book:GangBook": "the executor of the lifecycle table: every transition (plan, steer, "
                                         "permit, leads first, bound, deadline, lost member or node) writes the "
                                         "gang's record, and only the book may (tests/core/gangs/test_records.py); "
                                         "what writes no record lives beside it (starvation, warm, state.keep_bound and claim_slot)",
}
"""``module:Class`` -> why a class past 300 lines is still one job. The sizes are a smell
detector, not a shape: a long class that is one job goes here, it is not cut by line count."""


def test_no_module_over_600_lines_and_no_class_over_300():
    for name, path in MODULES.items():
        rel = str(path.relative_to(ROOT.parent))
        if any(rel.startswith("extender/" + g[len("extender/"):]) for g in GENERATED):
            continue
        text = path.read_text()
        assert len(text.splitlines()) <= 600, f"{rel} has {len(text.splitlines())} lines"
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef):
                size = node.end_lineno - node.lineno + 1
                assert size <= 300 or f"{name}:{node.name}" in LONG_CLASSES, \
                    f"{rel}: class {node.name} has {size} lines: split it by job, or say in LONG_CLASSES why it is one"


MAPPED = {"extender": False, "extender/api": False, "extender/commands": True, "extender/core": True,
          "extender/adapters": True, "extender/service": True}
"""Packages whose ``__init__`` docstring maps every module and subpackage in it (True: and
their subpackages too). Not mapped: the generated ``api/v1/`` and the ``localcluster`` wing."""
MAP_ENTRY = re.compile(r"^[ \t]+(\w+)(\.py|/)[ \t]+\S", re.M)


def map_of(package: Path) -> set[str]:
    """The entries of a package's map: ``    name.py   what it holds`` or ``    name/   ...``."""
    doc = ast.get_docstring(ast.parse((package / "__init__.py").read_text()), clean=False) or ""
    return {name + kind for name, kind in MAP_ENTRY.findall(doc)}


def contents(package: Path) -> set[str]:
    return ({p.name for p in package.glob("*.py") if p.name != "__init__.py"}
            | {p.name + "/" for p in package.iterdir() if (p / "__init__.py").exists()})


def test_every_module_is_on_its_package_map():
    packages = [p.parent for top, deep in MAPPED.items()
                for p in ((ROOT.parent / top).rglob("__init__.py") if deep else [ROOT.parent / top / "__init__.py"])]
    assert len(packages) > len(MAPPED)
    for package in packages:
        rel = package.relative_to(ROOT.parent)
        assert map_of(package) == contents(package), \
            f"{rel}/__init__.py maps {sorted(map_of(package))}, the package holds {sorted(contents(package))}"


def test_the_map_reader_sees_a_missing_module(tmp_path):
    (tmp_path / "__init__.py").write_text('"""A map.\n\n    one.py    the first\n    sub/      a package\n"""\n')
    (tmp_path / "one.py").write_text("")
    (tmp_path / "two.py").write_text("")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "__init__.py").write_text("")
    assert map_of(tmp_path) == {"one.py", "sub/"}
    assert contents(tmp_path) == {"one.py", "two.py", "sub/"}
