"""The adapters: translate at the door, nothing else. Transports never import each other
(``tests/test_layers.py``); what they share sits here at the root.

    kubeobjects/  the only place that knows label keys and object shapes: Kubernetes
                  objects -> the core's facts, label presets, the annotations railyard writes.
    quantity.py   Kubernetes resource quantities and annotation integers, read as the API
                  server reads them.
    echo.py       quoting what a client sent in the messages sent back, cut short.
    answers.py    the service's read-only answers as JSON (/debug/gangs, ``railyard plan``).
    topoview.py   the live topology view's document (JSON), from the service's snapshot.
    metrics.py    every Prometheus collector railyard exports (the Observer port).
    tls.py        certificate files re-read when they change, for the HTTPS and gRPC servers.
    slurm.py      railyard's topology tree as Slurm's topology.conf / topology.yaml.
    periodic.py   a call repeated on a daemon thread (the certificate reloader, the ticker).
    k8s/          the API server: list and watch into the service, Bindings, evictions, Events.
    http/         the kube-scheduler extender wire protocol over HTTP.
    grpc/         railyard's gRPC API (verbs, PlanGang, ExplainPod, WatchGangs).
"""
