"""The prepare job's error: one actionable line, raised anywhere in `pipeline/prepare/` and turned
into exit 2 by the CLI. Its own module so that the steps that raise it (`finalize`, `split_checks`,
`run`, ...) import it from below them, never from each other."""

from __future__ import annotations


class PrepareError(Exception):
    """The job cannot run as asked; the message is one actionable line."""


def unknown_wnids_error(unknown: list[str], space: str) -> PrepareError:
    """A full release holding WNIDs outside its published label space `space` (run and onepass)."""
    return PrepareError(
        f"the sources look like a full ImageNet release, whose label space is {space}, but {len(unknown)} of "
        f"their classes {'is' if len(unknown) == 1 else 'are'} not in it: {', '.join(unknown[:5])}"
        f"{'…' if len(unknown) > 5 else ''}; pass --skip-unknown-wnids to leave their images out (listed in the "
        f"manifest as skipped), or --label-space present to label the sources' own WNIDs, sorted (labels then "
        f"differ from {space} models')")


def skip_with_space_error() -> PrepareError:
    return PrepareError("--skip-unknown-wnids applies to a full release's default label space; with --label-space, "
                        "images of other classes are left out already (and counted)")


__all__ = ["PrepareError", "skip_with_space_error", "unknown_wnids_error"]
