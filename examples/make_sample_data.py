"""Regenerate the small sample datasets bundled in examples/data (needs scikit-learn).

The files are committed, so the demo runs without this script; it documents where they
come from and makes them reproducible byte for byte.

    python examples/make_sample_data.py
"""

from __future__ import annotations

import csv
import json
import os

import numpy as np

from etl.formats.idx import write_idx

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")


def digits() -> None:
    """sklearn digits (1,797 8x8 images, grey levels 0..16) as MNIST-style gzip IDX files."""
    from sklearn.datasets import load_digits  # noqa: PLC0415

    d = load_digits()
    images = d.images.astype(np.uint8)
    labels = d.target.astype(np.uint8)
    cut = 1500
    for split, sl in (("train", slice(0, cut)), ("test", slice(cut, None))):
        write_idx(os.path.join(HERE, f"digits-{split}-images-idx3-ubyte.gz"), images[sl])
        write_idx(os.path.join(HERE, f"digits-{split}-labels-idx1-ubyte.gz"), labels[sl])


def iris() -> None:
    """UCI iris as the classic CSV with species names."""
    from sklearn.datasets import load_iris  # noqa: PLC0415

    d = load_iris()
    names = ["Iris-setosa", "Iris-versicolor", "Iris-virginica"]
    with open(os.path.join(HERE, "iris.csv"), "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["sepal_length", "sepal_width", "petal_length", "petal_width", "species"])
        for row, target in zip(d.data, d.target, strict=True):
            w.writerow([f"{v:.1f}" for v in row] + [names[target]])


def sentences() -> None:
    """Deterministic token-id sequences (variable length, some empty) as JSON Lines."""
    rng = np.random.default_rng(7)
    with open(os.path.join(HERE, "sentences.jsonl"), "w") as fh:
        for i in range(500):
            n = int(rng.integers(0, 20))
            tokens = rng.integers(1, 5000, n).tolist()
            fh.write(json.dumps({"id": i, "length": n, "tokens": tokens}) + "\n")


if __name__ == "__main__":
    os.makedirs(HERE, exist_ok=True)
    digits()
    iris()
    sentences()
    print(f"wrote sample data to {HERE}")
