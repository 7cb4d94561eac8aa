"""The cluster as railyard holds it, shared by every concern of the core:

    topology.py   the static tree of one node-set generation (domains are paths).
    state.py      counters over the tree (free GPUs per node, node blocks) and reservations;
                  a cheap per-request ``View``.
    claims.py     the domains exclusive gangs hold to themselves, by path.
    pods.py       the pods railyard remembers between calls, indexed so no call scans them all.
"""
