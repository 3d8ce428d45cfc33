"""The law of the reaction-kinetics task, as code: consecutive first-order reactions A -> B -> C.

    dA/dt = -k1 A,    dB/dt = k1 A - k2 B,    dC/dt = k2 B

Each experiment (rows sharing `experiment`) starts at t_min = 0 from pure A at concentration A0
(mol/L), with no B and no C; `B` (mol/L) is what was measured. k1 and k2 are first-order rate
constants per minute, to be estimated; PARAMETERS gives the range each may take.

Integrate it, for example, with
    scipy.integrate.solve_ivp(lambda t, y: rhs(t, y, k1=k1, k2=k2), (T0, t_end), initial(row), t_eval=times)
and read the state named OBSERVED (index STATE.index(OBSERVED)).
"""

PARAMETERS = {"k1": (0.001, 10.0), "k2": (0.001, 10.0)}  # name -> (low, high), per minute

TIME = "t_min"              # the time column (minutes since the start of the experiment)
GROUP = "experiment"        # rows of one experiment share a start
STATE = ("A", "B", "C")     # the state vector, in order
OBSERVED = "B"              # the state that is measured (the target column)
T0 = 0.0                    # every experiment starts at t_min = 0


def initial(row):
    """The state at T0 for the experiment of ``row`` (a mapping with the column A0)."""
    return [row["A0"], 0.0, 0.0]


def rhs(t, y, k1, k2):
    """d(A, B, C)/dt."""
    A, B, C = y
    return [-k1 * A, k1 * A - k2 * B, k2 * B]
