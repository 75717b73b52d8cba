"""The job's label space resolved against the sources' classes, once they are indexed: the one
decision of which class list `.cls` indexes (docs/prepare.md, "The full ImageNet").

`--label-space` is parsed once, at the CLI (`format.label_spaces.label_space_option`); `Config`
carries the result (a `LabelSpace`, `PRESENT`, or None) and `resolve_label_space` turns it into the
space the plan labels by: `present` becomes the sources' sorted WNIDs, and without --label-space a
full release gets its published space (imagenet-22k), refusing WNIDs outside it unless asked.
"""

from __future__ import annotations

import dataclasses

from imagenet_shards.pipeline.format.label_spaces import (PRESENT, RELEASE_SPACE, is_full_release, label_space,
                                                          present_space)
from imagenet_shards.pipeline.prepare.config import Config
from imagenet_shards.pipeline.prepare.errors import PrepareError, skip_with_space_error, unknown_wnids_error


def resolve_label_space(config: Config, classes: list[str]) -> tuple[Config, list[str]]:
    """(config with its label space resolved, the class list labels index). No --label-space: the
    sources' sorted WNIDs (ImageNet-1k for the ILSVRC2012 archives: the config stays as it was, so
    the bytes do; also under --classes, which relabels, and for WNIDs outside every release), or
    for a full release (`is_full_release`) its published space, `imagenet-22k`: a WNID outside it
    is a PrepareError naming it, unless `skip_unknown_wnids` (its images are then listed as
    skipped); `present`: the sources' WNIDs, recorded. PrepareError if no class of the sources is
    in the space."""
    space = config.label_space
    if config.skip_unknown_wnids and space is not None:
        raise skip_with_space_error()
    if space is None:
        release = config.classes is None and is_full_release(classes)
        if config.skip_unknown_wnids and not release:
            raise PrepareError("--skip-unknown-wnids applies to a full release (fall11, winter21), but these sources' "
                               f"{len(classes)} classes are not one (e.g. {classes[0]}); leave it out")
        if not release:  # ILSVRC-like, a class subset (--classes relabels among the kept), WNIDs no release has
            return config, classes
        space = label_space(RELEASE_SPACE)
        unknown = sorted(set(classes) - set(space.wnids))
        if unknown and not config.skip_unknown_wnids:
            raise unknown_wnids_error(unknown, space.name)
    elif space == PRESENT:
        space = present_space(classes)
    if not set(classes) & set(space.wnids):
        raise PrepareError(f"none of the sources' {len(classes)} classes (e.g. {classes[0]}) is in the label space "
                           f"{space.name} ({space.num_classes} classes); is it the space you meant?")
    return dataclasses.replace(config, label_space=space), list(space.wnids)


__all__ = ["resolve_label_space"]
