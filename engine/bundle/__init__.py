"""The champion bundle of an AgenticSciML tree search (issue 14).

After the final commitment and the official evaluation, ``write_champion_bundle`` writes
``<run>/champion/``: the champion's script, its predictions, its trained checkpoint when its
program was a training job, plots as PNG (prediction vs truth and residuals on the in-loop
validation folds, and on the held-out rows labelled "held-out (official)"; the training curves;
the search's progress), the analysis report (markdown), a README saying what each file is, and
``champion.zip`` with all of it. The studio serves the zip (webapp/runs/views.champion_bundle).

- ``parts.py``: what the bundle is made of (the validation folds' truth, the held-out answer
  key, the champion's training job and checkpoint), read from the run folder without links;
- ``plots.py``: the PNGs (matplotlib, Agg);
- ``report.py``: the analysis report, the README, the manifest;
- ``build.py``: the folder and the zip, written aside and swapped in.
"""
from .build import BUNDLE_DIR, ZIP_NAME, Bundle, bundle_zip, write_champion_bundle

__all__ = ["BUNDLE_DIR", "ZIP_NAME", "Bundle", "bundle_zip", "write_champion_bundle"]
