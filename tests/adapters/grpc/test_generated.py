"""The committed generated code is exactly what the pinned generator makes from the proto."""

from __future__ import annotations

from pathlib import Path

from extender.api import generate


def test_regenerating_yields_the_committed_files(tmp_path: Path) -> None:
    written = generate.generate(tmp_path)
    assert written
    for path in written:
        committed = generate.ROOT / path.relative_to(tmp_path)
        assert committed.exists(), f"{committed} is not committed: run scripts/gen-proto"
        assert path.read_bytes() == committed.read_bytes(), (
            f"{committed.relative_to(generate.ROOT)} differs from the proto: run scripts/gen-proto")


def test_the_service_offers_every_verb() -> None:
    from extender.api.v1 import extender_pb2

    methods = {m.name for m in extender_pb2.DESCRIPTOR.services_by_name["Extender"].methods}
    assert methods == {"Filter", "Prioritize", "Bind", "Preempt", "PlanGang", "ExplainPod", "WatchGangs"}


def test_generated_code_is_quarantined() -> None:
    """Only the gRPC adapter and ``railyard explain`` import extender.api (STYLE.md habit 14)."""
    from tests.test_layers import ROOT, imports

    allowed = {ROOT / "commands" / "explain.py", *(ROOT / "adapters" / "grpc").rglob("*.py"),
               *(ROOT / "api").rglob("*.py")}
    for path in ROOT.rglob("*.py"):
        if path not in allowed:
            assert not any(name.startswith("extender.api") for name in imports(path)), path
