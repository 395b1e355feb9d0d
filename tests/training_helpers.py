"""Policies used by the training tests."""

from __future__ import annotations

from sims import ScriptedSimulator


class ParityPersuadee(ScriptedSimulator):
    """Donates $1 when the persuader's last message has an even number of characters: a reward
    that varies across a group of random-text episodes, so updates are never trivially zero."""

    def reply(self, messages, tools, rng):
        heard = self.heard(messages)
        return "Okay. [DONATE $1]" if heard and len(heard[-1]) % 2 == 0 else "No, thank you."
