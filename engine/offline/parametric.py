"""Parametric regression strategies of the offline library: few parameters, a stated functional
form, and behaviour beyond the training range that follows the form rather than falling flat.

These are what a scientist writes when the task must extrapolate or when a physical law is
welcome: a low-degree polynomial, a power law fitted in log-log space, and a search over
candidate functional forms judged on the far end of the training data (the part most like the
test inputs that lie beyond it), and a scaling law in the input the test extends past times a
smooth shape in the others (what dimensional analysis usually leaves). The form search is the small cousin of symbolic regression
(symbolic.py), which searches expressions instead of a fixed list of forms.

Imported by strategies.py once its helpers exist; not meant to be imported on its own.
"""
from __future__ import annotations

from .strategy import ONE_D, POLY_IMPORT, TABULAR, Strategy, Variant, make_strategy

_BOTH = (ONE_D, TABULAR)
_CURVE_FIT = "from scipy.optimize import curve_fit"

# Least squares of y on [1, columns]; the parametric strategies below share it.
LSTSQ = '''
def linear_fit(A, y):
    """Coefficients of y ~ [1, A] by least squares."""
    design = np.column_stack([np.ones(len(A)), A])
    coef, *_ = np.linalg.lstsq(design, y, rcond=None)
    return coef


def linear_predict(coef, A):
    return coef[0] + A @ coef[1:]
'''

# The far end of the training data: the HOLDOUT share of rows on the side the new inputs extend
# past (else the upper end of the feature most correlated with the target). Strategies that
# choose a functional form judge candidates there, the part most like inputs beyond the data.
FAR_END = '''
def far_end(X, y, X_new):
    """(core rows, far-end rows) of the training data."""
    lo, hi = X.min(axis=0), X.max(axis=0)
    span = np.where(hi > lo, hi - lo, 1.0)
    above, below = (X_new.max(axis=0) - hi) / span, (lo - X_new.min(axis=0)) / span
    if max(above.max(), below.max()) > 0:
        column = int(np.argmax(np.maximum(above, below)))
        upper = above[column] >= below[column]
    else:
        corr = [abs(np.corrcoef(X[:, j], y)[0, 1]) if X[:, j].std() > 0 else 0.0 for j in range(X.shape[1])]
        column, upper = int(np.nanargmax(corr)), True
    order = np.argsort(X[:, column] if upper else -X[:, column], kind="stable")
    n_far = max(2, int(round(HOLDOUT * len(X))))
    return order[:-n_far], order[-n_far:]
'''

PARAMETRIC: tuple[Strategy, ...] = (
    make_strategy(
        "low_poly", "Low-degree polynomial least squares", (ONE_D,),
        "parametric extrapolation smooth linear interpretable fast",
        {"degree": (2, 1, 3)},
        """
        A straight line, parabola or cubic through all samples by least squares. Few
        parameters, so it cannot chase noise, and beyond the data it continues the trend
        instead of oscillating like a high-degree polynomial or flattening like a tree.
        """,
        (POLY_IMPORT,),
        """
        DEGREE = $degree


        def fit_predict(X_train, y_train, X_new):
            poly = Polynomial.fit(X_train[:, 0], y_train, deg=min(DEGREE, len(y_train) - 1))
            return poly(X_new[:, 0])
        """,
    ),
    make_strategy(
        "power_law", "Power law fitted in log-log space", _BOTH,
        "parametric extrapolation physics interpretable fast",
        {"residuals": ("multiplicative", "additive")},
        """
        y = a * x1**b1 * x2**b2 ..., the form of most scaling laws, fitted as a straight line
        between log y and log x. "multiplicative" keeps that log-space fit (relative noise);
        "additive" refines it by nonlinear least squares on y itself (absolute noise). When an
        input or the target is not positive, a power law does not apply and a linear fit is
        used instead, saying so.
        """,
        (),
        LSTSQ,
        """
        def power(X, *coef):
            coef = np.asarray(coef)
            return np.exp(coef[0] + np.log(X) @ coef[1:])
        """,
        Variant("residuals", {
            "multiplicative": ((), """
            def refine(coef, X, y):
                return coef  # the log-space fit weights relative errors, as multiplicative noise does
            """),
            "additive": ((_CURVE_FIT,), """
            def refine(coef, X, y):
                # Additive noise: least squares on y itself, started from the log-space fit.
                try:
                    refined, _ = curve_fit(power, X, y, p0=coef, maxfev=20000)
                except RuntimeError:
                    print("power_law: nonlinear refinement did not converge; kept the log-space fit")
                    return coef
                return refined
            """),
        }),
        """
        def fit_predict(X_train, y_train, X_new):
            if (X_train <= 0).any() or (X_new <= 0).any() or (y_train <= 0).any():
                print("power_law: non-positive values, so no power law; fitted a linear model instead")
                return linear_predict(linear_fit(X_train, y_train), X_new)
            coef = refine(linear_fit(np.log(X_train), np.log(y_train)), X_train, y_train)
            exponents = ", ".join(f"{b:.4g}" for b in coef[1:])
            print(f"power_law: y = {np.exp(coef[0]):.5g} * prod(x ** [{exponents}])")
            return power(X_new, *coef)
        """,
    ),
    make_strategy(
        "form_search", "Functional-form search validated on the far end", _BOTH,
        "parametric extrapolation physics smooth interpretable",
        {"holdout": (0.2, 0.3, 0.15)},
        """
        Tries candidate laws (linear, quadratic, power law, exponential, logarithmic) and
        keeps the one that best predicts the far end of the training data from the rest:
        the side the new inputs extend past, else the upper end of the feature most
        correlated with the target. The winner is refitted on every row. Forms that need
        positive inputs or target are skipped where they do not apply.
        """,
        (),
        LSTSQ,
        """
        HOLDOUT = $holdout  # share of training rows, at the far end, that judges the forms
        # form -> (input transform, target transform, inverse target transform, needs x > 0, needs y > 0)
        FORMS = {
            "linear": (lambda X: X, lambda y: y, lambda t: t, False, False),
            "quadratic": (lambda X: np.column_stack([X, X ** 2]), lambda y: y, lambda t: t, False, False),
            "power_law": (np.log, np.log, np.exp, True, True),
            "exponential": (lambda X: X, np.log, np.exp, False, True),
            "logarithmic": (np.log, lambda y: y, lambda t: t, True, False),
        }


        def fit_form(form, X, y):
            \"\"\"A predictor of ``form`` fitted on (X, y), or None where the form does not apply.\"\"\"
            tx, ty, inverse, positive_x, positive_y = FORMS[form]
            if (positive_x and (X <= 0).any()) or (positive_y and (y <= 0).any()):
                return None
            coef = linear_fit(tx(X), ty(y))
            return lambda X_new: inverse(linear_predict(coef, tx(np.where(X_new > 0, X_new, np.nan))
                                                        if positive_x else tx(X_new)))

        """,
        FAR_END,
        """


        def fit_predict(X_train, y_train, X_new):
            core, far = far_end(X_train, y_train, X_new)
            errors = {}
            for form in FORMS:
                model = fit_form(form, X_train[core], y_train[core])
                guess = model(X_train[far]) if model is not None else None
                if guess is not None and np.isfinite(guess).all():
                    errors[form] = float(np.sqrt(np.mean((guess - y_train[far]) ** 2)))
            ranked = sorted(errors, key=errors.get)
            print("form_search: far-end rmse " + ", ".join(f"{f}={errors[f]:.4g}" for f in ranked))
            for form in ranked or ["linear"]:
                model = fit_form(form, X_train, y_train)
                prediction = model(X_new) if model is not None else None
                if prediction is not None and np.isfinite(prediction).all():
                    print(f"form_search: chose {form}")
                    return prediction
            return linear_predict(linear_fit(X_train, y_train), X_new)
        """,
    ),
    make_strategy(
        "separable_scaling", "Scaling law in the extrapolated input, a smooth fit in the others", (TABULAR,),
        "parametric extrapolation physics scaling interpretable smooth",
        {"degree": (4, 3, 6)},
        """
        The most common outcome of dimensional analysis: the target scales as a power of the
        input the new rows extend past, times a function of the inputs that stay inside the
        training range, y = c * x_k**b * f(others). Fitted by least squares in log space,
        log y = log c + b log x_k + an additive polynomial (degree $degree) of each other input,
        standardised: beyond the range the prediction follows the power law, while the other
        inputs are only interpolated, so their shape can be as free as the data supports. An
        input with no effect gets coefficients near zero. Without positive values the fit is
        additive in y (y = c + b x_k + the polynomial), saying so.
        """,
        ("from sklearn.preprocessing import StandardScaler",),
        LSTSQ,
        """
        DEGREE = $degree


        def extrapolated_input(X, y, X_new):
            \"\"\"The input the new rows lie beyond most often; else the one most correlated with y.\"\"\"
            outside = ((X_new < X.min(axis=0)) | (X_new > X.max(axis=0))).mean(axis=0)
            if outside.max() > 0:
                return int(np.argmax(outside))
            corr = [abs(np.corrcoef(X[:, j], y)[0, 1]) if X[:, j].std() > 0 else 0.0 for j in range(X.shape[1])]
            return int(np.nanargmax(corr))


        def shape_terms(Z):
            \"\"\"Each standardised input's powers 1..DEGREE: a smooth additive shape per input.\"\"\"
            return np.column_stack([Z ** d for d in range(1, DEGREE + 1)]) if Z.shape[1] else Z


        def fit_predict(X_train, y_train, X_new):
            k = extrapolated_input(X_train, y_train, X_new)
            others = [j for j in range(X_train.shape[1]) if j != k]
            scaler = StandardScaler().fit(X_train[:, others]) if others else None
            shape = lambda X: shape_terms(scaler.transform(X[:, others]) if others else X[:, []])
            x, x_new = X_train[:, k], X_new[:, k]
            if (x > 0).all() and (x_new > 0).all() and (y_train > 0).all():
                coef = linear_fit(np.column_stack([np.log(x), shape(X_train)]), np.log(y_train))
                print(f"separable_scaling: y = {np.exp(coef[0]):.5g} * x{k} ** {coef[1]:.4g} "
                      f"* exp(additive degree-{DEGREE} shape of the {len(others)} other input(s))")
                return np.exp(linear_predict(coef, np.column_stack([np.log(x_new), shape(X_new)])))
            print("separable_scaling: non-positive values, so no power law; fitted y = c + b x + shape instead")
            coef = linear_fit(np.column_stack([x, shape(X_train)]), y_train)
            return linear_predict(coef, np.column_stack([x_new, shape(X_new)]))
        """,
    ),
)
