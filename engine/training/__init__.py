"""Training jobs: programs that import ``trellis_train`` report curves and keep checkpoints
(``jobs.py``); ``trellis_train.py`` is the helper copied next to such a program in the sandbox."""
