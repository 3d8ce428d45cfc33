"""The agent's own test, run in its image after every build (the build fails when it fails)."""
import tempfile
from pathlib import Path

import pandas as pd

from profiler import run

folder = Path(tempfile.mkdtemp())
(folder / "data").mkdir()
pd.DataFrame({"x": [1.0, 2.0, 3.0, 4.0], "y": [2.0, 4.1, 5.9, 8.2]}).to_csv(folder / "data/train.csv", index=False)
pd.DataFrame({"id": [0, 1], "x": [2.5, 9.0]}).to_csv(folder / "data/test.csv", index=False)
task = "## Resources\n- train: `data/train.csv`\n- test_features: `data/test.csv`\n- target column: `y`\n"
report = run({"task": task}, folder)["report"]
assert "## train: `train.csv` — 4 rows, 2 columns" in report, report
assert "| x " in report and "+1.000" in report, report
outside = report.split("## Test values outside the training range")[1]
assert "| x " in outside and "[1, 4]" in outside, report  # the test's x = 9.0 is beyond the training's 4
print("selftest ok")
