"""GPUs published as DRA devices (``resource.k8s.io/v1``), counted once:

    facts.py    DeviceClasses, ResourceSlices, ResourceClaims and templates as facts, and the
                pure rules over them (which devices are GPUs, how many a request counts).
    ledger.py   those facts kept, and turned into the numbers the rest of the core works on:
                GPUs per node, GPUs in use, GPUs per pod.
"""
