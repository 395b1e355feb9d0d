"""TRL's own `GRPOTrainer` trains tiny models (built from a config, no download) on SCOPE envs
through `baselines.integrations.trl_env`, from the agent's seat and from the user's; the other
side is a SCOPE spec.

Needs the `trl` extra, in an environment of its own (see docs/rl-libraries.md):
    pip install torch==2.13.0 && pip install -e ".[trl,tau2]" && pytest -m trl
"""

import pytest

trl = pytest.importorskip("trl")

import torch  # noqa: E402

from baselines.integrations.trl_env import (  # noqa: E402
    ScopeChat,
    environment_factory,
    reward_functions,
    scope_reward,
    task_dataset,
)
from scope_envs.core.dialogue import AGENT, USER  # noqa: E402
from sims.testing import fine_tune_on_completions, tiny_chat_model  # noqa: E402

pytestmark = pytest.mark.trl

SYNTHETIC = {"persona_source": "synthetic"}
# donates $1 when the persuader's last message has an even number of characters (tests/training_helpers.py)
PARITY = "scripted:training_helpers:ParityPersuadee"
EVEN = "Please give to the children today!"  # 34 characters: ParityPersuadee donates $1


@pytest.fixture(autouse=True)
def _p4g_corpus(p4g_dir, monkeypatch):
    monkeypatch.setenv("SCOPE_P4G_DATA", str(p4g_dir))


def tiny_tool_calling_model(seed=0):
    """The tiny Llama of the other tests with the Qwen3 chat template TRL parses tool calls of."""
    from trl.chat_template_utils import qwen3_chat_template

    model, tokenizer = tiny_chat_model(seed)
    tokenizer.chat_template = qwen3_chat_template
    tokenizer.padding_side = "left"
    return model, tokenizer


def grpo(model, tokenizer, tmp_path, dataset, factory, rewards, *, steps=2, weights=None, completion=24, generations=2):
    from trl import GRPOConfig, GRPOTrainer

    config = GRPOConfig(
        output_dir=str(tmp_path),
        max_steps=steps,
        per_device_train_batch_size=2 * generations,
        num_generations=generations,
        max_completion_length=completion,
        max_tool_calling_iterations=2,
        learning_rate=1e-2,
        logging_steps=1,
        report_to=[],
        use_cpu=True,
        save_strategy="no",
        seed=0,
        reward_weights=weights,
    )
    trainer = GRPOTrainer(
        model=model,
        args=config,
        processing_class=tokenizer,
        train_dataset=dataset,
        environment_factory=factory,
        reward_funcs=rewards,
    )
    before = [p.detach().clone() for p in model.parameters()]
    trainer.train()
    changed = any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    return trainer, [entry for entry in trainer.state.log_history if "reward" in entry], changed


@pytest.mark.parametrize("env", ["P4G", "Tau2Retail"])
def test_grpo_trainer_trains_two_steps_on_a_scope_env(env, tmp_path):
    if env.startswith("Tau2"):
        pytest.importorskip("tau2")
    model, tokenizer = tiny_tool_calling_model()
    trainer, steps, _ = grpo(
        model, tokenizer, tmp_path, task_dataset(env, 8), environment_factory(env, "scripted"), reward_functions()
    )
    assert len(steps) == 2, "two optimizer steps of TRL's own trainer"
    for entry in steps:
        assert 0.0 <= entry["reward"] <= 1.0 and entry["completions/mean_length"] > 0
        assert "rewards/scope_reward/mean" in entry, "the env's reward is the trainer's reward"
    offered = {tool.__name__ for tool in trainer._env_tools[None]}
    assert "say" in offered
    if env == "Tau2Retail":
        assert {"find_user_id_by_email", "get_order_details", "cancel_pending_order"} <= offered


def test_the_user_seat_trains_a_step_with_its_own_reward_and_outcome(tmp_path):
    """The model plays the persuadee against SCOPE's scripted persuader; its reward is the user's
    (adversarial: 1 - the persuader's), its success its own, the curriculum reward per group. It is
    first tuned to answer in plain text with either of two replies, so that groups vary."""
    model, tokenizer = tiny_tool_calling_model()
    dataset = task_dataset("P4G", 4, side=USER, **SYNTHETIC)
    factory = environment_factory("P4G", "scripted", side=USER, **SYNTHETIC)
    replies = ["No, thank you.<|im_end|>", "Yes, I will give. [DONATE $1]<|im_end|>"]
    warm(model, tokenizer, list(dataset), factory, replies, steps=60)
    rewards = reward_functions("donation", success=True, curriculum=True)
    _, steps, changed = grpo(
        model, tokenizer, tmp_path, dataset, factory, rewards, steps=1, weights=[1.0, 0.0, 0.0, 0.0], generations=4
    )
    (entry,) = steps
    assert changed, "the user seat's weights took a step"
    names = ["scope_reward", "scope_donation", "scope_success", "scope_curriculum"]
    assert all(f"rewards/{name}/mean" in entry for name in names)
    user_reward, donation = entry["rewards/scope_reward/mean"], entry["rewards/scope_donation/mean"]
    assert user_reward == pytest.approx(1.0 - donation / 2.0), "the user's reward is 1 - r ($1 of the $2 maximum)"
    # each reply is either no donation (user reward 1, its own success) or $1 (0.5, the persuader's)
    assert entry["rewards/scope_success/mean"] == pytest.approx(2 * user_reward - 1), "the user's own success"
    assert entry["reward"] == pytest.approx(user_reward), "weighted: only the user reward counts"


def say_call(message):
    return f'<tool_call>\n{{"name": "say", "arguments": {{"message": "{message}"}}}}\n</tool_call><|im_end|>'


def warm(model, tokenizer, rows, factory, completions, steps=120):
    """Fine-tunes the tiny model to answer each row's prompt (as TRL renders it) with the
    completions, in turn (so, after training, with each about equally often)."""
    chat = factory()
    tools = [chat.say]
    sequences = []
    for row in rows:
        prompt = [
            *row["prompt"][:-1],
            {**row["prompt"][-1], "content": row["prompt"][-1]["content"] + chat.reset(**row)},
        ]
        text = tokenizer.apply_chat_template(prompt, tools=tools, add_generation_prompt=True, tokenize=False)
        ids = tokenizer(text, add_special_tokens=False).input_ids
        sequences += [(ids, tokenizer(c, add_special_tokens=False).input_ids) for c in completions]
    fine_tune_on_completions(model, sequences, steps)
    return model


def test_trls_own_loop_calls_the_say_tool_and_a_reward_above_zero_arrives(tmp_path):
    model, tokenizer = tiny_tool_calling_model()
    dataset = task_dataset("P4G", 2, **SYNTHETIC)
    factory = environment_factory("P4G", PARITY, **SYNTHETIC)
    warm(model, tokenizer, list(dataset), factory, [say_call(EVEN)])
    _, steps, _ = grpo(model, tokenizer, tmp_path, dataset, factory, reward_functions(), steps=1, completion=96)
    (entry,) = steps
    assert entry["tools/call_frequency"] > 0, "the model's tool calls went through TRL's loop"
    assert entry["rewards/scope_reward/mean"] > 0, "the persuadee heard the message and donated"


def test_a_plain_text_last_reply_is_the_seats_last_turn():
    """A chat model ends its rollout with a reply in plain text: it is said to the other side
    before scoring (it was dropped, and the episode scored 0 as `rollout_ended`)."""
    said = ScopeChat("P4G", PARITY, **SYNTHETIC)
    dropped = ScopeChat("P4G", PARITY, plain_text="ignore", **SYNTHETIC)
    completion = [{"role": "assistant", "content": EVEN}]
    for chat in (said, dropped):
        chat.reset(seed=0)
    assert scope_reward([completion], [said]) == [0.5], "$1 of the $2 maximum"
    assert said.dialogue.end.reason == "donation"
    assert scope_reward([completion], [dropped]) == [0.0] and dropped.dialogue.end.reason == "rollout_ended"


def test_the_opening_names_its_speakers_and_the_system_prompt_is_a_system_message():
    pytest.importorskip("tau2")
    (row,) = task_dataset("Tau2Retail", 1)
    chat = environment_factory("Tau2Retail", "scripted")()
    opening = chat.reset(**row)
    system, greeting, request = chat.dialogue.views[AGENT][:3]
    assert row["prompt"][0] == {"role": "system", "content": system.text}
    assert f"You: {greeting.text}\nUser: {request.text}" in opening and system.text not in opening


def test_a_system_prompt_override_reaches_the_model():
    (row,) = task_dataset("P4G", 1, system_prompt="Ask for exactly five dollars.")
    assert row["prompt"][0] == {"role": "system", "content": "Ask for exactly five dollars."}
    chat = environment_factory("P4G", "scripted", system_prompt="Ask for exactly five dollars.")()
    own = {**row, "prompt": row["prompt"][1:]}  # a dataset of the user's own, with no system message
    opening = chat.reset(**own)
    assert "Ask for exactly five dollars." in opening and chat.dialogue.views[AGENT][0].text not in opening


def test_the_tau2_tools_are_tools_of_their_own_names_and_schemas():
    pytest.importorskip("tau2")
    from transformers.utils import get_json_schema

    chat = environment_factory("Tau2Retail", "scripted")()
    chat.reset(seed=0)
    for tool in chat.dialogue.chat_infos[AGENT]["tools"]:
        original = tool["function"]
        offered = get_json_schema(getattr(chat, original["name"]))["function"]
        assert offered["name"] == original["name"]
        assert set(offered["parameters"].get("required", [])) == set(original["parameters"].get("required", []))
        for name, schema in original["parameters"]["properties"].items():
            assert offered["parameters"]["properties"][name]["type"] == schema["type"]
    result = chat.find_user_id_by_name_zip(first_name="No", last_name="Body", zip="00000")
    assert "not found" in result.lower() or "error" in result.lower()
    call, answer = chat.dialogue.views[AGENT][-2:]
    assert call.tool_calls[0].name == "find_user_id_by_name_zip" and answer.role == "tool"


def run_example(name, *args, tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    command = [sys.executable, str(root / "examples" / name), *args, "--output-dir", str(tmp_path)]
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
    run = subprocess.run(command, cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    print(run.stdout)  # the numbers docs/rl-libraries.md quotes (`-s` shows them)
    return run.stdout


def test_the_single_seat_example_trains_the_user_seat(tmp_path):
    tiny = ["--tiny", "--steps", "2", "--generations", "2", "--max-completion-length", "24"]
    out = run_example("trl_grpo.py", "--env", "P4G", "--side", "user", *tiny, tmp_path=tmp_path)
    assert out.count("user reward") == 2 and "user success" in out


def test_the_cotraining_example_alternates_two_trainers_each_the_others_opponent(tmp_path):
    tiny = ["--tiny", "--rounds", "2", "--steps", "1", "--generations", "2", "--max-completion-length", "24"]
    out = run_example("trl_cotrain.py", "--env", "P4G", "--components", "donation", *tiny, tmp_path=tmp_path)
    assert [line.split(" step")[0] for line in out.splitlines() if line.startswith("round")] == [
        "round 0 agent", "round 0 user", "round 1 agent", "round 1 user"
    ]  # fmt: skip
    assert (tmp_path / "user-0" / "checkpoint" / "config.json").exists(), "the agent's round-1 opponent"
