"""Reference baseline for reaction-kinetics (not given to agents; see README.md).

Two textbook shortcuts, no ODE: B starts at 0 with slope dB/dt = k1 A0, so k1 is the slope of
a line through the origin fitted to B/A0 over the earliest samples (t <= 1 min); long after the
peak A is spent and B decays as exp(-k2 t), so k2 is minus the slope of log(B/A0) against t
over the late samples (t >= 15 min). Every experiment is pooled after dividing by its A0.
Run in a folder holding data/: reads data/train.csv, writes parameters.csv.
"""
import numpy as np
import pandas as pd

train = pd.read_csv("data/train.csv")
t, b = train["t_min"].to_numpy(), (train["B"] / train["A0"]).to_numpy()
early = t <= 1.0
k1 = float(np.sum(t[early] * b[early]) / np.sum(t[early] ** 2))  # least squares through the origin
late = (t >= 15.0) & (b > 0)
k2 = -float(np.polyfit(t[late], np.log(b[late]), 1)[0])
pd.DataFrame({"parameter": ["k1", "k2"], "value": [k1, k2]}).to_csv("parameters.csv", index=False)
print(f"k1 = {k1:.4f} /min from {early.sum()} early samples, k2 = {k2:.4f} /min from {late.sum()} late samples")
