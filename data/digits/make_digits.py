#!/usr/bin/env python3
"""Build the bundled 8x8 handwritten-digits data set for strata.

Loads the UCI "Optical Recognition of Handwritten Digits" 8x8 data (1,797
images, 10 classes) from the copy shipped inside scikit-learn
(sklearn.datasets.load_digits -- no download), makes a deterministic,
class-stratified 1,437 / 360 train/test split and writes four .npy files next
to this script:

    train_images.npy  float32 (1437, 1, 8, 8), values in [0, 1] (orig / 16)
    train_labels.npy  int32   (1437,)
    test_images.npy   float32 (360, 1, 8, 8)
    test_labels.npy   int32   (360,)

Split rule: for each class, the number of test images is its share of 360
(floor of n_c * 360 / 1797, the leftover slots going to the classes with the
largest fractional remainders, ties broken by lower class). Within each class
the images are permuted with numpy's legacy RandomState(SEED) (its stream is
frozen across numpy versions) and the first k go to test, the rest to train.
Each split is then shuffled with the same generator. Re-running produces
byte-identical files.

Usage:  /usr/bin/python3 data/digits/make_digits.py
        (needs: apt-get install python3-sklearn python3-numpy)
"""

import hashlib
import os
import sys

import numpy as np
from sklearn.datasets import load_digits

SEED = 20240601
N_TEST = 360
N_CLASSES = 10
OUT_DIR = os.path.dirname(os.path.abspath(__file__))


def stratified_test_counts(class_counts, n_test):
    total = int(class_counts.sum())
    exact = class_counts.astype(np.int64) * n_test
    base = exact // total
    remainder = exact - base * total
    left = n_test - int(base.sum())
    # Largest remainder first; ties broken by lower class index (stable sort).
    order = np.argsort(-remainder, kind="stable")
    base[order[:left]] += 1
    return base


def main():
    digits = load_digits()
    data = np.asarray(digits.data, dtype=np.float64)    # (1797, 64), 0..16
    target = np.asarray(digits.target, dtype=np.int64)  # (1797,)
    assert data.shape == (1797, 64), data.shape
    assert data.min() >= 0 and data.max() <= 16

    class_counts = np.bincount(target, minlength=N_CLASSES)
    test_counts = stratified_test_counts(class_counts, N_TEST)

    rng = np.random.RandomState(SEED)
    train_idx, test_idx = [], []
    for c in range(N_CLASSES):
        idx = np.flatnonzero(target == c)
        idx = idx[rng.permutation(idx.size)]
        k = int(test_counts[c])
        test_idx.append(idx[:k])
        train_idx.append(idx[k:])
    train_idx = np.concatenate(train_idx)
    test_idx = np.concatenate(test_idx)
    train_idx = train_idx[rng.permutation(train_idx.size)]
    test_idx = test_idx[rng.permutation(test_idx.size)]
    assert train_idx.size == 1797 - N_TEST and test_idx.size == N_TEST
    assert np.intersect1d(train_idx, test_idx).size == 0

    def images(idx):
        x = (data[idx] / 16.0).astype("<f4").reshape(-1, 1, 8, 8)
        return np.ascontiguousarray(x)

    def labels(idx):
        return np.ascontiguousarray(target[idx].astype("<i4"))

    outputs = {
        "train_images.npy": images(train_idx),
        "train_labels.npy": labels(train_idx),
        "test_images.npy": images(test_idx),
        "test_labels.npy": labels(test_idx),
    }
    for name, arr in outputs.items():
        path = os.path.join(OUT_DIR, name)
        with open(path, "wb") as f:
            np.lib.format.write_array(f, arr, version=(1, 0),
                                      allow_pickle=False)
        with open(path, "rb") as f:
            md5 = hashlib.md5(f.read()).hexdigest()
        print("wrote %-17s %-6s %-15s %7d bytes  md5 %s"
              % (name, arr.dtype.str, str(arr.shape), os.path.getsize(path),
                 md5))

    tr = np.bincount(outputs["train_labels.npy"], minlength=N_CLASSES)
    te = np.bincount(outputs["test_labels.npy"], minlength=N_CLASSES)
    print("class  train  test  total")
    for c in range(N_CLASSES):
        print("%5d  %5d  %4d  %5d" % (c, tr[c], te[c], tr[c] + te[c]))
    print("total  %5d  %4d  %5d" % (tr.sum(), te.sum(), tr.sum() + te.sum()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
