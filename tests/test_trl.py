"""TRL's own `GRPOTrainer` trains a tiny model (built from a config, no download) for two steps on
SCOPE envs through `baselines.integrations.trl_env`; the user is a SCOPE simulator spec.

Needs the `trl` extra:  pip install -e ".[trl]" && pytest -m trl
"""

import pytest

trl = pytest.importorskip("trl")

from baselines.integrations.trl_env import ScopeChat, ScopeChatWithTools, environment_factory, task_dataset  # noqa: E402
from scope_envs.core.dialogue import AGENT  # noqa: E402
from sims.testing import tiny_chat_model  # noqa: E402

pytestmark = pytest.mark.trl


@pytest.fixture(autouse=True)
def _p4g_corpus(p4g_dir, monkeypatch):
    monkeypatch.setenv("SCOPE_P4G_DATA", str(p4g_dir))


def tiny_tool_calling_model():
    """The tiny Llama of the other tests with the Qwen3 chat template TRL parses tool calls of."""
    from trl.chat_template_utils import qwen3_chat_template

    model, tokenizer = tiny_chat_model()
    tokenizer.chat_template = qwen3_chat_template
    tokenizer.padding_side = "left"
    return model, tokenizer


def train_two_steps(env, tmp_path, **kwargs):
    from trl import GRPOConfig, GRPOTrainer

    model, tokenizer = tiny_tool_calling_model()
    config = GRPOConfig(
        output_dir=str(tmp_path),
        max_steps=2,
        per_device_train_batch_size=2,
        num_generations=2,
        max_completion_length=24,
        learning_rate=1e-2,
        logging_steps=1,
        report_to=[],
        use_cpu=True,
        save_strategy="no",
        seed=0,
    )
    trainer = GRPOTrainer(
        model=model,
        args=config,
        processing_class=tokenizer,
        train_dataset=task_dataset(env, 8, **kwargs),
        environment_factory=environment_factory(env, "scripted", **kwargs),
    )
    trainer.train()
    return trainer.state.log_history


@pytest.mark.parametrize("env", ["P4G", "Tau2Retail"])
def test_grpo_trainer_trains_two_steps_on_a_scope_env(env, tmp_path):
    if env.startswith("Tau2"):
        pytest.importorskip("tau2")
    steps = [entry for entry in train_two_steps(env, tmp_path) if "reward" in entry]
    assert len(steps) == 2, "two optimizer steps of TRL's own trainer"
    for entry in steps:
        assert 0.0 <= entry["reward"] <= 1.0 and entry["completions/mean_length"] > 0
        assert any(key.startswith("rewards/ScopeChat") for key in entry), "the env's reward is the trainer's reward"


def test_a_turn_is_said_to_the_simulated_user_and_the_env_scores_the_episode():
    chat = environment_factory("P4G", "scripted")()
    assert isinstance(chat, ScopeChat) and not isinstance(chat, ScopeChatWithTools)
    opening = chat.reset(task_id=chat.dialogue.task_ids("train")[0], seed=3)
    assert "donat" in opening.lower()
    reply = chat.say("Hello! Would you donate to Save the Children?")
    assert reply and chat.dialogue.views[AGENT][-1].role == "user"
    ended_by_the_conversation = chat.dialogue.end is not None
    reward = chat.get_reward()
    assert ended_by_the_conversation or chat.dialogue.end.reason == "rollout_ended"
    assert reward == chat.dialogue.chat_infos[AGENT]["reward_info"]["reward"]
    assert chat.say("anyone there?").endswith("over.]")


def test_the_tau2_environment_calls_the_domains_tools():
    pytest.importorskip("tau2")
    chat = environment_factory("Tau2Retail", "scripted")()
    assert isinstance(chat, ScopeChatWithTools)
    assert "find_user_id_by_name_zip" in chat.reset(seed=0)
    result = chat.use_tool("find_user_id_by_name_zip", '{"first_name": "No", "last_name": "Body", "zip": "00000"}')
    assert "not found" in result.lower() or "error" in result.lower()
    assert "error" in chat.use_tool("no_such_tool", "{}").lower()
