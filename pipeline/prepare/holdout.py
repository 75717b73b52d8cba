"""The held-out split (`--holdout-per-class K`): a seeded validation split carved out of the train images.

The full ImageNet has no validation split; timm's imagenet-12k holds out 40 images of each class.
Here each class with more than K train images gives K of them, drawn with the job's seed and a
stream of the class's own (its WNID number), from its members in key order: so a class gives the
same images whatever the other classes hold, and K images are the first K of the same permutation
for any K, which makes the held-out sets of one seed nested (K=10 inside K=40, in every class that
gives 40). A class with K or fewer gives none (all stay in train), so a class of 20 gives 10 at
K=10 and none at K=40. The held-out images are planned and written as the `val`
split; they are never in train (audit-shards checks it: `holdout_overlap`), and the manifest
records what was asked (`config.holdout`) and how many moved (`splits.train.held_out`).
"""

from __future__ import annotations

import numpy as np

from imagenet_shards.pipeline.prepare.sources.table import MemberTable

HOLDOUT_SALT = 12  # seeds [seed, salt, WNID number]: a stream apart from the plan's and the subset's


def holdout_rows(table: MemberTable, rows: np.ndarray, *, per_class: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(rows kept in train, rows held out), both in the order given (key order), from the unique
    labelled train rows of `table`."""
    held = np.zeros(len(table), bool)
    for wnid, group in table.rows_by_class(rows):
        if len(group) > per_class:
            perm = np.random.default_rng([seed, HOLDOUT_SALT, int(wnid[1:])]).permutation(len(group))
            held[group[perm[:per_class]]] = True
    mask = held[rows]
    return rows[~mask], rows[mask]
