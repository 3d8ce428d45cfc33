"""Generate the wine-cultivar task data (provenance script; deterministic).

Source: scikit-learn's bundled copy of the UCI "Wine" data (Forina et al., PARVUS, Institute of
Pharmaceutical and Food Analysis and Technologies, Genoa, 1988; UCI Machine Learning
Repository): 178 wines from one region of Italy, 13 chemical measurements each, and the
cultivar (grape variety) each wine was made from. It ships inside scikit-learn
(``sklearn.datasets.load_wine``), so no download is needed.

Labels: the cultivars are numbered 1, 2, 3 as in the original UCI file (scikit-learn numbers
them 0, 1, 2). Column names are scikit-learn's, with 'od280/od315_of_diluted_wines' shortened
to 'od280_od315' so that every name is a plain identifier.

Split: a fixed stratified random split, 40 % of the wines (72) held out for testing, so each
cultivar is represented in both sets in its overall proportion.

Usage: python make_data.py [OUTPUT_DIR]   (default: the folder containing this script)
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.datasets import load_wine
from sklearn.model_selection import train_test_split

SEED = 20240613
TEST_FRACTION = 0.4
TARGET = "cultivar"


def load_frame() -> pd.DataFrame:
    frame = load_wine(as_frame=True).frame
    frame = frame.rename(columns={"od280/od315_of_diluted_wines": "od280_od315", "target": TARGET})
    frame[TARGET] = frame[TARGET].astype(int) + 1  # UCI numbering
    return frame


def write(out_dir: Path) -> None:
    frame = load_frame()
    features = [c for c in frame.columns if c != TARGET]
    train_idx, test_idx = train_test_split(np.arange(len(frame)), test_size=TEST_FRACTION,
                                           stratify=frame[TARGET], random_state=SEED)
    train = frame.iloc[train_idx].reset_index(drop=True)  # shuffled: the source file is sorted by cultivar
    test = frame.iloc[test_idx].reset_index(drop=True)
    ids = np.arange(len(test))

    (out_dir / "data").mkdir(parents=True, exist_ok=True)
    (out_dir / "heldout").mkdir(parents=True, exist_ok=True)
    fmt = "%.10g"  # fixed formatting so reruns are byte-identical
    train[features + [TARGET]].to_csv(out_dir / "data" / "train.csv", index=False, float_format=fmt)
    test_features = test[features].copy()
    test_features.insert(0, "id", ids)
    test_features.to_csv(out_dir / "data" / "test_features.csv", index=False, float_format=fmt)
    pd.DataFrame({"id": ids, TARGET: test[TARGET]}).to_csv(
        out_dir / "heldout" / "test_targets.csv", index=False)


if __name__ == "__main__":
    write(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent)
