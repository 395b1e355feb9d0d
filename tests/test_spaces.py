import gymnasium as gym
from hypothesis import given
from hypothesis import strategies as st

from scope_envs import UnicodeText


@given(st.text())
def test_any_unicode_text_is_contained(text):
    assert UnicodeText().contains(text)


def test_bounds_types_and_samples():
    space = UnicodeText(max_length=10, min_length=2, seed=0)
    assert not space.contains("x") and not space.contains("x" * 11) and not space.contains(b"bytes")
    samples = [space.sample() for _ in range(50)]
    assert all(space.contains(s) for s in samples)
    assert any(" " in s for s in samples)  # readable words, not a run of symbols
    assert UnicodeText().contains("")
    assert isinstance(space, gym.spaces.Text) and space == UnicodeText(max_length=10, min_length=2)
    assert len({space, UnicodeText(max_length=10, min_length=2)}) == 1


def test_sampling_is_seeded():
    assert [UnicodeText(seed=3).sample() for _ in range(3)] == [UnicodeText(seed=3).sample() for _ in range(3)]
