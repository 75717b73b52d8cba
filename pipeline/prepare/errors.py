"""The prepare job's error: one actionable line, raised anywhere in `pipeline/prepare/` and turned
into exit 2 by the CLI. Its own module so that the steps that raise it (`finalize`, `split_checks`,
`run`, ...) import it from below them, never from each other."""

from __future__ import annotations


class PrepareError(Exception):
    """The job cannot run as asked; the message is one actionable line."""


__all__ = ["PrepareError"]
