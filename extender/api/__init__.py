"""railyard's gRPC API.

    v1/           code generated from ``proto/extender/api/v1/extender.proto``.
    generate.py   the generator (``scripts/gen-proto``).

Quarantined (STYLE.md habit 14): only ``extender.adapters.grpc`` and the ``explain`` command
import it, never ``core/`` or ``service/``. Regenerate with ``python -m extender.api.generate``.
"""
