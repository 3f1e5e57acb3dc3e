"""Transformer models: presets, the YAML form, parameter counts and FLOPs (Megatron-LM conventions).

Two architectures: ``gpt`` (learned position embeddings, LayerNorm and biases, a two-matrix GeLU MLP, input
and output embeddings tied) and ``llama`` (rotary positions, RMSNorm, no biases, a three-matrix SwiGLU MLP,
untied output embedding). Grouped-query attention (``kv_heads`` < ``heads``) and mixture-of-experts layers
(``experts``, ``top_k``, every ``moe_every``-th layer from ``first_dense`` on, ``shared_experts`` always
active) apply to both, as do a head width of its own (``head_dim``), sliding-window attention (``window``; every
``full_every``-th layer full), attention sinks (``sinks``: a logit per head) and, for ``llama``, multi-head latent
attention (DeepSeek-V2/V3: ``kv_lora_rank`` > 0, ``q_lora_rank``, ``rope_head_dim``, ``v_head_dim``: the query
through a low-rank latent, keys and values up-projected from a shared latent of ``kv_lora_rank`` plus the shared
rotary key; every projection's weights counted, the attention core over ``head_dim + rope_head_dim`` wide scores).

FLOPs follow the convention of Narayanan et al. (2021) and Korthikanti et al. (2022): a multiply-add is two
operations, only matrix products count, attention scores are counted without causal masking (``4·s·h`` per
token and layer; a windowed layer's queries attend to ``min(window, s)`` keys), the backward pass costs twice the
forward. For a ``gpt`` model with ``ffn = 4·h`` and
``kv_heads = heads`` :meth:`ModelSpec.parameters` is ``12·l·h²·(1 + 13/(12h) + (V+s)/(12lh))`` and
:meth:`ModelSpec.model_flops` ``72·B·l·s·h²·(1 + s/(6h) + V/(12hl))`` exactly.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from etsim.errors import ConfigError
from etsim.files import parse_yaml, read_text

__all__ = ["ARCHITECTURES", "MODELS", "ModelSpec", "load_model"]

#: Values of ``arch``.
ARCHITECTURES = ("gpt", "llama")


@dataclass(frozen=True, kw_only=True)
class ModelSpec:
    """A decoder-only transformer (the model YAML's keys)."""

    name: str = "custom"
    arch: str = "gpt"
    layers: int
    hidden: int
    heads: int
    kv_heads: int = 0
    """Key/value heads (0: ``heads``, plain multi-head attention)."""
    head_dim: int = 0
    """Width of one attention head (0: ``hidden / heads``); Megatron-LM calls it ``kv_channels``."""
    ffn: int = 0
    """MLP inner size (0: ``4 · hidden``)."""
    vocab: int
    """Vocabulary (0: no embedding or output layer, a trunk of layers only)."""
    seq: int
    experts: int = 0
    """Routed experts per MoE layer (0: a dense model)."""
    top_k: int = 1
    moe_every: int = 1
    first_dense: int = 0
    """Layers before the first MoE layer."""
    expert_ffn: int = 0
    """An expert's MLP inner size (0: ``ffn``)."""
    shared_experts: int = 0
    window: int = 0
    """Sliding-window attention: the keys each query attends to (0: the whole sequence)."""
    full_every: int = 0
    """With a window: every ``full_every``-th layer attends to the whole sequence (0: every layer is windowed)."""
    sinks: int = 0
    """1: learned attention-sink logits, one per head and layer (GPT-OSS)."""
    q_lora_rank: int = 0
    """Multi-head latent attention: the query's low-rank width (0: a full-rank query projection)."""
    kv_lora_rank: int = 0
    """Multi-head latent attention (DeepSeek-V2/V3) when > 0: keys and values from a latent of this width."""
    rope_head_dim: int = 0
    """With latent attention: each head's decoupled rotary part of query and key (the key's shared by heads)."""
    v_head_dim: int = 0
    """With latent attention: each head's value width (0: ``head_dim``)."""

    # -- derived sizes
    @property
    def mla(self) -> bool:
        """Whether attention is multi-head latent attention."""
        return self.kv_lora_rank > 0

    @property
    def qk_head_dim(self) -> int:
        """Width of one head's query and key (with latent attention, the rotary part included)."""
        return self.head_dim + (self.rope_head_dim if self.mla else 0)

    @property
    def o_hidden(self) -> int:
        """Width of the attention output (the output projection's input): ``heads · v_head_dim``."""
        return self.heads * (self.v_head_dim or self.head_dim)

    def keys_attended(self, layer: int) -> int:
        """Keys each query of *layer* attends to: the sequence, or the window on a windowed layer."""
        if self.window and (self.full_every == 0 or (layer + 1) % self.full_every):
            return min(self.window, self.seq)
        return self.seq

    def attention_core_flops(self, layer: int) -> int:
        """Forward FLOPs of *layer*'s attention core per token: scores and their product with the values."""
        return 2 * self.keys_attended(layer) * (self.heads * self.qk_head_dim + self.o_hidden)

    @property
    def q_hidden(self) -> int:
        """Width of the query projection: ``heads · head_dim`` (with latent attention, the rotary part too)."""
        return self.heads * self.qk_head_dim

    @property
    def kv_hidden(self) -> int:
        """Width of the key (and of the value) projection: ``kv_heads · head_dim`` (latent attention: its latent)."""
        if self.mla:
            return self.kv_lora_rank + self.rope_head_dim
        return self.kv_heads * self.head_dim

    @property
    def gated(self) -> bool:
        """Whether the MLP has three matrices (SwiGLU)."""
        return self.arch == "llama"

    def is_moe(self, layer: int) -> bool:
        """Whether *layer* is a mixture-of-experts layer."""
        return self.experts > 0 and layer >= self.first_dense and (layer - self.first_dense) % self.moe_every == 0

    def mlp_weights(self, inner: int) -> int:
        """Weights of one MLP with *inner* size."""
        return (3 if self.gated else 2) * self.hidden * inner

    def attention_weights(self) -> int:
        """Weights of a layer's query, key, value and output projections (latent attention: down and up too)."""
        h, q, o = self.hidden, self.q_hidden, self.o_hidden
        if not self.mla:
            return h * (q + 2 * self.kv_hidden) + o * h
        query = h * self.q_lora_rank + self.q_lora_rank * q if self.q_lora_rank else h * q
        latent = h * (self.kv_lora_rank + self.rope_head_dim)
        up = self.kv_lora_rank * self.heads * (self.head_dim + (self.v_head_dim or self.head_dim))
        return query + latent + up + o * h

    def expert_weights(self, layer: int) -> int:
        """The routed experts' MLP weights of *layer* (0 for a dense layer).

        Expert (and expert tensor) parallelism splits these; tensor parallelism splits the rest of the layer, shared
        experts included: every rank runs them, as a dense MLP, on its own tokens (Megatron-Core's shared experts).
        """
        return self.experts * self.mlp_weights(self.expert_ffn) if self.is_moe(layer) else 0

    def in_projection_width(self) -> float:
        """Columns of the attention's input-side projections as one GEMM (query, key, value; latents' too)."""
        return (self.attention_weights() - self.o_hidden * self.hidden) / self.hidden

    def layer_parameters(self, layer: int) -> int:
        """Parameters of *layer* (weights, biases, norms; routed experts all counted)."""
        h = self.hidden
        attention = self.attention_weights()
        if self.arch == "gpt":
            attention += (self.q_hidden + 2 * self.kv_hidden) + h  # biases
            norms = 4 * h  # two LayerNorms: scale and bias
        else:
            norms = 2 * h + (self.q_lora_rank + self.kv_lora_rank if self.mla else 0)  # RMSNorms (latents' too)
        if self.sinks:
            norms += self.heads  # (one sink logit per head)
        if self.is_moe(layer):
            experts = self.experts + self.shared_experts
            mlp = experts * self.mlp_weights(self.expert_ffn) + h * self.experts  # and the router
            if self.arch == "gpt":
                mlp += experts * (self.expert_ffn + h)
        else:
            mlp = self.mlp_weights(self.ffn) + ((self.ffn + h) if self.arch == "gpt" else 0)
        return attention + mlp + norms

    def embedding_parameters(self) -> int:
        """Input embedding (and position embedding; untied output embedding and final norm for ``llama``)."""
        untied = self.vocab * self.hidden + self.hidden if self.vocab and self.arch == "llama" else 0
        return self.input_embedding_parameters() + untied

    def input_embedding_parameters(self) -> int:
        """The first model chunk's: the input embedding (and for ``gpt`` the position embedding)."""
        if self.vocab == 0:
            return 0
        if self.arch == "gpt":
            return (self.vocab + self.seq) * self.hidden  # the reference formula counts no final norm
        return self.vocab * self.hidden

    @property
    def tied(self) -> bool:
        """Whether the output layer is the input word embedding (``gpt``; ``llama``'s is a matrix of its own)."""
        return self.arch == "gpt" and self.vocab > 0

    def output_layer_parameters(self, tp: int, *, apart: bool) -> float:
        """The last model chunk's own parameters on one of *tp* tensor-parallel ranks.

        A ``llama`` model's untied output layer (split by tp) and final norm (whole). A ``gpt`` model's output layer
        is its word embedding, tied: when the last chunk runs *apart* from the first (on another pipeline stage),
        it holds a copy of the word embedding (split by tp), as Megatron-LM keeps one on the last stage; else none.
        """
        if self.tied:
            return self.vocab * self.hidden / tp if apart else 0.0
        return self.vocab * self.hidden / tp + self.hidden if self.vocab else 0.0

    def parameters(self) -> int:
        """All parameters."""
        return sum(self.layer_parameters(i) for i in range(self.layers)) + self.embedding_parameters()

    # -- FLOPs (forward, per token; see the module docstring)
    def layer_matmul_weights(self, layer: int) -> int:
        """Weights one token multiplies in *layer*'s projections and active experts."""
        if self.is_moe(layer):
            mlp = (self.top_k + self.shared_experts) * self.mlp_weights(self.expert_ffn) + self.hidden * self.experts
        else:
            mlp = self.mlp_weights(self.ffn)
        return self.attention_weights() + mlp

    def forward_flops_per_token(self) -> int:
        """Forward FLOPs of one token through the whole model (attention scores at full sequence length)."""
        layers = sum(2 * self.layer_matmul_weights(i) + self.attention_core_flops(i) for i in range(self.layers))
        return layers + 2 * self.hidden * self.vocab

    def model_flops(self, sequences: int) -> int:
        """Model FLOPs of one training iteration over *sequences* sequences (forward and backward)."""
        return 3 * sequences * self.seq * self.forward_flops_per_token()


def _preset(name: str, **values: Any) -> ModelSpec:
    return _complete(ModelSpec(name=name, **values), f"preset {name}")


def _complete(spec: ModelSpec, where: str) -> ModelSpec:
    """*spec* with defaults that depend on other keys filled in, checked."""
    moe_keys = {"top_k": 1, "moe_every": 1, "first_dense": 0, "expert_ffn": 0, "shared_experts": 0}
    given = [key for key, default in moe_keys.items() if getattr(spec, key) != default]
    if not spec.experts and given:  # (a dense model: they would change nothing, in silence)
        raise ConfigError(
            f"{where}: {given[0]} is a mixture-of-experts key: it needs experts (routed experts per layer)"
        )
    if spec.experts and spec.first_dense >= spec.layers:
        raise ConfigError(
            f"{where}: first_dense {spec.first_dense} leaves none of the {spec.layers} layers an MoE layer"
        )
    if spec.kv_lora_rank and spec.kv_heads not in (0, spec.heads):
        raise ConfigError(
            f"{where}: kv_heads {spec.kv_heads} does not apply to latent attention (kv_lora_rank): every head's keys "
            "and values come from the latent"
        )
    if spec.head_dim == 0 and spec.hidden % max(spec.heads, 1):
        raise ConfigError(f"{where}: hidden {spec.hidden} is not a multiple of heads {spec.heads} (or give head_dim)")
    spec = replace(
        spec,
        kv_heads=spec.kv_heads or spec.heads,
        head_dim=spec.head_dim or spec.hidden // max(spec.heads, 1),
        ffn=spec.ffn or 4 * spec.hidden,
        expert_ffn=spec.expert_ffn or spec.ffn or 4 * spec.hidden,
    )
    if spec.arch not in ARCHITECTURES:
        raise ConfigError(f"{where}: arch: expected one of {', '.join(ARCHITECTURES)}, got {spec.arch!r}")
    for key in ("layers", "hidden", "heads", "seq"):
        if getattr(spec, key) < 1:
            raise ConfigError(f"{where}: {key}: expected an integer >= 1, got {getattr(spec, key)}")
    if spec.mla and spec.arch != "llama":
        raise ConfigError(f"{where}: kv_lora_rank (latent attention) needs arch llama (no biases, RMSNorm)")
    if spec.full_every and not spec.window:
        raise ConfigError(f"{where}: full_every {spec.full_every} needs a window (sliding-window attention)")
    if spec.sinks not in (0, 1):
        raise ConfigError(f"{where}: sinks: expected 0 or 1 (or false/true), got {spec.sinks}")
    if spec.heads % spec.kv_heads:
        raise ConfigError(f"{where}: heads {spec.heads} is not a multiple of kv_heads {spec.kv_heads}")
    if spec.experts and not 1 <= spec.top_k <= spec.experts:
        raise ConfigError(f"{where}: top_k {spec.top_k} must be between 1 and experts {spec.experts}")
    if spec.experts and spec.moe_every < 1:
        raise ConfigError(f"{where}: moe_every: expected an integer >= 1 (an MoE layer every n), got {spec.moe_every}")
    for key in ("q_lora_rank", "rope_head_dim", "v_head_dim"):
        if getattr(spec, key) and not spec.mla:
            raise ConfigError(f"{where}: {key} is latent attention's: it needs kv_lora_rank")
    return spec


#: Model presets (published architectures; ``gpt3-175b`` as in Brown et al. 2020, Megatron-LM's models as in
#: Narayanan et al. 2021, Llama 3 as in its model cards, Mixtral as released, ``gpt-oss-120b`` as in OpenAI's model
#: card (2025: heads of 64 where hidden/heads = 45, a 128-token window on alternate layers, attention sinks; its
#: biases are not counted), ``qwen3-235b-a22b`` and ``deepseek-v3`` (multi-head latent attention) as in their
#: released configurations, ``llama3.1-405b`` as Llama 3's 405B model card; ``deepseek-v3-like`` keeps
#: DeepSeek-V3's sizes and expert layout with plain multi-head attention in place of MLA).
MODELS: dict[str, ModelSpec] = {
    m.name: m
    for m in (
        _preset("gpt3-175b", layers=96, hidden=12288, heads=96, vocab=51200, seq=2048),
        _preset("megatron-1.7b", layers=24, hidden=2304, heads=24, vocab=51200, seq=2048),
        _preset("megatron-18b", layers=40, hidden=6144, heads=48, vocab=51200, seq=2048),
        _preset("megatron-22b", layers=48, hidden=6144, heads=64, vocab=51200, seq=2048),
        _preset("megatron-145b", layers=80, hidden=12288, heads=96, vocab=51200, seq=2048),
        _preset("megatron-530b", layers=105, hidden=20480, heads=128, vocab=51200, seq=2048),
        _preset("megatron-1t", layers=128, hidden=25600, heads=160, vocab=51200, seq=2048),
        _preset("llama3-8b", arch="llama", layers=32, hidden=4096, heads=32, kv_heads=8, ffn=14336, vocab=128256,
                seq=8192),
        _preset("llama3-70b", arch="llama", layers=80, hidden=8192, heads=64, kv_heads=8, ffn=28672, vocab=128256,
                seq=8192),
        _preset("llama3-405b", arch="llama", layers=126, hidden=16384, heads=128, kv_heads=8, ffn=53248,
                vocab=128256, seq=8192),
        _preset("mixtral-8x7b", arch="llama", layers=32, hidden=4096, heads=32, kv_heads=8, ffn=14336, vocab=32000,
                seq=4096, experts=8, top_k=2),
        _preset("llama3.1-405b", arch="llama", layers=126, hidden=16384, heads=128, kv_heads=8, ffn=53248,
                vocab=128256, seq=8192),
        _preset("gpt-oss-120b", arch="llama", layers=36, hidden=2880, heads=64, kv_heads=8, head_dim=64, ffn=2880,
                vocab=201088, seq=4096, experts=128, top_k=4, expert_ffn=2880, window=128, full_every=2, sinks=1),
        _preset("qwen3-235b-a22b", arch="llama", layers=94, hidden=4096, heads=64, kv_heads=4, head_dim=128,
                ffn=12288, vocab=151936, seq=4096, experts=128, top_k=8, expert_ffn=1536),
        _preset("deepseek-v3", arch="llama", layers=61, hidden=7168, heads=128, head_dim=128, ffn=18432,
                vocab=129280, seq=4096, experts=256, top_k=8, first_dense=3, expert_ffn=2048, shared_experts=1,
                q_lora_rank=1536, kv_lora_rank=512, rope_head_dim=64, v_head_dim=128),
        _preset("deepseek-v3-like", arch="llama", layers=61, hidden=7168, heads=128, ffn=18432, vocab=129280,
                seq=4096, experts=256, top_k=8, first_dense=3, expert_ffn=2048, shared_experts=1),
    )
}  # fmt: skip

_KEYS = {f.name for f in fields(ModelSpec)} - {"name"}


def load_model(spec: str | Mapping[str, Any], key: str = "--model") -> ModelSpec:
    """A preset name, the path of a model YAML, or a mapping of the YAML's keys.

    Raises:
        ConfigError: an unknown preset, an unreadable file, an unknown key or a bad value (naming it).
    """
    if isinstance(spec, str) and spec in MODELS:
        return MODELS[spec]
    if isinstance(spec, str):
        if not (spec.endswith((".yaml", ".yml")) or os.sep in spec) or not os.path.exists(spec):
            raise ConfigError(f"{key}: {spec!r} is neither a model preset ({', '.join(MODELS)}) nor a model YAML file")
        where = spec
        data = parse_yaml(read_text(spec, "model file"), spec)
        name = os.path.splitext(os.path.basename(spec))[0]
    else:
        where, data, name = key, spec, "custom"
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where}: expected a mapping of model keys ({', '.join(sorted(_KEYS))})")
    unknown = sorted(set(data) - _KEYS - {"name", "kv_channels"})
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]!r}; valid: {', '.join(sorted(_KEYS))}")
    values: dict[str, Any] = {"name": str(data.get("name", name))}
    if "kv_channels" in data:  # (Megatron-LM's name for head_dim)
        if "head_dim" in data and data["head_dim"] != data["kv_channels"]:
            raise ConfigError(f"{where}: head_dim {data['head_dim']} and kv_channels {data['kv_channels']} differ "
                              "(kv_channels is Megatron-LM's name for head_dim: give one)")  # fmt: skip
        data = {("head_dim" if k == "kv_channels" else k): v for k, v in data.items()}
    for k, v in data.items():
        if k == "name":
            continue
        if k == "arch":
            values[k] = v
            continue
        if k == "sinks" and isinstance(v, bool):
            v = int(v)
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ConfigError(f"{where}: {k}: expected an integer >= 0, got {v!r}")
        values[k] = v
    missing = [k for k in ("layers", "hidden", "heads", "vocab", "seq") if k not in values]
    if missing:
        raise ConfigError(f"{where}: missing key {missing[0]!r} (a model needs layers, hidden, heads, vocab, seq)")
    return _complete(ModelSpec(**values), where)
