"""The offline provider: a scripted scientist served to litellm as a custom provider.

It is not a language model and says so in every trace record. It plays each role from a
library of real strategies; the code it writes is really executed, trained and scored.
"""
