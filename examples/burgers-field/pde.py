"""The law of the burgers-field task, as code: the viscous Burgers equation.

    u_t + u u_x = nu u_xx       for x in DOMAIN = [-1, 1], t >= T0 = 0
    u(x, 0)  = -sin(pi x)       (initial)
    u(-1, t) = u(1, t) = 0      (boundary: Dirichlet at both ends)
    nu = 0.02                   (KNOWN: the viscosity, known exactly)

Every function takes the constants of KNOWN as keyword arguments (``initial(x, **KNOWN)``) and
works on numpy arrays. ``rhs`` returns u_t given u and its first and second derivatives in x, so
a method of lines integrates, on a grid x_0 = -1 < x_1 < ... < x_N = 1,

    du_i/dt = rhs(t, x_i, u_i, u_x(x_i), u_xx(x_i), **KNOWN)   (interior points)
    u_0 = boundary(t)[0],  u_N = boundary(t)[1]

from u_i(T0) = initial(x_i). SPACE and TIME name the columns of the query points that hold x and t.
"""
import numpy as np

SPACE = "x"
TIME = "t"
DOMAIN = (-1.0, 1.0)    # the x interval; the boundary values are Dirichlet
T0 = 0.0                # the initial time
KNOWN = {"nu": 0.02}    # constants, passed to every function as keyword arguments


def initial(x, nu):
    """u(x, T0) for an array of positions x."""
    return -np.sin(np.pi * np.asarray(x, dtype=float))


def boundary(t, nu):
    """(u at DOMAIN[0], u at DOMAIN[1]) at time t."""
    return (0.0, 0.0)


def rhs(t, x, u, u_x, u_xx, nu):
    """u_t = -u u_x + nu u_xx (arrays)."""
    return -u * u_x + nu * u_xx
