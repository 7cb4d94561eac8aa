"""railyard: topology-aware gang placement for GPU training jobs, as a kube-scheduler extender."""

__version__ = "0.1.0"
