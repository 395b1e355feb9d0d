"""The trainer end to end: token traces, the CLI, metrics, checkpoints and exact resume."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from training_helpers import TINY_P4G  # noqa: E402

from baselines.cli import main  # noqa: E402
from baselines.training.config import load_config, shipped_configs  # noqa: E402
from baselines.training.traces import SideTrace  # noqa: E402
from scope_envs.p4g import P4GEnv  # noqa: E402
from scope_envs.p4g.scripted import ScriptedPersuadee  # noqa: E402
from sims.hf_backend import HFSimulator  # noqa: E402
from sims.testing import tiny_chat_model  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TINY = [*TINY_P4G, "lr=0.001"]


COTRAIN = [
    "env=P4G",
    "policy=tiny",
    "groups_per_step=2",
    "group_size=2",
    "max_new_tokens=6",
    "env_kwargs={persona_source: synthetic, exchanges: 1}",
    "eval_simulators=[scripted]",
    "eval_tasks=1",
]


def play(template=None, max_new_tokens=6, return_simulator=False):
    model, tokenizer = tiny_chat_model()
    if template:
        tokenizer.chat_template = template
    simulator = HFSimulator(model, tokenizer=tokenizer, max_new_tokens=max_new_tokens)
    env, user = P4GEnv(persona_source="synthetic", exchanges=3), ScriptedPersuadee()
    _, infos = env.reset(seed=0)
    trace = SideTrace(tokenizer, simulator.stop_ids)
    while env.agents:
        if env.to_speak == "agent":
            prompt = trace.next_prompt(infos["agent"]["messages"], None)
            reply = simulator.generate([prompt], [len(trace.turns)])[0]
            infos = env.step({"agent": reply})[4]
            trace.record(reply.token_ids, reply.logprobs, len(infos["agent"]["messages"]))
        else:
            infos = env.step({"user": user.respond(infos["user"]["messages"], seed=0)})[4]
    return (trace, tokenizer, infos, simulator) if return_simulator else (trace, tokenizer, infos)


def test_token_in_token_out_sequence():
    trace, tokenizer, infos = play()
    (sample,) = trace.samples()
    assert trace.chained and len(trace.turns) == 3
    generated = [i for i, m in enumerate(sample.mask) if m]
    assert sum(len(t.token_ids) for t in trace.turns) == len(generated)
    for turn in trace.turns:  # each turn's tokens sit in the sequence exactly as generated
        start = len(turn.prompt_ids)
        assert sample.ids[start : start + len(turn.token_ids)] == turn.token_ids
        assert sample.logprobs[start : start + len(turn.token_ids)] == turn.logprobs
    text = tokenizer.decode(sample.ids)
    for message in infos["agent"]["messages"]:
        if message["role"] == "user":
            assert message["content"] in text  # the other side's turns are in, as template deltas
    assert text.count("<|im_start|>assistant\n") == 3


def test_training_logprobs_equal_the_sampled_ones():
    from baselines.training.policy import LMPolicy

    trace, _, _, simulator = play(return_simulator=True)
    (sample,) = trace.samples()
    logprobs, mask, _ = LMPolicy(simulator).sequence_logprobs([sample])
    sampled = torch.tensor(sample.logprobs[1:])
    assert torch.equal(mask[0], torch.tensor(sample.mask[1:]))
    assert torch.allclose(logprobs[0][mask[0] == 1], sampled[mask[0] == 1], atol=1e-4)  # ratio 1 on-policy


def test_a_template_that_rerenders_earlier_turns_is_trained_per_turn():
    # a template whose system line changes every turn: the new rendering never extends the old one
    template = (
        "<|im_start|>system\nturn {{ messages|length }}<|im_end|>\n"
        "{% for m in messages[1:] %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    trace, _, _ = play(template)
    samples = trace.samples()
    assert not trace.chained and len(samples) == 3
    for sample, turn in zip(samples, trace.turns):
        assert sample.ids == turn.prompt_ids + turn.token_ids and sample.prompt_length == len(turn.prompt_ids)


def test_train_end_to_end_through_the_cli(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", *TINY, "steps=2", "eval_every=2", f"output_dir={out}"]) == 0
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2]
    for key in (
        "reward_mean",
        "reward_std",
        "success",
        "entropy",
        "clip_fraction",
        "kl",
        "zero_variance_groups",
        "generated_tokens_per_s",
        "step_time",
        "loss",
        "turns",
    ):
        assert key in records[0]
    assert "heldout_success/scripted" in records[-1] and 0 <= records[-1]["heldout_success"] <= 1
    assert any(r["grad_norm"] > 0 for r in records)  # the parity persuadee makes rewards vary: real updates
    assert (out / "curves.png").is_file() and (out / "checkpoints" / "latest").read_text() == "step-000002"
    if (out / "tensorboard").exists():
        assert any((out / "tensorboard").iterdir())
    assert "held-out success" in capsys.readouterr().out
    assert main(["eval", str(out / "config.yaml")]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["step"] == 2


def test_config_errors_are_helpful(tmp_path):
    with pytest.raises(ValueError, match="did you mean 'group_size'"):
        load_config(None, ["groupsize=4"])
    with pytest.raises(ValueError, match="advantage must be one of"):
        load_config(None, ["env=P4G", "advantage=ppo"])
    with pytest.raises(ValueError, match="env is required"):
        load_config(None, ["steps=1"])
    path = tmp_path / "c.yaml"
    path.write_text("env: P4G\nsteps: 3\nmethod: ensemble\nsimulators: [scripted, scripted]\n")
    config = load_config(path, ["steps=5"])
    assert config.steps == 5 and config.method == "ensemble"
    assert main(["train", str(path), "nonsense=1"]) == 2


def run_cli(args, env):
    return subprocess.Popen(
        [sys.executable, "-m", "baselines.cli", "train", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def final_weights(out):
    from safetensors.torch import load_file

    latest = out / "checkpoints" / (out / "checkpoints" / "latest").read_text().strip()
    return {
        f"{path.parent.parent.name}/{name}": tensor
        for path in sorted(latest.glob("*/policy/model.safetensors"))
        for name, tensor in load_file(str(path)).items()
    }


def comparable(out):
    drop = {"step_time", "generated_tokens_per_s", "disk_mb"}
    return [
        {k: v for k, v in json.loads(line).items() if k not in drop}
        for line in (out / "metrics.jsonl").read_text().splitlines()
    ]


@pytest.mark.parametrize("method", ["single", "population"])
def test_a_killed_run_resumes_exactly(tmp_path, method):
    """SIGKILL mid-way, then --resume: the final weights (both models, for population) and the
    metrics equal those of an uninterrupted run; the pool is replayed exactly."""
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'tests'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    settings = [
        *TINY,
        "steps=3",
        "group_size=2",
        "checkpoint_every=1",
        "eval_every=100",
        "eval_tasks=1",
        "keep_checkpoints=5",
    ]
    if method == "population":
        population = [
            "method=population",
            "pool_every=1",
            "pool_size=2",
            "steps=3",
            "checkpoint_every=1",
            "eval_every=100",
        ]
        settings = [*COTRAIN, *population]
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    assert run_cli([*settings, f"output_dir={whole}"], env).wait(timeout=600) == 0
    process = run_cli([*settings, f"output_dir={killed}"], env)
    pointer = killed / "checkpoints" / "latest"
    deadline = time.time() + 600
    while not (pointer.exists() and pointer.read_text().strip() >= "step-000001") and time.time() < deadline:
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)  # mid-way: during step 2, or while writing its checkpoint
    process.wait()
    assert run_cli([*settings, f"output_dir={killed}", "--resume"], env).wait(timeout=600) == 0
    expected, resumed = final_weights(whole), final_weights(killed)
    assert expected.keys() == resumed.keys()
    assert all(torch.equal(expected[name], resumed[name]) for name in expected)
    assert comparable(whole) == comparable(killed)
    if method == "population":
        assert (whole / "sim_pool" / "pool.json").read_text().count("ckpt-") == (
            killed / "sim_pool" / "pool.json"
        ).read_text().count("ckpt-")


def test_shipped_configs_are_valid():
    configs = shipped_configs()
    assert len(configs) >= 4 and all(path.parts[-4] == "scope_envs" for path in configs)
    for path in configs:
        load_config(path)


@pytest.mark.slow
def test_smollm2_config_trains_and_plots(tmp_path):
    """`pytest -m slow`: a few steps of the SmolLM2 P4G config, with its metrics and plots."""
    pytest.importorskip("gguf")
    out = tmp_path / "smollm2"
    assert (
        main(
            [
                "train",
                "p4g_smollm2",
                "steps=2",
                "eval_every=2",
                f"output_dir={out}",
            ]
        )
        == 0
    )
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    print(json.dumps(records, indent=1))
    assert len(records) == 2 and (out / "curves.png").is_file()


def test_lora_training_saves_and_reloads_the_adapter(tmp_path, capsys):
    pytest.importorskip("peft")
    out = tmp_path / "lora"
    lora = "lora={r: 4, lora_alpha: 8, target_modules: [q_proj, v_proj]}"
    assert main(["train", *TINY, "steps=1", lora, f"output_dir={out}"]) == 0
    policy_dir = out / "checkpoints" / "step-000001" / "agent" / "policy"
    assert (policy_dir / "adapter_config.json").is_file() and (policy_dir / "adapter_model.safetensors").is_file()
    capsys.readouterr()
    assert main(["eval", str(out / "config.yaml")]) == 0  # the adapter loads back into a fresh policy
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["step"] == 1


@pytest.mark.parametrize("reward", ["adversarial", "cooperative", "curriculum"])
def test_cotrain_each_simulator_reward(tmp_path, reward):
    out = tmp_path / reward
    assert (
        main(["train", *COTRAIN, "method=cotrain", f"simulator_reward={reward}", "steps=1", f"output_dir={out}"]) == 0
    )
    (record,) = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    for key in ("reward_mean", "entropy", "simulator/entropy", "simulator/reward_trained", "simulator/loss", "disk_mb"):
        assert key in record, key
    if reward == "adversarial":
        assert record["simulator/reward_trained"] == pytest.approx(1 - record["reward_mean"])
    if reward == "cooperative":
        assert record["simulator/reward_trained"] == pytest.approx(record["reward_mean"])
    assert (out / "checkpoints" / "step-000001" / "user" / "policy").is_dir()


def test_each_side_trains_only_on_its_own_tokens(tmp_path):
    from baselines.training.config import load_config
    from baselines.training.loss import policy_loss
    from baselines.training.trainer import Trainer

    trainer = Trainer(
        load_config(
            None,
            [
                *COTRAIN,
                "method=cotrain",
                "env_kwargs={persona_source: synthetic, exchanges: 2}",
                f"output_dir={tmp_path}",
            ],
        )
    )
    players, _ = trainer.players(0, 1)
    (episode, *_) = trainer.collect(0, group_size=1, split="train", players=players)
    agent_sample, user_sample = episode.samples["agent"][0], episode.samples["user"][0]
    tokenizer = trainer.learners["agent"].policy.tokenizer
    user_tokens = [t for s in episode.samples["user"] for t, m in zip(s.ids, s.mask) if m]
    assert tokenizer.decode(user_tokens) and sum(user_sample.mask) == len(user_tokens)
    policy = trainer.learners["agent"].policy
    logprobs, mask, _ = policy.sequence_logprobs([agent_sample])
    logprobs = logprobs.detach().requires_grad_(True)
    old = torch.tensor([agent_sample.logprobs[1:]])
    advantage = torch.ones_like(logprobs)
    loss, _ = policy_loss(logprobs, old, advantage, mask, trainer.learners["agent"].loss_config)
    perturbed = old.clone()
    perturbed[mask == 0] += torch.randn(int((mask == 0).sum()))  # everything that is not the agent's own tokens
    loss_perturbed, _ = policy_loss(logprobs, perturbed, advantage, mask, trainer.learners["agent"].loss_config)
    assert float(loss) == float(loss_perturbed)
    loss.backward()
    assert torch.all(logprobs.grad[mask == 0] == 0) and torch.any(logprobs.grad[mask == 1] != 0)


def test_population_pool_draws_evictions_and_reloads(tmp_path):
    out = tmp_path / "population"
    settings = [
        *COTRAIN,
        "method=population",
        "pool_every=1",
        "pool_size=2",
        "steps=3",
        "groups_per_step=4",
        "pool_draw=group",
        "live_min_share=0.25",
        f"output_dir={out}",
    ]
    assert main(["train", *settings]) == 0
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    manifest = json.loads((out / "sim_pool" / "pool.json").read_text())
    assert [m["id"] for m in manifest["members"]] == ["ckpt-000002", "ckpt-000003"]  # FIFO of size 2
    assert sorted(p.name for p in (out / "sim_pool").iterdir() if p.name.startswith("ckpt")) == [
        "ckpt-000002",
        "ckpt-000003",
    ]
    drawn = {key.split("/")[-1] for r in records for key in r if key.startswith("pool/agent_reward/")}
    assert "live" in drawn and drawn - {"live"}, drawn  # the live simulator and snapshots both played
    assert [r["pool/size"] for r in records] == [1, 2, 2]


def test_rollout_benchmark_runs():
    result = subprocess.run(
        [
            sys.executable,
            "benchmarks/rollout_throughput.py",
            "--policy",
            "tiny",
            "--episodes",
            "2",
            "--max-new-tokens",
            "4",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "ratio batched / one-at-a-time" in result.stdout


def test_vllm_generation_is_validated_and_skips_cleanly_without_cuda(tmp_path):
    from baselines.training.trainer import Trainer
    from sims.vllm_backend import vllm_available

    with pytest.raises(ValueError, match="LoRA adapter"):
        load_config(None, ["env=P4G", "generation_engine=vllm"])
    config = load_config(
        None,
        [
            "env=P4G",
            "generation_engine=vllm",
            "policy=hf:some/model",
            "lora={r: 8, lora_alpha: 16}",
            f"output_dir={tmp_path}",
        ],
    )
    if vllm_available()[0]:
        pytest.skip("a CUDA device with vLLM is here: the GPU run covers this path")
    from baselines.training.vllm_engine import VLLMGeneration

    with pytest.raises(ImportError, match="generation_engine 'vllm'"):
        VLLMGeneration("some/model", adapter_dir=tmp_path, temperature=1.0, max_new_tokens=8)
    with pytest.raises((ImportError, OSError)):
        Trainer(config)  # no CUDA (or no such model offline): a clear error, before any training


def test_tau2_training_runs_end_to_end(tmp_path):
    """One GRPO step of the tiny model as the tau2 retail agent (tools, long prompts) against the
    scripted customer, through the CLI; scenarios are replayed by the ids the env reports."""
    pytest.importorskip("tau2")
    out = tmp_path / "tau2"
    settings = [
        "env=Tau2Retail",
        "env_kwargs={max_turns: 4}",
        "policy=tiny",
        "steps=1",
        "groups_per_step=1",
        "group_size=2",
        "max_new_tokens=4",
        "max_model_len=65536",  # the retail policy and tool schemas alone exceed the default 4096
        "simulators=[scripted]",
        "eval_simulators=[scripted]",
        "eval_tasks=1",
        f"output_dir={out}",
    ]
    assert main(["train", *settings]) == 0
    record = json.loads((out / "metrics.jsonl").read_text().splitlines()[-1])
    assert record["trained_tokens"] > 0 and "heldout_success" in record
