"""The HTTP face kube-scheduler talks to (k8s.io/kube-scheduler/extender/v1).

    wire.py       the wire protocol as TypedDicts, field names character for character.
    handler.py    what the verbs call and what they translate pods with (Protocols).
    verbs/        one module per verb: decode -> handler -> encode.
    server.py     aiohttp: the verbs, health, readiness, metrics, /debug/gangs; one except
                  ladder for errors.
    view.py       the live topology view on a port of its own: the page (static/) and
                  /topology.json, read-only.

Never imports the gRPC or k8s adapters (tests/test_layers.py).
"""
