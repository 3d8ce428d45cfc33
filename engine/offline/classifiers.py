"""Classification strategies of the offline library: programs that predict labels.

The shared frame (engine/offline/strategies.py) keeps the labels' own type while fitting, scores
accuracy and balanced accuracy on the hold-out, and writes predictions in the contract's type
(integers for an ``int`` contract, strings for ``str``), never floats for labels.

Imported by strategies.py once its helpers exist; not meant to be imported on its own.
"""
from __future__ import annotations

from .strategy import CLASSIFY, PIPE_IMPORT, SCALER_IMPORT, SKLEARN_FIT, Strategy, make_strategy

_ONLY = (CLASSIFY,)

CLASSIFIERS: tuple[Strategy, ...] = (
    make_strategy(
        "majority_baseline", "Majority-class baseline", _ONLY, "baseline fast interpretable classifier",
        {"statistic": ("most_frequent",)},
        """
        Predicts the most frequent training label for every row: the floor any classifier
        must beat (its balanced accuracy is 1 / number of classes).
        """,
        ("from sklearn.dummy import DummyClassifier",),
        """
        STATISTIC = $statistic


        def make_model():
            return DummyClassifier(strategy=STATISTIC)
        """, SKLEARN_FIT,
    ),
    make_strategy(
        "logistic_regression", "Logistic regression (scaled features)", _ONLY,
        "linear regularised scaling interpretable fast classifier parametric extrapolation",
        {"C": (1.0, 0.1, 10.0), "class_weight": (None, "balanced")},
        """
        A linear decision boundary on standardised features with an L2 penalty (1/C). Its
        class probabilities change smoothly and keep their direction beyond the training
        range, so it is the safe choice when test inputs lie outside it.
        """,
        ("from sklearn.linear_model import LogisticRegression", PIPE_IMPORT, SCALER_IMPORT),
        """
        C = $C
        CLASS_WEIGHT = $class_weight


        def make_model():
            return make_pipeline(StandardScaler(), LogisticRegression(C=C, class_weight=CLASS_WEIGHT, max_iter=5000))
        """, SKLEARN_FIT,
    ),
    make_strategy(
        "random_forest_classifier", "Random forest classifier", _ONLY, "trees ensemble nonparametric classifier",
        {"n_estimators": (300, 600), "max_depth": (None, 8), "min_samples_leaf": (1, 3),
         "class_weight": (None, "balanced")},
        """
        Bagged classification trees on random feature subsets: interactions and thresholds
        without scaling. Outside the training range it predicts whatever the edge leaves say.
        """,
        ("from sklearn.ensemble import RandomForestClassifier",),
        """
        N_ESTIMATORS = $n_estimators
        MAX_DEPTH = $max_depth
        MIN_SAMPLES_LEAF = $min_samples_leaf
        CLASS_WEIGHT = $class_weight


        def make_model():
            return RandomForestClassifier(
                n_estimators=N_ESTIMATORS, max_depth=MAX_DEPTH, min_samples_leaf=MIN_SAMPLES_LEAF,
                class_weight=CLASS_WEIGHT, random_state=SEED, n_jobs=1)
        """, SKLEARN_FIT,
    ),
    make_strategy(
        "gradient_boosting_classifier", "Histogram gradient-boosted classifier", _ONLY,
        "trees ensemble fast classifier",
        {"max_iter": (200, 400, 100), "learning_rate": (0.1, 0.05), "max_leaf_nodes": (15, 31, 7),
         "l2_regularization": (0.0, 1.0)},
        """
        Gradient boosting of shallow trees on binned features (HistGradientBoostingClassifier):
        strong on tabular data, scale-free, with leaf-count and L2 controls against overfitting.
        """,
        ("from sklearn.ensemble import HistGradientBoostingClassifier",),
        """
        MAX_ITER = $max_iter
        LEARNING_RATE = $learning_rate
        MAX_LEAF_NODES = $max_leaf_nodes
        L2_REGULARIZATION = $l2_regularization


        def make_model():
            return HistGradientBoostingClassifier(
                max_iter=MAX_ITER, learning_rate=LEARNING_RATE, max_leaf_nodes=MAX_LEAF_NODES,
                l2_regularization=L2_REGULARIZATION, random_state=SEED)
        """, SKLEARN_FIT,
    ),
    make_strategy(
        "knn_classifier", "k-nearest neighbours classifier (scaled features)", _ONLY,
        "nonparametric scaling fast classifier",
        {"n_neighbors": (7, 3, 15, 31), "weights": ("distance", "uniform")},
        """
        Majority vote of the k nearest training rows after standardising every feature.
        Local and assumption-free; noisy with few rows per class and blind beyond the data.
        """,
        ("from sklearn.neighbors import KNeighborsClassifier", PIPE_IMPORT, SCALER_IMPORT),
        """
        N_NEIGHBORS = $n_neighbors
        WEIGHTS = $weights


        def make_model():
            return make_pipeline(StandardScaler(), KNeighborsClassifier(n_neighbors=N_NEIGHBORS, weights=WEIGHTS))
        """, SKLEARN_FIT,
    ),
    make_strategy(
        "svc", "Support vector classifier (RBF kernel)", _ONLY, "kernel scaling regularised smooth classifier",
        {"C": (1.0, 10.0, 0.1), "gamma": ("scale", 0.1, 1.0)},
        """
        A maximum-margin boundary in a Gaussian-kernel feature space, on standardised
        features: smooth, flexible boundaries on small data sets.
        """,
        ("from sklearn.svm import SVC", PIPE_IMPORT, SCALER_IMPORT),
        """
        C = $C
        GAMMA = $gamma


        def make_model():
            return make_pipeline(StandardScaler(), SVC(C=C, gamma=GAMMA, random_state=SEED))
        """, SKLEARN_FIT,
    ),
)
