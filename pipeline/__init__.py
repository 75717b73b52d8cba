"""Offline stage: ILSVRC2012 archives -> validated, resized, shuffled WebDataset shards + manifests; audits."""

__version__ = "0.1.0"
