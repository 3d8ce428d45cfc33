"""Library of real modelling strategies for the offline provider.

Without a reachable model provider the engine still has to *do science*: the offline
scientist picks a strategy and hyperparameters from this library, renders a complete
Python program, and the sandbox really runs it (fit, validate, predict). The strategies
differ genuinely in quality, so a search over them can make real progress. This module holds
the core strategies and the registry of all of them (the strategy itself: strategy.py).

Also here: a small model of first-draft mistakes (``inject_bug``) together with the
debugger that repairs them from the traceback alone (``fix_bug``). The parametric, symbolic and
classification strategies live in parametric.py, symbolic.py and classifiers.py, the analyzer's
program in analysis.py.

Pure Python, no Django and no third-party imports: the *rendered* programs use numpy,
scipy, pandas and scikit-learn (and, where a strategy declares it in ``requires``, another
package: pyoperon for symbolic regression, torch for the mixture of experts in neural.py), but
this module only writes their source.
"""
from __future__ import annotations

import ast
import difflib
import json
import random
import re
from dataclasses import dataclass

from .. import python_ast
from ..prompt_format import extract_strategy
from .classifiers import CLASSIFIERS
from .forecasting import FORECASTING
from .law_fit import LAW_FITS
from .neural import NEURAL
from .parametric import PARAMETRIC
from .pde import PDE_SOLVERS
from .strategy import (BUG_KINDS, FAMILIES, ONE_D, PIPE_IMPORT, POLY_IMPORT, QUIET_IMPORTS, SCALER_IMPORT, SKLEARN_FIT,
                       SKLEARN_FIT_QUIET, TABULAR, UNIQUE_SORTED, Strategy, Variant, make_strategy)
from .symbolic import SYMBOLIC

_BOTH = (ONE_D, TABULAR)
_SPLINE = "from scipy.interpolate import make_smoothing_spline"

_CORE: tuple[Strategy, ...] = (
    make_strategy(
        "mean_baseline", "Constant baseline", _BOTH, "baseline fast interpretable",
        {"statistic": ("mean", "median")},
        """
        Predicts one constant (the training mean or median) for every row. It is the
        floor any real model must beat: R^2 is about 0 and nothing is learned.
        """,
        ("from sklearn.dummy import DummyRegressor",),
        """
        STATISTIC = $statistic


        def make_model():
            return DummyRegressor(strategy=STATISTIC)
        """, SKLEARN_FIT,
    ),
    make_strategy(
        "global_poly", "Global polynomial least squares", (ONE_D,),
        "baseline smooth linear interpretable fast",
        {"degree": (9, 5, 15, 25)},
        """
        One polynomial over the whole input range, fitted by least squares. Cheap and
        interpretable, but a single smooth function cannot follow a jump: it overshoots
        and rings on both sides of it (Gibbs-like), and high degrees oscillate at the ends.
        """,
        (POLY_IMPORT,),
        """
        DEGREE = $degree


        def fit_predict(X_train, y_train, X_new):
            # Polynomial.fit maps x onto [-1, 1] internally, which keeps high degrees
            # numerically well conditioned.
            poly = Polynomial.fit(X_train[:, 0], y_train, deg=min(DEGREE, len(y_train) - 1))
            return poly(X_new[:, 0])
        """,
    ),
    make_strategy(
        "smoothing_spline", "Cubic smoothing spline", (ONE_D,),
        "smooth nonparametric interpretable fast",
        {"lam": (None, 1e-6, 1e-4, 1e-2)},
        """
        A penalised cubic smoothing spline (scipy.interpolate.make_smoothing_spline). With
        lam=None the roughness penalty is chosen by generalised cross-validation. Excellent
        on smooth parts; across a jump it can only bend steeply, so it smears the jump
        and wiggles next to it.
        """,
        (_SPLINE,),
        """
        LAM = $lam  # None: choose the penalty by generalised cross-validation
        """, UNIQUE_SORTED, """

        def fit_predict(X_train, y_train, X_new):
            xs, ys = unique_sorted(X_train[:, 0], y_train)
            spline = make_smoothing_spline(xs, ys, lam=LAM)
            return spline(X_new[:, 0])
        """,
    ),
    make_strategy(
        "piecewise_poly", "Discontinuity-aware piecewise fit", (ONE_D,),
        "discontinuity piecewise smooth interpretable fast",
        {"side_model": ("spline", "poly"), "degree": (10, 6, 14),
         "search_degree": (3, 1, 5), "min_side": (10, 5), "gap_rule": ("blend", "step")},
        """
        Locates the jump from the data, then fits each side separately. The jump is the
        split between neighbouring sorted samples that minimises the summed squared error
        of two low-degree polynomial fits (search_degree), one per side. Each side is then
        fitted on its own with a GCV smoothing spline (side_model="spline") or a polynomial
        of the given degree (side_model="poly"), so neither fit has to bridge the jump.
        Where inside the gap between the two samples that straddle the jump it really
        sits is unknown: gap_rule="blend" hands over linearly from the left fit to the right
        one across the gap (the least expected squared error if every position is equally
        likely); gap_rule="step" jumps at the midpoint of the gap.
        """,
        (POLY_IMPORT,),
        """
        SEARCH_DEGREE = $search_degree  # cheap per-side fit used while scanning for the jump
        MIN_SIDE = $min_side  # fewest samples allowed on either side of the jump
        GAP_RULE = $gap_rule
        """,
        Variant("side_model", {
            "spline": ((_SPLINE,), UNIQUE_SORTED + """

            def fit_side(x, y):
                # A GCV smoothing spline needs at least 5 distinct x values.
                if len(np.unique(x)) >= 5:
                    return make_smoothing_spline(*unique_sorted(x, y))
                return Polynomial.fit(x, y, deg=min(3, len(x) - 1))
            """.replace("\n            ", "\n")),
            "poly": ((), """
            DEGREE = $degree  # polynomial degree of each side's fit


            def fit_side(x, y):
                return Polynomial.fit(x, y, deg=min(DEGREE, len(x) - 1))
            """),
        }),
        """
        def poly_sse(x, y, degree):
            poly = Polynomial.fit(x, y, deg=min(degree, len(x) - 1))
            return float(np.sum((poly(x) - y) ** 2))


        def locate_jump(x, y):
            \"\"\"The two neighbouring samples that straddle the jump, and the two-sided fit error.\"\"\"
            order = np.argsort(x)
            xs, ys = x[order], y[order]
            best = (np.inf, xs[0], xs[-1])
            for i in range(MIN_SIDE, len(xs) - MIN_SIDE + 1):
                if xs[i] == xs[i - 1]:
                    continue  # no split possible between equal x values
                sse = poly_sse(xs[:i], ys[:i], SEARCH_DEGREE) + poly_sse(xs[i:], ys[i:], SEARCH_DEGREE)
                if sse < best[0]:
                    best = (sse, xs[i - 1], xs[i])
            sse, lo, hi = best
            return lo, hi, sse


        def fit_predict(X_train, y_train, X_new):
            x, x_new = X_train[:, 0], X_new[:, 0]
            lo, hi, sse = locate_jump(x, y_train)
            left = fit_side(x[x <= lo], y_train[x <= lo])
            right = fit_side(x[x >= hi], y_train[x >= hi])
            mid = 0.5 * (lo + hi)
            print(f"jump_location: {mid:.5f} (between {lo:.5f} and {hi:.5f})  "
                  f"jump_size: {float(right(mid) - left(mid)):.4f}  search_sse: {sse:.4g}")
            if GAP_RULE == "blend":
                weight = np.clip((x_new - lo) / (hi - lo), 0.0, 1.0)
            else:
                weight = (x_new > mid).astype(float)
            return (1.0 - weight) * left(x_new) + weight * right(x_new)
        """,
    ),
    make_strategy(
        "knn", "k-nearest neighbours (scaled features)", _BOTH,
        "nonparametric scaling fast",
        {"n_neighbors": (5, 3, 10, 20), "weights": ("distance", "uniform")},
        """
        Averages the targets of the k nearest training rows after standardising every
        feature, so that no feature dominates the distance just because of its units.
        Local, so it follows a jump, but it is noisy and flattens oscillations.
        """,
        ("from sklearn.neighbors import KNeighborsRegressor", PIPE_IMPORT, SCALER_IMPORT),
        """
        N_NEIGHBORS = $n_neighbors
        WEIGHTS = $weights


        def make_model():
            return make_pipeline(StandardScaler(), KNeighborsRegressor(n_neighbors=N_NEIGHBORS, weights=WEIGHTS))
        """, SKLEARN_FIT,
    ),
    make_strategy(
        "knn_unscaled", "k-nearest neighbours (raw features)", (TABULAR,),
        "nonparametric baseline fast",
        {"n_neighbors": (5, 3, 10, 20), "weights": ("distance", "uniform")},
        """
        k-nearest neighbours on the raw feature values. Features measured in large units
        (cholesterol in the hundreds) dominate the Euclidean distance and small-range
        features (sex coded 1/2) are effectively ignored, so this is usually worse than the
        scaled variant: a useful lesson about preprocessing.
        """,
        ("from sklearn.neighbors import KNeighborsRegressor",),
        """
        N_NEIGHBORS = $n_neighbors
        WEIGHTS = $weights


        def make_model():
            return KNeighborsRegressor(n_neighbors=N_NEIGHBORS, weights=WEIGHTS)
        """, SKLEARN_FIT,
    ),
    make_strategy(
        "random_forest", "Random forest", _BOTH, "trees ensemble nonparametric",
        {"n_estimators": (200, 500), "max_depth": (None, 6, 10),
         "min_samples_leaf": (1, 3, 5), "max_features": (1.0, 0.5, "sqrt")},
        """
        Bagged regression trees with random feature subsets. Axis-aligned splits represent
        jumps and interactions naturally and need no scaling; the price is piecewise-constant
        (staircase) predictions on smooth parts.
        """,
        ("from sklearn.ensemble import RandomForestRegressor",),
        """
        N_ESTIMATORS = $n_estimators
        MAX_DEPTH = $max_depth
        MIN_SAMPLES_LEAF = $min_samples_leaf
        MAX_FEATURES = $max_features


        def make_model():
            return RandomForestRegressor(
                n_estimators=N_ESTIMATORS, max_depth=MAX_DEPTH, min_samples_leaf=MIN_SAMPLES_LEAF,
                max_features=MAX_FEATURES, random_state=SEED, n_jobs=1)
        """, SKLEARN_FIT,
    ),
    make_strategy(
        "extra_trees", "Extremely randomised trees", _BOTH, "trees ensemble nonparametric",
        {"n_estimators": (200, 500), "max_depth": (None, 8),
         "min_samples_leaf": (1, 3, 5), "max_features": (1.0, 0.5)},
        """
        Like a random forest but split thresholds are drawn at random, which averages into
        smoother predictions between samples and lowers variance on small data sets.
        """,
        ("from sklearn.ensemble import ExtraTreesRegressor",),
        """
        N_ESTIMATORS = $n_estimators
        MAX_DEPTH = $max_depth
        MIN_SAMPLES_LEAF = $min_samples_leaf
        MAX_FEATURES = $max_features


        def make_model():
            return ExtraTreesRegressor(
                n_estimators=N_ESTIMATORS, max_depth=MAX_DEPTH, min_samples_leaf=MIN_SAMPLES_LEAF,
                max_features=MAX_FEATURES, random_state=SEED, n_jobs=1)
        """, SKLEARN_FIT,
    ),
    make_strategy(
        "gradient_boosting", "Gradient-boosted trees", _BOTH, "trees ensemble",
        {"n_estimators": (100, 300, 600), "learning_rate": (0.1, 0.05, 0.02),
         "max_depth": (3, 2, 4), "subsample": (1.0, 0.8)},
        """
        Shallow regression trees added one at a time, each fitted to the residuals of the
        ensemble so far (scikit-learn GradientBoostingRegressor). Strong on tabular data;
        the learning rate and number of trees trade bias against overfitting.
        """,
        ("from sklearn.ensemble import GradientBoostingRegressor",),
        """
        N_ESTIMATORS = $n_estimators
        LEARNING_RATE = $learning_rate
        MAX_DEPTH = $max_depth
        SUBSAMPLE = $subsample


        def make_model():
            return GradientBoostingRegressor(
                n_estimators=N_ESTIMATORS, learning_rate=LEARNING_RATE, max_depth=MAX_DEPTH,
                subsample=SUBSAMPLE, random_state=SEED)
        """, SKLEARN_FIT,
    ),
    make_strategy(
        "hist_gradient_boosting", "Histogram gradient boosting", (TABULAR,),
        "trees ensemble fast",
        {"max_iter": (100, 200, 400), "learning_rate": (0.1, 0.05),
         "max_leaf_nodes": (15, 31, 7), "l2_regularization": (0.0, 1.0)},
        """
        Gradient boosting on binned features (scikit-learn HistGradientBoostingRegressor):
        fast, handles feature scales by construction, with leaf-count and L2 controls
        against overfitting small data.
        """,
        ("from sklearn.ensemble import HistGradientBoostingRegressor",),
        """
        MAX_ITER = $max_iter
        LEARNING_RATE = $learning_rate
        MAX_LEAF_NODES = $max_leaf_nodes
        L2_REGULARIZATION = $l2_regularization


        def make_model():
            return HistGradientBoostingRegressor(
                max_iter=MAX_ITER, learning_rate=LEARNING_RATE, max_leaf_nodes=MAX_LEAF_NODES,
                l2_regularization=L2_REGULARIZATION, random_state=SEED)
        """, SKLEARN_FIT,
    ),
    make_strategy(
        "svr", "Support vector regression (RBF kernel)", _BOTH,
        "kernel scaling regularised smooth",
        {"C": (10.0, 1.0, 100.0), "epsilon": (0.05, 0.1, 0.01), "gamma": ("scale", 10.0, 0.1)},
        """
        Epsilon-insensitive regression with a Gaussian (RBF) kernel. Features and target are
        standardised first: the kernel width and C only mean something on a common scale.
        Smooth by construction, so it blurs jumps.
        """,
        ("from sklearn.compose import TransformedTargetRegressor", PIPE_IMPORT, SCALER_IMPORT,
         "from sklearn.svm import SVR"),
        """
        C = $C
        EPSILON = $epsilon
        GAMMA = $gamma


        def make_model():
            svr = make_pipeline(StandardScaler(), SVR(C=C, epsilon=EPSILON, gamma=GAMMA))
            return TransformedTargetRegressor(regressor=svr, transformer=StandardScaler())
        """, SKLEARN_FIT,
    ),
    make_strategy(
        "mlp", "Multilayer perceptron", _BOTH, "neural smooth scaling",
        {"hidden_layer_sizes": ((64, 64), (32,), (64, 64, 64)),
         "activation": ("tanh", "relu"), "solver": ("lbfgs", "adam"),
         "learning_rate_init": (0.001, 0.01), "alpha": (0.01, 0.0001, 1.0),
         "max_iter": (500, 2000)},
        """
        A fully connected network (scikit-learn MLPRegressor) on standardised inputs and
        target. lbfgs converges well on small data; adam uses learning_rate_init. tanh gives
        smooth fits (it struggles with a jump), relu gives piecewise-linear ones; alpha is
        the L2 penalty that keeps small data sets from being memorised.
        """,
        ("from sklearn.compose import TransformedTargetRegressor",
         "from sklearn.neural_network import MLPRegressor", PIPE_IMPORT, SCALER_IMPORT) + QUIET_IMPORTS,
        """
        HIDDEN_LAYER_SIZES = $hidden_layer_sizes
        ACTIVATION = $activation
        SOLVER = $solver
        LEARNING_RATE_INIT = $learning_rate_init
        ALPHA = $alpha
        MAX_ITER = $max_iter


        def make_model():
            net = MLPRegressor(
                hidden_layer_sizes=tuple(HIDDEN_LAYER_SIZES), activation=ACTIVATION, solver=SOLVER,
                learning_rate_init=LEARNING_RATE_INIT, alpha=ALPHA, max_iter=MAX_ITER,
                random_state=SEED)
            return TransformedTargetRegressor(regressor=make_pipeline(StandardScaler(), net),
                                              transformer=StandardScaler())
        """, SKLEARN_FIT_QUIET,
    ),
    make_strategy(
        "ridge", "Ridge regression (scaled features)", (TABULAR,),
        "linear regularised scaling interpretable fast baseline parametric extrapolation",
        {"alpha": (1.0, 0.1, 10.0, 100.0)},
        """
        Linear least squares with an L2 penalty on standardised features. A strong,
        interpretable baseline for small noisy data; scaling makes the penalty treat all
        coefficients alike.
        """,
        ("from sklearn.linear_model import Ridge", PIPE_IMPORT, SCALER_IMPORT),
        """
        ALPHA = $alpha


        def make_model():
            return make_pipeline(StandardScaler(), Ridge(alpha=ALPHA))
        """, SKLEARN_FIT,
    ),
    make_strategy(
        "lasso", "Lasso regression (scaled features)", (TABULAR,),
        "linear regularised scaling interpretable fast parametric extrapolation",
        {"alpha": (0.5, 0.1, 2.0, 5.0)},
        """
        Linear least squares with an L1 penalty on standardised features: drives the
        coefficients of redundant, correlated features exactly to zero.
        """,
        ("from sklearn.linear_model import Lasso", PIPE_IMPORT, SCALER_IMPORT) + QUIET_IMPORTS,
        """
        ALPHA = $alpha


        def make_model():
            return make_pipeline(StandardScaler(), Lasso(alpha=ALPHA, max_iter=50000))
        """, SKLEARN_FIT_QUIET,
    ),
    make_strategy(
        "poly_ridge", "Polynomial features + ridge", (TABULAR,),
        "linear regularised scaling",
        {"degree": (2, 3), "alpha": (10.0, 1.0, 100.0)},
        """
        Adds all pairwise (or cubic) products of the standardised features and fits a ridge
        model on them: captures interactions, with the penalty doing the model selection.
        """,
        ("from sklearn.linear_model import Ridge", PIPE_IMPORT,
         "from sklearn.preprocessing import PolynomialFeatures", SCALER_IMPORT),
        """
        DEGREE = $degree
        ALPHA = $alpha


        def make_model():
            return make_pipeline(StandardScaler(), PolynomialFeatures(degree=DEGREE, include_bias=False),
                                 StandardScaler(), Ridge(alpha=ALPHA))
        """, SKLEARN_FIT,
    ),
    make_strategy(
        "stacking_ensemble", "Stacked / averaged ensemble", (TABULAR,),
        "ensemble linear trees scaling",
        {"combiner": ("average", "stack"), "forest_leaf": (3, 1, 5)},
        """
        Combines three different learners (scaled ridge, a random forest and scaled
        k-nearest neighbours), whose errors are only partly correlated. "stack" learns the
        combination weights with a ridge model on 5-fold out-of-fold predictions; "average"
        takes the plain mean.
        """,
        ("from sklearn.ensemble import RandomForestRegressor",
         "from sklearn.linear_model import Ridge",
         "from sklearn.neighbors import KNeighborsRegressor", PIPE_IMPORT, SCALER_IMPORT),
        """
        FOREST_LEAF = $forest_leaf  # min_samples_leaf of the forest member


        def ensemble_members():
            return [
                ("ridge", make_pipeline(StandardScaler(), Ridge(alpha=1.0))),
                ("forest", RandomForestRegressor(n_estimators=150, min_samples_leaf=FOREST_LEAF,
                                                 random_state=SEED, n_jobs=1)),
                ("knn", make_pipeline(StandardScaler(), KNeighborsRegressor(n_neighbors=15))),
            ]
        """,
        Variant("combiner", {
            "stack": (("from sklearn.ensemble import StackingRegressor",
                       "from sklearn.linear_model import RidgeCV",
                       "from sklearn.model_selection import KFold"), """
            def make_model():
                folds = KFold(n_splits=5, shuffle=True, random_state=SEED)
                return StackingRegressor(ensemble_members(), cv=folds, n_jobs=1,
                                         final_estimator=RidgeCV(alphas=np.logspace(-3, 3, 13)))
            """),
            "average": (("from sklearn.ensemble import VotingRegressor",), """
            def make_model():
                return VotingRegressor(ensemble_members(), n_jobs=1)
            """),
        }),
        SKLEARN_FIT,
    ),
)

# The parametric and classification strategies build on the helpers above, so they are imported
# here, once those exist (engine/offline/__init__.py always imports this module first).

STRATEGIES: tuple[Strategy, ...] = _CORE + PARAMETRIC + SYMBOLIC + NEURAL + CLASSIFIERS + FORECASTING + LAW_FITS + PDE_SOLVERS
_BY_KEY = {s.key: s for s in STRATEGIES}
assert len(_BY_KEY) == len(STRATEGIES), "duplicate strategy keys"


def strategies_for(family: str) -> list[Strategy]:
    """Strategies that apply to ``family``, in library order."""
    if family not in FAMILIES:
        raise ValueError(f"unknown problem family {family!r}; expected one of {FAMILIES}")
    return [s for s in STRATEGIES if family in s.families]


def get_strategy(key: str) -> Strategy:
    return _BY_KEY[key]


def parse_strategy_header(code: str) -> tuple[str, dict] | None:
    """(key, params) from a rendered program's first line (``# strategy: ...``), or None."""
    first = code.split("\n", 1)[0]
    return extract_strategy(first) if first.startswith("#") else None


# --------------------------------------------------------------------------------------
# First-draft mistakes and their repair
# --------------------------------------------------------------------------------------
_IMPORT_LINE = re.compile(r"^(?:import (\w+)(?: as (\w+))?|from [\w.]+ import (\w+)(?: as (\w+))?)\s*$")


def _import_binding(line: str) -> str | None:
    """The name a single-name top-level import line binds, or None for other lines."""
    match = _IMPORT_LINE.match(line)
    if not match or line.startswith("from __future__"):
        return None
    plain, plain_alias, member, member_alias = match.groups()
    return plain_alias or plain or member_alias or member


def _uses_name(code: str, name: str) -> bool:
    return re.search(rf"(?<![\w.]){re.escape(name)}\b", code) is not None


def _module_constants(code: str) -> dict[str, object]:
    """Module-level ``NAME = <str or list of str>`` assignments: the program's column names."""
    try:
        tree = python_ast.parse(code)
    except SyntaxError:
        return {}
    constants: dict[str, object] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                value = ast.literal_eval(node.value)
            except (ValueError, SyntaxError, TypeError):
                continue
            if isinstance(value, str) or (isinstance(value, (list, tuple))
                                          and all(isinstance(v, str) for v in value)):
                constants[node.targets[0].id] = value
    return constants


def _inject_missing_import(code: str, rng: random.Random) -> str | None:
    lines = code.split("\n")
    # Only imports whose name the program really uses, so the mistake surfaces when run.
    candidates = [i for i, line in enumerate(lines)
                  if (name := _import_binding(line))
                  and _uses_name("\n".join(lines[:i] + lines[i + 1:]), name)]
    if not candidates:
        return None
    del lines[rng.choice(candidates)]
    return "\n".join(lines)


def _misspell(name: str, rng: random.Random) -> str:
    variants = {name.upper(), name.capitalize(), name + "s"}
    if len(name) > 3:
        for i in range(1, len(name)):
            variants.add(name[:i] + name[i + 1:])                          # dropped letter
            variants.add(name[:i - 1] + name[i] + name[i - 1] + name[i + 1:])  # swapped letters
    variants.discard(name)
    return rng.choice(sorted(variants))


_COLUMN_USE = re.compile(r"\b(train|test)\[(TARGET|ID_COLUMN)\]")


def _inject_misspelled_column(code: str, rng: random.Random) -> str | None:
    constants = _module_constants(code)
    sites = [m for m in _COLUMN_USE.finditer(code) if isinstance(constants.get(m.group(2)), str)]
    if not sites:
        return None
    site = rng.choice(sites)
    wrong = _misspell(constants[site.group(2)], rng)
    return code[:site.start()] + f"{site.group(1)}[{json.dumps(wrong)}]" + code[site.end():]


_FRAME_WITH_ID = re.compile(r"pd\.DataFrame\(\{\s*ID_COLUMN:\s*\w+,\s*")


def _inject_missing_id_column(code: str, rng: random.Random) -> str | None:
    match = _FRAME_WITH_ID.search(code)
    if not match:
        return None
    return code[:match.start()] + "pd.DataFrame({" + code[match.end():]


_FEATURE_MATRIX = re.compile(r"^(\s*X = .*\.to_numpy\(dtype=float\))$", re.M)


def _inject_shape_error(code: str, rng: random.Random) -> str | None:
    match = _FEATURE_MATRIX.search(code)
    if not match:
        return None
    flatten = rng.choice([".ravel()", ".flatten()", ".reshape(-1)"])
    return code[:match.end()] + flatten + code[match.end():]


_INJECTORS = {
    "missing_import": _inject_missing_import,
    "misspelled_column": _inject_misspelled_column,
    "missing_id_column": _inject_missing_id_column,
    "shape_error": _inject_shape_error,
}


def inject_bug(code: str, rng: random.Random, kind: str | None = None) -> tuple[str, str]:
    """Introduce one realistic first-draft mistake; returns (buggy_code, bug_kind).

    ``kind`` forces one of BUG_KINDS; otherwise ``rng`` picks among those that apply.
    Returns (code, "none") when no mistake can be introduced into ``code``.
    """
    if kind is not None and kind not in _INJECTORS:
        raise ValueError(f"unknown bug kind {kind!r}; expected one of {BUG_KINDS}")
    kinds = [kind] if kind else list(BUG_KINDS)
    rng.shuffle(kinds)
    for candidate in kinds:
        buggy = _INJECTORS[candidate](code, rng)
        if buggy is not None and buggy != code:
            return buggy, candidate
    return code, "none"


@dataclass(frozen=True)
class _Failure:
    exc_type: str   # unqualified exception class name
    message: str    # everything after "ExcType: ", possibly several lines
    lineno: int | None  # line in the program (deepest frame outside libraries)


_FRAME_LINE = re.compile(r'^\s*File "([^"]+)", line (\d+)')
_EXC_LINE = re.compile(r"^([A-Za-z_][\w.]*)(?::\s?(.*))?$")
_LIBRARY_PATH = re.compile(r"site-packages|dist-packages|/lib/python\d|^<")


def _parse_traceback(stderr: str) -> _Failure | None:
    """Exception type, message and program line of the last traceback in ``stderr``."""
    marker = "Traceback (most recent call last):"
    if marker not in stderr:
        return None
    block = stderr.rsplit(marker, 1)[1].split("\n")
    lineno = None
    for i, line in enumerate(block):
        frame = _FRAME_LINE.match(line)
        if frame and not _LIBRARY_PATH.search(frame.group(1)):
            lineno = int(frame.group(2))
        if line and not line[0].isspace():
            exc = _EXC_LINE.match(line)
            if not exc:
                return None
            message = "\n".join([exc.group(2) or ""] + block[i + 1:]).strip()
            return _Failure(exc.group(1).rsplit(".", 1)[-1], message, lineno)
    return None


def _known_imports() -> dict[str, str]:
    """Bound name -> import line for everything the library's programs import."""
    known = {"os": "import os", "time": "import time", "json": "import json",
             "math": "import math", "warnings": "import warnings",
             "np": "import numpy as np", "pd": "import pandas as pd"}
    for strategy in STRATEGIES:
        for line in strategy.all_imports():
            name = _import_binding(line)
            if name:
                known.setdefault(name, line)
    return known


def _fix_missing_import(code: str, failure: _Failure) -> str | None:
    match = re.search(r"name '(\w+)' is not defined", failure.message)
    line = _known_imports().get(match.group(1)) if match else None
    if line is None or line in code.split("\n"):
        return None  # unknown name, or already imported: not a missing-import mistake
    name = match.group(1)
    lines = code.split("\n")
    imports = [i for i, text in enumerate(lines) if _import_binding(text)]
    insert_at = imports[-1] + 1 if imports else 0
    # A name used at module level (os in the thread-limit loop) must be imported before it.
    try:
        for node in python_ast.parse(code).body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom)):
                continue
            if any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(node)):
                insert_at = min(insert_at, node.lineno - 1)
                break
    except SyntaxError:
        pass
    lines.insert(insert_at, line)
    return "\n".join(lines)


def _missing_keys(message: str) -> list[str]:
    """Column names from a pandas KeyError message ('y', "['id'] not in index", ...)."""
    first = message.split("\n", 1)[0].strip()
    try:
        value = ast.literal_eval(first)
    except (ValueError, SyntaxError):
        value = first
    text = str(value)
    quoted = re.findall(r"'([^']*)'", text)
    if quoted and ("not in index" in text or "None of" in text):
        return quoted
    return [text]


def _closest(name: str, candidates: list[str]) -> str | None:
    for candidate in candidates:
        if candidate.lower() == name.lower():
            return candidate
    close = difflib.get_close_matches(name, candidates, n=1, cutoff=0.6)
    return close[0] if close else None


def _fix_key_error(code: str, failure: _Failure) -> str | None:
    keys = _missing_keys(failure.message)
    lines = code.split("\n")
    if failure.lineno is None or not 1 <= failure.lineno <= len(lines):
        return None
    failing = lines[failure.lineno - 1]
    constants = _module_constants(code)
    # Which constant holds each declared column name, for restoring the symbolic reference.
    owner = {v: k for k, v in constants.items() if isinstance(v, str)}
    columns = sorted({v for v in constants.values() if isinstance(v, str)}
                     | {c for v in constants.values() if isinstance(v, (list, tuple)) for c in v})
    columns = [c for c in columns if "/" not in c and "." not in c]  # not file paths

    # Misspelled column: the failing line spells a name that is not a declared column.
    for key in keys:
        literal = re.compile(r"""(["'])%s\1""" % re.escape(key))
        if key not in columns and literal.search(failing):
            right = _closest(key, [c for c in columns if c != key])
            if right is None:
                return None
            replacement = owner.get(right, repr(right))
            lines[failure.lineno - 1] = literal.sub(lambda _: replacement, failing)
            return "\n".join(lines)

    # Missing id column: the predictions frame was built without the id column.
    id_const = next((owner[k] for k in keys if k in owner), None)
    if id_const is None or len(keys) != 1:
        return None
    id_var = re.search(rf"^\s*(\w+)\s*=\s*\w+\[{id_const}\]", code, re.M)
    frame = re.search(r"pd\.DataFrame\(\{([^{}]*)\}", code)
    # Only a frame that lacks the column is this mistake; a column missing from the data is not.
    if not id_var or not frame or re.search(rf"(?<!\w){id_const}\s*:", frame.group(1)):
        return None
    return code[:frame.start(1)] + f"{id_const}: {id_var.group(1)}, " + code[frame.start(1):]


_ONE_D_SYMPTOMS = ("Expected 2D array", "Expected a 2-dimensional", "array is 1-dimensional",
                   "tuple index out of range")
_FLATTENED = re.compile(r"^(\s*(\w+)\s*=.*?)\.(?:ravel\(\)|flatten\(\)|reshape\(-1\))\s*$", re.M)


def _fix_shape_error(code: str, failure: _Failure) -> str | None:
    if not any(symptom in failure.message for symptom in _ONE_D_SYMPTOMS):
        return None
    lines = code.split("\n")
    failing = lines[failure.lineno - 1] if failure.lineno and failure.lineno <= len(lines) else ""
    if failure.exc_type == "IndexError" and "tuple index" in failure.message and ".shape[" not in failing:
        return None  # an unrelated tuple index error
    flattened = list(_FLATTENED.finditer(code))
    # Prefer the array named on the failing line; otherwise any flattened feature matrix.
    suspects = ([m for m in flattened if re.search(rf"\b{m.group(2)}\b", failing)]
                or [m for m in flattened if m.group(2).startswith("X")])
    if not suspects:
        return None
    match = suspects[0]
    return code[:match.start()] + match.group(1) + code[match.end():]


_FIXERS = {
    "NameError": _fix_missing_import,
    "KeyError": _fix_key_error,
    "ValueError": _fix_shape_error,
    "IndexError": _fix_shape_error,
}


def fix_bug(code: str, stderr: str) -> str | None:
    """Repair ``code`` from its traceback alone; None when the error is not understood."""
    failure = _parse_traceback(stderr)
    if failure is None or failure.exc_type not in _FIXERS:
        return None
    fixed = _FIXERS[failure.exc_type](code, failure)
    return fixed if fixed is not None and fixed != code else None
