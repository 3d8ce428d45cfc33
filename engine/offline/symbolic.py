"""Symbolic regression in the offline library: a search over closed-form expressions, for tasks
that ask for a law, welcome physics or must extrapolate.

The program searches expressions with pyoperon (Operon's C++ genetic programming with local
optimisation of constants; pinned in requirements.txt). The search runs on the core of the
training data and returns a Pareto front of accuracy against expression length. The expression
that best predicts the far end (the rows most like inputs beyond the data, as in form_search)
wins, or rather the shortest one within a standard error of it, so that a longer expression
winning by noise does not; its constants are refitted on every row in float64 by least squares
and the formula is printed. "log" searches log y against log x, where a power law is a sum and
most scaling laws are short. A task that allows only numpy, scipy, pandas and scikit-learn rules
it out (``Strategy.requires``).

pyoperon 0.6.2 quirks the program works around: the target must be float32 (its least-squares
scaling is float32-only) and inputs float64 (float32 inputs of 128 rows or more are evaluated
wrongly); the program evaluates expressions itself in float64, after checking on the training
rows that it reads each one as Operon does.

Imported by strategies.py once its helpers exist; not meant to be imported on its own.
"""
from __future__ import annotations

from .parametric import FAR_END, LSTSQ
from .strategy import ONE_D, TABULAR, Strategy, make_strategy

SYMBOLIC: tuple[Strategy, ...] = (
    make_strategy(
        "symbolic_regression", "Symbolic regression (closed-form expression search)", (ONE_D, TABULAR),
        "parametric extrapolation physics symbolic interpretable",
        {"max_length": (25, 15, 35), "target_space": ("linear", "log")},
        """
        Searches closed-form expressions of the inputs (+, -, *, /, square, sqrt, exp, log,
        sin, cos and fitted constants) by genetic programming with pyoperon, on all but the
        far end of the training data; of the accuracy-versus-length Pareto front it keeps the
        expression that best predicts the far end, refits its constants on every row and
        prints it. max_length bounds the expression's size; target_space="log" searches
        log y against log x (positive data only), where power laws are sums.
        """,
        ("import re", "from pyoperon.sklearn import SymbolicRegressor", "from scipy.optimize import least_squares"),
        LSTSQ,
        FAR_END,
        """
        MAX_LENGTH = $max_length  # most nodes an expression may have
        TARGET_SPACE = $target_space  # "log": search log y against log x
        HOLDOUT = 0.2  # share of training rows, at the far end, that picks the expression
        SEARCH_SECONDS = 20  # wall-clock cap of one search
        SYMBOLS = "add,sub,mul,div,constant,variable,square,sqrt,exp,log,sin,cos"
        FUNCTIONS = {"sqrt": np.sqrt, "exp": np.exp, "log": np.log, "sin": np.sin, "cos": np.cos}
        # A constant in Operon's infix output: negative ones come in parentheses.
        CONSTANT = re.compile(r"\\((-\\d+\\.\\d+)\\)|(?<![\\w.])(\\d+\\.\\d+)")


        def search_expressions(X, t):
            \"\"\"The Pareto front (accuracy against length) of expressions for t over X: (formula in
            x0, x1, ..., its values on X as Operon computes them, its length in nodes).\"\"\"
            model = SymbolicRegressor(allowed_symbols=SYMBOLS, objectives=["r2", "length"], max_length=MAX_LENGTH,
                                      optimizer_iterations=5, generations=1000, max_evaluations=200_000,
                                      max_time=SEARCH_SECONDS, n_threads=1, random_state=SEED)
            model.fit(X, t.astype(np.float32))  # pyoperon 0.6.2 scales its models in float32 only
            names = [f"x{j}" for j in range(X.shape[1])]
            return [(model.get_model_string(s["tree"], 12, names), model.evaluate_model(s["tree"], X), s["length"])
                    for s in model.pareto_front_]


        def as_function(formula):
            \"\"\"(f(c, X), c0): the formula with its constants as parameters, evaluated in float64.\"\"\"
            constants = []

            def parameter(match):
                constants.append(float(match.group(1) or match.group(2)))
                return f"c[{len(constants) - 1}]"

            source = re.sub(r"\\bx(\\d+)\\b", r"X[:, \\1]", CONSTANT.sub(parameter, formula.replace("^", "**")))
            code = compile(source, "<expression>", "eval")

            def f(c, X):
                with np.errstate(all="ignore"):
                    value = eval(code, {"__builtins__": {}, **FUNCTIONS}, {"c": c, "X": X})
                return np.broadcast_to(np.asarray(value, dtype=float), (len(X),))

            return f, np.array(constants)


        def shown(formula, c):
            \"\"\"The formula with constants c, rounded for reading.\"\"\"
            values = iter(c)
            return CONSTANT.sub(lambda _: f"{next(values):.5g}", formula)


        def refit(f, c, X, t):
            \"\"\"Constants refitted by least squares on (X, t); c itself when that does not help.\"\"\"
            if len(c) == 0:
                return c
            before = float(np.sum((f(c, X) - t) ** 2))
            try:
                fit = least_squares(lambda p: f(p, X) - t, c, max_nfev=100 * (len(c) + 1))
            except ValueError:  # non-finite residuals at the start
                return c
            after = f(fit.x, X)
            return fit.x if np.isfinite(after).all() and float(np.sum((after - t) ** 2)) < before else c


        def one_standard_error(scored):
            \"\"\"(far-end mse, its standard error, length, formula) ranked: the shortest expression
            whose far-end error is within one standard error of the best one's first (a longer one
            that wins by less is fitting noise), then the rest by error.\"\"\"
            best = min(scored)
            close = sorted((s for s in scored if s[0] <= best[0] + best[1]), key=lambda s: (s[2], s[0]))
            return close + sorted(s for s in scored if s[0] > best[0] + best[1])


        def fit_predict(X_train, y_train, X_new):
            positive = (X_train > 0).all() and (X_new > 0).all() and (y_train > 0).all()
            log_space = TARGET_SPACE == "log" and positive
            if TARGET_SPACE == "log" and not positive:
                print("symbolic_regression: non-positive values, so the search runs on x and y themselves")
            to_x, to_t, from_t = (np.log, np.log, np.exp) if log_space else (np.asarray,) * 3
            X, t, X_out = to_x(X_train), to_t(y_train), to_x(X_new)
            core, far = far_end(X_train, y_train, X_new)
            tolerance = 1e-3 * (float(np.std(t[core])) + 1e-12)
            scored = []
            for formula, searched, length in search_expressions(X[core], t[core]):
                f, c = as_function(formula)
                if not np.allclose(f(c, X[core]), searched, rtol=1e-3, atol=tolerance, equal_nan=True):
                    continue  # not read as Operon evaluates it: never trust it
                squared = (from_t(f(c, X[far])) - y_train[far]) ** 2
                if np.isfinite(squared).all():
                    scored.append((float(squared.mean()), float(squared.std() / np.sqrt(len(far))), length, formula))
            ranked = one_standard_error(scored) if scored else []
            if ranked:
                print(f"symbolic_regression: {len(scored)} expressions on the Pareto front; far-end rmse "
                      f"{np.sqrt(min(scored)[0]):.4g} at best, {np.sqrt(ranked[0][0]):.4g} for the chosen one")
            for _, _, _, formula in ranked:
                f, c = as_function(formula)
                c = refit(f, c, X, t)
                prediction = from_t(f(c, X_out))
                if np.isfinite(prediction).all():
                    space, inputs = ("log y", "log x") if log_space else ("y", "x")
                    print(f"symbolic_regression: {space} = {shown(formula, c)}  ({inputs}0, {inputs}1, ...: "
                          "the feature columns in order; constants refitted on every row)")
                    return prediction
            print("symbolic_regression: no expression predicts finite values; fitted a linear model instead")
            return linear_predict(linear_fit(X_train, y_train), X_new)
        """,
        requires=("pyoperon",),
    ),
)
