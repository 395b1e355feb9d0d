"""Persuasion for Good (Wang et al., ACL 2019): `scope/P4G-v0` and `scope/P4G-User-v0`."""

from scope_envs.p4g.donation import final_donation, parse_donation
from scope_envs.p4g.env import P4GEnv, load_persona_pairs, parallel_env
from scope_envs.p4g.personas import Persona, PersonaPair, split_of

__all__ = [
    "P4GEnv",
    "Persona",
    "PersonaPair",
    "final_donation",
    "load_persona_pairs",
    "parallel_env",
    "parse_donation",
    "split_of",
]
