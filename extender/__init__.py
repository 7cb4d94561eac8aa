"""railyard: topology-aware gang placement for GPU training jobs, as a kube-scheduler extender.

A house of floors, top down; every import points down or sideways (``tests/test_layers.py``):

    __main__.py   ``python -m extender``: the command line.
    cli.py        the ``railyard`` command and its subcommands.
    commands/     one module per subcommand (serve, plan, explain, demo).
    app.py        the composition root: reads settings and flags, wires the ports.
    topotext.py   the text topology format of tests, benchmarks and ``cluster up``.
    localcluster/ the local real control plane (``railyard cluster``): a wing only commands use.
    adapters/     translate at the door: Kubernetes objects, HTTP, gRPC, the API server, metrics.
    service/      the live extender, one job a module sharing one context.
    core/         pure: placement, gangs, devices, lone pods, and the words they share.
    settings.py   frozen dataclasses with documented defaults; validate() lists every problem.
    api/          railyard's gRPC API: the generated protobuf code and its generator.
"""

__version__ = "0.1.0"
