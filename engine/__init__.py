"""Trellis's science engine. Pure Python: it never imports Django (a test enforces it)."""
