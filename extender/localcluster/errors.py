"""The one error type of the local cluster: its message is a single line a user can act on.

    ClusterError          bad input, bad state or a component that would not start
     +-- BuildError       (binaries.py) no Go, proxy unreachable, build failed
"""


class ClusterError(Exception):
    """Raised with a message meant to be printed as is; ``cluster up`` stops what it started."""
