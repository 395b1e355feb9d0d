"""How P4G turns are written, for policies that write turns in another form (Verbalized Sampling)."""

from scope_envs.core.rules import ReplyRule

REPLY_RULES = (
    ReplyRule(
        applies_when="[DONATE $N]",
        rule="Every reply in which you donate must state the amount exactly as [DONATE $N] inside its text.",
    ),
)
