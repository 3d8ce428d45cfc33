"""Search procedures that improve solutions or workflows over many runs."""
