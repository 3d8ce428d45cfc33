"""Reference baseline for epidemic-sir (not given to agents; see README.md).

Two textbook shortcuts, no ODE: early in an outbreak almost everyone is susceptible, so I grows
as exp((beta - gamma) t) and the growth rate r = beta - gamma is the slope of log I over the
first three weeks; long after the peak new infections are rare, so I decays as exp(-gamma t)
and gamma is minus the slope of log I over the reports after day 75. Then beta = r + gamma.
Every town is pooled after dividing I by its I0.
Run in a folder holding data/: reads data/train.csv, writes parameters.csv.
"""
import numpy as np
import pandas as pd

train = pd.read_csv("data/train.csv")
t, ratio = train["day"].to_numpy(dtype=float), (train["I"] / train["I0"]).to_numpy(dtype=float)
early = (t <= 21) & (ratio > 0)
r = float(np.polyfit(t[early], np.log(ratio[early]), 1)[0])
late = (t >= 75) & (ratio > 0)
gamma = -float(np.polyfit(t[late], np.log(ratio[late]), 1)[0])
beta = r + gamma
pd.DataFrame({"parameter": ["beta", "gamma"], "value": [beta, gamma]}).to_csv("parameters.csv", index=False)
print(f"r = {r:.4f} /day from {early.sum()} early reports, gamma = {gamma:.4f} /day from {late.sum()} late "
      f"reports, beta = {beta:.4f} /day")
