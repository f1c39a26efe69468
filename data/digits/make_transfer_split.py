#!/usr/bin/env python3
"""Splits the bundled digits for the transfer-learning test (tests/cli/transfer_digits_test.sh,
models/digits_transfer/): a backbone learns digits 0-4, then a new head learns digits 5-9
from only a few examples each.

Each 8x8 digit is pasted at a random position on a blank CANVAS x CANVAS image (offsets
uniform in 0..CANVAS-8 on both axes). On the plain 8x8 digits transfer has nothing to offer:
they are close to linearly separable in pixel space, and a frozen *random* conv backbone
does as well for 5-9 as one trained on 0-4 (models/digits_transfer/README.md). Where the
digit is, however, varies, and a net has to learn stroke detectors that do not care: the
backbone learns them from the ~720 images of 0-4, a net trained from scratch on a few
examples of 5-9 cannot.

Reads data/digits/{train,test}_{images,labels}.npy (written by make_digits.py) and writes
data/digits/transfer/:

    base_train_{images,labels}.npy   digits 0-4 of the train split, each at BASE_PLACEMENTS
                                     positions (copy-major), labels 0..4
    base_test_{images,labels}.npy    digits 0-4 of the test split, one position each, labels 0..4
    few_train_{images,labels}.npy    PER_CLASS examples of each digit 5-9 from the train split,
                                     one position each, labels digit - 5 (0..4)
    few_test_{images,labels}.npy     digits 5-9 of the test split, each at TEST_PLACEMENTS
                                     positions (copy-major), labels digit - 5

Images are uint8 (N, 1, CANVAS, CANVAS) holding the original counts 0..16 (value * 16 of the
float files, exact), so the files stay small; the nets read them with
transform_param { scale: 0.0625 }. Labels are uint8. The few-shot examples are the first
PER_CLASS of each class in the train split's (already shuffled) order; positions come from
numpy's legacy RandomState(SEED), whose stream is frozen across numpy versions, so re-running
gives byte-identical files.

Usage:  /usr/bin/python3 data/digits/make_transfer_split.py   (numpy only)
"""

import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "transfer")
CANVAS = 12
PER_CLASS = 5
BASE_PLACEMENTS = 2
TEST_PLACEMENTS = 2
SEED = 7
BASE = [0, 1, 2, 3, 4]
NEW = [5, 6, 7, 8, 9]


def load(split):
    x = np.load(os.path.join(HERE, split + "_images.npy"))
    y = np.load(os.path.join(HERE, split + "_labels.npy"))
    counts = np.round(x * 16.0)
    assert np.array_equal(counts / 16.0, x), "images are not k/16: regenerate with make_digits.py"
    assert x.shape[1:] == (1, 8, 8), "expected (N, 1, 8, 8) digits, got %s" % (x.shape,)
    return counts.astype(np.uint8), y


def place(images, labels, copies, rs):
    """Each image pasted at `copies` random positions on a blank canvas; copy-major order."""
    n = len(images)
    out = np.zeros((n * copies, 1, CANVAS, CANVAS), np.uint8)
    for c in range(copies):
        for i in range(n):
            row, col = rs.randint(0, CANVAS - 8 + 1, size=2)
            out[c * n + i, 0, row:row + 8, col:col + 8] = images[i, 0]
    return out, np.tile(labels, copies)


def save(name, images, labels):
    for suffix, arr in (("_images.npy", images), ("_labels.npy", labels.astype(np.uint8))):
        path = os.path.join(OUT, name + suffix)
        with open(path, "wb") as f:
            np.lib.format.write_array(f, np.ascontiguousarray(arr), version=(1, 0), allow_pickle=False)
    print("%-10s %4d images %s, per class %s" % (name, len(labels), images.shape[1:],
                                                np.bincount(labels).tolist()))


def main():
    os.makedirs(OUT, exist_ok=True)
    rs = np.random.RandomState(SEED)
    train_x, train_y = load("train")
    test_x, test_y = load("test")

    base = np.isin(train_y, BASE)
    save("base_train", *place(train_x[base], train_y[base], BASE_PLACEMENTS, rs))
    base = np.isin(test_y, BASE)
    save("base_test", *place(test_x[base], test_y[base], 1, rs))

    few = np.concatenate([np.flatnonzero(train_y == c)[:PER_CLASS] for c in NEW])
    few.sort()  # keep the train split's shuffled order, classes interleaved
    save("few_train", *place(train_x[few], train_y[few] - NEW[0], 1, rs))
    new = np.isin(test_y, NEW)
    save("few_test", *place(test_x[new], test_y[new] - NEW[0], TEST_PLACEMENTS, rs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
