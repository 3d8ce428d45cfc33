"""The offline provider: a scripted scientist served to litellm as a custom provider.

It is not a language model and says so in every trace record. It plays each role from a
library of real strategies; the code it writes is really executed, trained and scored.

It reads prompts only through engine.prompt_format, as any model reads the same text. The
scientist's role handlers register themselves when their module is imported; importing
them here means any use of the package (scientist.respond, the provider) has every role.
"""
# In the order the failure message of respond() lists the roles.
from . import scientist, search_roles, tree_roles, scimars_roles  # noqa: F401,I001  (registers their roles)
