"""The held-out split (`--holdout-per-class K`): a seeded validation split carved out of the train images.

The full ImageNet has no validation split; timm's imagenet-12k holds out 40 images of each class.
Here each class with more than K train images gives K of them, drawn with the job's seed and a
stream of the class's own (its WNID number), from its members in key order: so a class gives the
same images whatever the other classes hold, and K images are the first K of the same permutation
for any K, which makes the held-out sets of one seed nested (K=10 inside K=40, in every class that
gives 40). Names that are never images are not drawn (they stay in train). A class with K or fewer gives none (all stay in train), so a class of 20 gives 10 at
K=10 and none at K=40. The held-out images are planned and written as the `val`
split; they are never in train (audit-shards checks it: `holdout_overlap`), and the manifest
records what was asked (`config.holdout`) and how many moved (`splits.train.held_out`).
"""

from __future__ import annotations

import numpy as np

from imagenet_shards.pipeline.format.keys import junk_name
from imagenet_shards.pipeline.prepare.sources.table import MemberTable

HOLDOUT_SALT = 12  # seeds [seed, salt, WNID number]: a stream apart from the plan's and the subset's


def holdout_rows(table: MemberTable, rows: np.ndarray, *, per_class: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(rows kept in train, rows held out), both in the order given (key order), from the unique
    labelled train rows of `table`."""
    held = np.zeros(len(table), bool)
    for wnid, group in table.rows_by_class(rows):
        # a name that is never an image (`._*`, format.keys.junk_name) is never held out: it stays in train
        # (skipped there, as a subset leaves it undrawn); held out, the audit could not count it for its
        # class (its key names none) and found the class one short
        group = group[np.fromiter((not junk_name(table.filename(r)) for r in group), bool, len(group))]
        if len(group) > per_class:
            perm = np.random.default_rng([seed, HOLDOUT_SALT, int(wnid[1:])]).permutation(len(group))
            held[group[perm[:per_class]]] = True
    mask = held[rows]
    return rows[~mask], rows[mask]
