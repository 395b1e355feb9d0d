"""How tau2 turns are written, for policies that write turns in another form (Verbalized Sampling)."""

from scope_envs.core.rules import ReplyRule
from scope_envs.tau2.prompts import USER_STOP

REPLY_RULES = (
    ReplyRule(
        applies_when="one message at a time",
        rule="The guideline to generate one message at a time still holds for each reply: each text is one message. "
        "Writing several alternatives here is what is asked of you.",
    ),
    ReplyRule(
        applies_when=USER_STOP,
        rule="A reply that ends the conversation must contain the same stop token as a plain reply would.",
    ),
)
