"""The API server, raw JSON in and out (no client model classes).

    errors.py       errors from the API server, in railyard's words.
    api.py          the doors: a synchronous client and an async one for bursts of writes.
    watch_cache.py  list and watch Nodes, Pods, group objects and the DRA kinds into the
                    service's cache sink, as facts.
    binder.py       the writes: Bindings and their marks, evictions and deletes, Events, and
                    clearing a ResourceClaim's leftover allocation.

Never imports the HTTP or gRPC adapters (tests/test_layers.py).
"""
