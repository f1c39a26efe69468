#!/usr/bin/env python3
"""Splits the bundled digits for the transfer-learning test (tests/cli/transfer_digits_test.sh,
models/digits_transfer/): a backbone learns digits 0-4, then a new head learns digits 5-9
from only a few examples each.

Reads data/digits/{train,test}_{images,labels}.npy (written by make_digits.py) and writes
data/digits/transfer/:

    base_train_{images,labels}.npy   digits 0-4 of the train split (all of them), labels 0..4
    base_test_{images,labels}.npy    digits 0-4 of the test split, labels 0..4
    few_train_{images,labels}.npy    PER_CLASS examples of each digit 5-9 from the train split,
                                     labels digit - 5 (0..4)
    few_test_{images,labels}.npy     digits 5-9 of the test split (all of them), labels digit - 5

Images are uint8 (N, 1, 8, 8) holding the original counts 0..16 (value * 16 of the float
files, exact), so the files stay small; the nets read them with transform_param { scale: 0.0625 },
which gives back the float files' values exactly. Labels are uint8. The few-shot examples are the
first PER_CLASS of each class in the train split's (already shuffled) order: deterministic,
and re-running gives byte-identical files.

Usage:  /usr/bin/python3 data/digits/make_transfer_split.py   (numpy only)
"""

import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "transfer")
PER_CLASS = 10
BASE = [0, 1, 2, 3, 4]
NEW = [5, 6, 7, 8, 9]


def load(split):
    x = np.load(os.path.join(HERE, split + "_images.npy"))
    y = np.load(os.path.join(HERE, split + "_labels.npy"))
    counts = np.round(x * 16.0)
    assert np.array_equal(counts / 16.0, x), "images are not k/16: regenerate with make_digits.py"
    return counts.astype(np.uint8), y


def save(name, images, labels):
    for suffix, arr in (("_images.npy", images), ("_labels.npy", labels.astype(np.uint8))):
        path = os.path.join(OUT, name + suffix)
        with open(path, "wb") as f:
            np.lib.format.write_array(f, np.ascontiguousarray(arr), version=(1, 0), allow_pickle=False)
    print("%-10s %4d images, per class %s" % (name, len(labels), np.bincount(labels).tolist()))


def main():
    os.makedirs(OUT, exist_ok=True)
    train_x, train_y = load("train")
    test_x, test_y = load("test")

    base = np.isin(train_y, BASE)
    save("base_train", train_x[base], train_y[base])
    base = np.isin(test_y, BASE)
    save("base_test", test_x[base], test_y[base])

    few = np.concatenate([np.flatnonzero(train_y == c)[:PER_CLASS] for c in NEW])
    few.sort()  # keep the train split's shuffled order, classes interleaved
    save("few_train", train_x[few], train_y[few] - NEW[0])
    new = np.isin(test_y, NEW)
    save("few_test", test_x[new], test_y[new] - NEW[0])
    return 0


if __name__ == "__main__":
    sys.exit(main())
