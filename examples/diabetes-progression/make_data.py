"""Generate the diabetes-progression task data (provenance script; deterministic).

Source: scikit-learn's bundled copy of the diabetes data of Efron, Hastie, Johnstone &
Tibshirani (2004), "Least Angle Regression", Annals of Statistics. It ships inside
scikit-learn, so no download is needed. We use the raw, unscaled values
(``scaled=False``) so that feature scaling is part of the modelling problem.

Split: a fixed random 80/20 split of the 442 patients (354 train / 88 test).

Usage: python make_data.py [OUTPUT_DIR]   (default: the folder containing this script)
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.datasets import load_diabetes

SEED = 20240611
TEST_FRACTION = 0.2
TARGET = "progression"


def load_frame() -> pd.DataFrame:
    bunch = load_diabetes(as_frame=True, scaled=False)
    return bunch.frame.rename(columns={"target": TARGET})


def write(out_dir: Path) -> None:
    frame = load_frame()
    features = [c for c in frame.columns if c != TARGET]
    rng = np.random.default_rng(SEED)
    order = rng.permutation(len(frame))
    n_test = int(round(TEST_FRACTION * len(frame)))
    test = frame.iloc[np.sort(order[:n_test])].reset_index(drop=True)
    train = frame.iloc[order[n_test:]].reset_index(drop=True)
    ids = np.arange(len(test))

    (out_dir / "data").mkdir(parents=True, exist_ok=True)
    (out_dir / "heldout").mkdir(parents=True, exist_ok=True)
    fmt = "%.10g"  # fixed formatting so reruns are byte-identical
    train[features + [TARGET]].to_csv(out_dir / "data" / "train.csv", index=False, float_format=fmt)
    test_features = test[features].copy()
    test_features.insert(0, "id", ids)
    test_features.to_csv(out_dir / "data" / "test_features.csv", index=False, float_format=fmt)
    pd.DataFrame({"id": ids, TARGET: test[TARGET]}).to_csv(
        out_dir / "heldout" / "test_targets.csv", index=False, float_format=fmt)


if __name__ == "__main__":
    write(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent)
