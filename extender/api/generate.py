"""Regenerate ``extender/api/v1/*_pb2*.py`` from ``proto/`` with the pinned grpcio-tools.

The proto's package (``extender.api.v1``) is its Python import path, so the generated modules
import each other as ``extender.api.v1...`` with no sys.path tricks. The output is committed:
a clean clone installs and runs without a code generator, and ``tests/adapters/grpc/test_generated.py``
fails when it drifts from the proto. The Dockerfile's build stage runs this too.

    python -m extender.api.generate [--out DIR]     # DIR defaults to the repository root
"""

from __future__ import annotations

import argparse
import sys
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROTO_ROOT = ROOT / "proto"
PROTOS = ("extender/api/v1/extender.proto",)
GRPCIO_TOOLS = "1.85.1"
"""Must equal the grpcio runtime pin in pyproject.toml: generated stubs check it at import."""


def generate(out: Path = ROOT) -> list[Path]:
    """Run protoc for every proto into ``out``; return the files written."""
    from grpc_tools import protoc  # only the generator needs grpcio-tools

    version = metadata.version("grpcio-tools")
    if version != GRPCIO_TOOLS:
        raise SystemExit(f"grpcio-tools {version} installed, {GRPCIO_TOOLS} pinned: "
                         f"pip install grpcio-tools=={GRPCIO_TOOLS}")
    args = ["grpc_tools.protoc", f"-I{PROTO_ROOT}", f"--python_out={out}", f"--pyi_out={out}",
            f"--grpc_python_out={out}", *PROTOS]
    if protoc.main(args) != 0:
        raise SystemExit(f"protoc failed: {' '.join(args)}")
    written = []
    for proto in PROTOS:
        stem = out / proto.removesuffix(".proto")
        written += [stem.with_name(stem.name + suffix) for suffix in ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py")]
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m extender.api.generate", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT, help="output root (default: the repository)")
    args = parser.parse_args(argv)
    for path in generate(args.out):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
