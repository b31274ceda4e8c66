"""LoadedModel: weights, tokenizer(s) and the one run path — the only code outside model/transformer.py that
knows the architecture (decoder, encoder, encoder–decoder, vision transformer)."""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import torch
from attnlab.model import hooks
from attnlab.model.cache import KVCache
from attnlab.model.capabilities import ARCH_NAMES, Capabilities, ModelKind
from attnlab.model.captured import MAX_STORED_CELLS, CapturedRun
from attnlab.model.config import ModelConfig
from attnlab.model.device import check_device, check_dtype, dtype_name, is_half
from attnlab.model.dispatch import dispatch
from attnlab.model.generate import generate as _generate
from attnlab.model.images import ImagePrep
from attnlab.model.inputs import (
    InputError,
    Inputs,
    OverContextError,
    check_generate,
    check_tokens,
    validate_text,
)
from attnlab.model.masks import BIDIRECTIONAL, CAUSAL, MaskSpec, pair_mask
from attnlab.model.model_io import ImageIO, ModelIO
from attnlab.model.readout import Reading
from attnlab.model.stack import check_hook_names
from attnlab.model.tl_runs import TransformerLensRuns
from attnlab.model.tl_weights import TransformerLensWeights
from attnlab.model.tokenizer import ByteTokenizer, Encoding, HFTokenizer
from attnlab.model.transformer import Decoder, Encoder, EncoderDecoder, ViT

MASK_CHOICES = ("default", "causal", "bidirectional", "sliding_window", "prefix_lm", "padding")
TOP_K = 5  # predictions kept per position in a CapturedRun
TOP_ROWS = 256  # positions whose softmax over the vocabulary is computed at once

Tokenizer = ByteTokenizer | HFTokenizer
# called as check(lm, inputs, backend, grad=, patterns=) before every forward pass; model.budget adds its memory
# check when attnlab.model is imported (it reads model.memory, which imports the loaders, which import this module)
BEFORE_FORWARD: list = []


@dataclass
class Forward:
    """The torch outputs of one forward pass, and what its capture collected."""

    logits: torch.Tensor | None  # [B, T, V] (None for an encoder without an output head)
    hidden: torch.Tensor  # [B, T, D] (OPT-350m: projected back to the embeddings' width E)
    capture: hooks.Capture


@dataclass
class LoadedModel(ModelKind, ModelIO, ImageIO, TransformerLensRuns, TransformerLensWeights, Reading):
    name: str
    model: Decoder | Encoder | EncoderDecoder | ViT
    tokenizer: Tokenizer | None  # None for a ViT
    cfg: ModelConfig
    source: str  # "random", "bundled", "installed" or the folder path
    src_tokenizer: Tokenizer | None = None
    family: str = "attnlab"
    card: dict = field(default_factory=dict)
    # (dtype) → this model's module again from its weights' source (the checks' float32 reference); None: upcast
    reload: Callable[[torch.dtype], torch.nn.Module] | None = field(default=None, repr=False)
    cpu_context: int | None = None  # tokens a CPU run reads when below cfg.max_len (see `context`)
    image: ImagePrep | None = None  # a ViT's preprocessing and class names

    # -- device and precision --------------------------------------------------------------------------
    def to(self, device: str | None = None, dtype: torch.dtype | None = None) -> LoadedModel:
        """Move (and cast) the model in place; returns self. A 16-bit model cast to full precision takes its
        weights again from where they came (`reload`: the file, not the rounded ones) when it can."""
        device = check_device(device)
        dtype = check_dtype(dtype, device or self.device)
        if dtype is not None and is_half(self.dtype) and not is_half(dtype) and self.reload is not None:
            device, self.model = device or self.device, self.reload(dtype)
        self.model.to(device=device, dtype=dtype)
        return self

    def placed(self, where=None, dtype: torch.dtype | None = None) -> LoadedModel:
        """Spread over devices, CPU memory and disk as `where` (model.dispatch.Placement) says, every weight cast to
        `dtype` (None: as it is) as it is placed; None: as is."""
        if where is not None:
            self.model = dispatch(self.model, where, dtype)
        return self

    def reference_model(self) -> LoadedModel:
        """This model in float32 on the same device: itself when it already is float32, else a new LoadedModel
        (sharing tokenizers and config) around a float32 module built now — from the weights' source again
        (`reload`), else upcast from these weights — and freed with it: nothing keeps a float32 twin."""
        if not is_half(self.dtype):
            return self
        model = self.reload(torch.float32) if self.reload is not None else copy.deepcopy(self.model).float()
        return replace(self, model=model.to(self.device).eval())

    @property
    def context(self) -> int:
        """The most tokens one text may have here: cfg.max_len, or the model's CPU limit on the CPU (the one
        place that limit is applied; random-long-decoder reads 4,096 tokens on the CPU, 32,768 on CUDA)."""
        if self.cpu_context is not None and self.device == "cpu":
            return min(self.cpu_context, self.cfg.max_len)
        return self.cfg.max_len

    def run_info(self) -> dict:
        """{'device': 'cpu'|'cuda', 'dtype': 'float32'|'bfloat16'|'float16'}."""
        return {"device": self.device, "dtype": dtype_name(self.dtype)}

    @property
    def arch(self) -> str:
        return self.cfg.arch

    @property
    def has_logits(self) -> bool:
        """True when the model predicts tokens (an LM or MLM head, or an encoder–decoder)."""
        return self.arch == "encdec" or self.cfg.output_head_kind != "none"

    @property
    def has_cache(self) -> bool:
        """True when the model can run step by step with a KV cache (it has causal self-attention)."""
        return self.is_causal

    # -- what the pages may ask of it (a transformers view, model/view, answers with the same type) ----------
    converted = True  # our own hooked model (not a transformers view)
    mode = "converted"
    has_qk = True  # records keep q and k: scores, the neuron view, the query–key view
    has_interventions = True

    @property
    def capabilities(self) -> Capabilities:
        """What a page may ask of this model (model.view.ViewModel.capabilities answers the same fields)."""
        return Capabilities(converted=True, has_qk=True, has_cache=self.has_cache, generates=self.has_cache,
                            interventions=True, masks=True, internals=True, relevance=True,
                            reads_source=self.reads_source, reads_image=self.reads_image,
                            has_logits=self.has_logits, causal=self.is_causal, next_token=self.predicts_next_token)

    def info(self) -> dict:
        c = self.cfg
        if c.arch == "vit":
            return {"name": self.name, "source": self.source, "family": self.family, "arch": c.arch,
                    "kind": ARCH_NAMES[c.arch], "layers": c.n_layers, "heads": c.n_heads, "d_model": c.d_model,
                    "context": c.max_len, "classes": c.n_classes, "image_size": c.image_size,
                    "patch_size": c.patch_size, "positional": c.positional, "norm": c.norm,
                    "prefix": c.n_prefix}
        return {"name": self.name, "source": self.source, "family": self.family, "arch": c.arch,
                "kind": ARCH_NAMES[c.arch], "layers": c.n_layers if c.arch != "encdec" else [c.n_layers, c.dec_layers],
                "heads": c.n_heads, "d_model": c.d_model, "context": self.context, "vocab": c.vocab_size,
                "positional": c.positional, "norm": c.norm, "mlp": c.mlp,
                "experts": {"n": c.n_experts, "top_k": c.top_k} if c.mlp == "moe" else None}

    def describe(self) -> dict:
        """info() plus what a page needs to know: whether it predicts tokens, and the card's plain fields."""
        card = {k: v for k, v in (self.card or {}).items() if isinstance(v, (str, int, float, list, dict))}
        return self.info() | {"has_logits": self.has_logits, "card": card, "full_context": self.cfg.max_len,
                              "mode": self.mode, "can": self.capabilities}

    # -- tokens ------------------------------------------------------------------------------------
    def encode(self, text: str, src_text: str | None = None, pair: str | None = None) -> Inputs:
        """Validate and tokenize. Encoder–decoder: `src_text` is the source, `text` the target prefix."""
        if self.reads_image:
            raise InputError(f"{self.name} is a vision transformer: it reads an image, not text")
        if self.arch == "encdec":
            if src_text is None:
                raise InputError("an encoder–decoder needs a source text (--src-text)")
            src = self._encode(self.src_tokenizer or self.tokenizer, validate_text(src_text, "source text"), "source text")
            tgt = self._encode(self.tokenizer, text, "target text", allow_empty=True)
            return Inputs(_ids(tgt), tgt.labels, _ids(src), src.labels)
        enc = self._encode(self.tokenizer, validate_text(text), "text", pair=pair)
        tt = torch.tensor([enc.type_ids]) if enc.type_ids is not None and self.cfg.type_vocab_size else None
        return Inputs(_ids(enc), enc.labels, type_ids=tt)

    def _encode(self, tok, text: str, what: str, pair: str | None = None, allow_empty: bool = False) -> Encoding:
        if text is None or not text.strip():
            if not allow_empty:
                raise InputError(f"the {what} is empty; type or choose some text")
            text = ""
        else:
            validate_text(text, what)
        enc = tok.encode(text, pair=pair) if pair is not None else tok.encode(text)
        if len(enc.ids) > self.context and self.context < self.cfg.max_len:
            raise OverContextError(f"the {what} is {len(enc.ids):,} tokens long; the CPU limit of {self.name} is "
                                   f"{self.context:,} tokens (a run on a CUDA GPU, --device cuda, reads up to "
                                   f"{self.cfg.max_len:,})", what, len(enc.ids), self.context, self.name)
        try:
            check_tokens(len(enc.ids), self.context, what)
        except OverContextError as e:
            e.model = self.name
            raise
        return enc

    def label(self, i: int) -> str:
        """A token's label; a ViT's class name."""
        if self.reads_image:
            return self.class_names[int(i)]
        return self.tokenizer.label(int(i))

    def mask_spec(self, choice: tuple, n_tokens: int) -> MaskSpec | None:
        """The self-attention MaskSpec of a mask choice ("kind", value), or None for the model's own."""
        kind = choice[0] if choice else "default"
        if kind == "default":
            return None
        if kind in ("causal", "bidirectional"):
            return MaskSpec(kind)
        if kind == "sliding_window":
            return MaskSpec("sliding_window", window=int(choice[1]))
        if kind == "prefix_lm":
            return MaskSpec("prefix_lm", prefix=int(choice[1]))
        if kind == "padding":  # the last n_pad keys are padding: hidden from every query
            n_pad = int(choice[1])
            if not 0 <= n_pad < n_tokens:
                raise ValueError(f"padding must leave at least one real token: {n_pad} of {n_tokens} tokens")
            own = BIDIRECTIONAL if self.arch in ("encoder", "vit") else CAUSAL
            base = pair_mask(own, n_tokens, n_tokens)
            real = torch.arange(n_tokens)[None, :] < n_tokens - n_pad  # [1, k]
            return MaskSpec("custom", custom=real.expand(n_tokens, -1) if base is None else base & real)
        raise ValueError(f"unknown mask {kind!r}; choose one of {', '.join(MASK_CHOICES)}")

    # -- running -----------------------------------------------------------------------------------
    def forward(self, inputs: Inputs, *, backend: str = "eager", cache: KVCache | None = None,
                mask: MaskSpec | None = None, interventions: dict | None = None, names=None,
                records: bool = True, grad: bool = False, as_computed: bool = False,
                split_inputs: bool = False) -> Forward:
        """One forward pass over `inputs` with capture (records, hook tensors `names`, `interventions`). The
        inputs move to the model's device; records are float32 numpy whatever the model's dtype.

        A 16-bit model's records without interventions keep q and k only and recompute patterns from them
        in float32 (rows sum to 1 within float32, as after a fused run); `as_computed` keeps an eager run's
        16-bit patterns as the kernel computed them (what the invariants check measures). `split_inputs`: each
        head's q, k and v input and each MLP's input its own hook (hooks.SPLIT_HOOKS; pre-norm decoders).

        Every check of BEFORE_FORWARD runs first: model.budget's refuses a pass that would need more memory than
        this process may use, as an InputError saying what it needs and what would fit. An intervention on a name
        that is no hook of this model is an InputError too (it would change nothing)."""
        for check in BEFORE_FORWARD:
            check(self, inputs, backend, grad=grad, patterns=records or "pattern" in str(names))
        if interventions:
            check_hook_names(self.model, interventions, split=split_inputs)
        inputs = inputs.to(self.device)
        as_kept = not is_half(self.dtype) or bool(interventions) or as_computed
        with torch.set_grad_enabled(grad), hooks.capture(names=names, interventions=interventions,
                                                         records=records, detach=not grad,
                                                         split_inputs=split_inputs, patterns=as_kept) as cap:
            out = self.model.forward_inputs(inputs, backend=backend, cache=cache, mask=mask)
        return Forward(out.logits, out.hidden, cap)

    def run(self, text: str | None = None, src_text: str | None = None, *, backend: str = "eager",
            mask: tuple = (), interventions: dict | None = None, names=None, inputs: Inputs | None = None,
            top_k: int = TOP_K) -> CapturedRun:
        """Tokenize (unless `inputs` are given) and run once with capture: a torch-free CapturedRun."""
        t0 = time.perf_counter()
        inp = inputs or self.encode(text, src_text)
        spec = self.mask_spec(mask, inp.ids.shape[1])
        fwd = self.forward(inp, backend=backend, mask=spec, interventions=interventions, names=names)
        top_ids = top_tokens = top_probs = None
        if fwd.logits is not None and top_k:
            # [T, V]; a ViT's classes: one row, the [CLS] prediction ([1, n_classes])
            logits = fwd.logits if self.reads_image else fwd.logits[0]
            k = min(top_k, logits.shape[-1])
            # [T, K], TOP_ROWS rows at a time: the float32 softmax of a long text's [T, V] is never held whole
            best = [torch.softmax(rows.float(), dim=-1).topk(k, dim=-1) for rows in logits.split(TOP_ROWS)]
            top_ids = torch.cat([b.indices for b in best]).cpu().numpy()
            top_probs = torch.cat([b.values for b in best]).cpu().numpy()
            top_tokens = [[self.label(j) for j in row] for row in top_ids.tolist()]
        records = {s: fwd.capture[s] for s in fwd.capture.sites}
        src_ids = None if inp.src_ids is None else inp.src_ids[0].tolist()
        return CapturedRun(self.name, list(inp.tokens), inp.ids[0].tolist(), records, backend,
                           src_tokens=inp.src_tokens, src_ids=src_ids, mask=tuple(mask), context=self.context,
                           top_ids=top_ids, top_tokens=top_tokens, top_probs=top_probs,
                           seconds=time.perf_counter() - t0, kernels=sorted({r.kernel for r in records.values()}),
                           routers={s: recs[-1] for s, recs in fwd.capture.routers.items()})

    def capture(self, inputs: Inputs, backend: str = "eager", mask: tuple = ()) -> CapturedRun:
        """`run` on ready inputs, its records lazy above MAX_STORED_CELLS (what a page keeps in its cache)."""
        return self.run(inputs=inputs, backend=backend, mask=mask).lazy_above(MAX_STORED_CELLS)

    def generate(self, text: str, max_new_tokens: int = 20, *, src_text: str | None = None, temperature: float = 0.0,
                 top_k: int | None = None, seed: int | None = None, use_cache: bool = True,
                 backend: str = "eager", inputs: Inputs | None = None, stop_at_eos: bool = True,
                 step_logits: list | None = None) -> tuple[list[int], list[str]]:
        """Continue `text` (or `inputs`); returns all ids and their labels (prompt first)."""
        if self.arch in ("encoder", "vit"):
            raise InputError(f"{'an encoder' if self.arch == 'encoder' else 'a vision transformer'} does not "
                             "generate text; pick a decoder or an encoder–decoder")
        check_generate(max_new_tokens)
        inp = inputs or self.encode(text, src_text)
        eos = getattr(self.tokenizer, "eos_id", None) if stop_at_eos else None
        inp = inp.to(self.device)
        max_new_tokens = min(max_new_tokens, max(0, self.context - inp.ids.shape[1]))  # the CPU limit too
        ids = _generate(self.model, inp.ids, max_new_tokens, temperature=temperature, top_k=top_k, seed=seed,
                        use_cache=use_cache, backend=backend, eos_id=eos, src=inp.src_ids, step_logits=step_logits)
        new = [self.label(i) for i in ids[0, inp.ids.shape[1]:].tolist()]
        return ids[0].tolist(), inp.tokens + new


def _ids(enc: Encoding) -> torch.Tensor:
    return torch.tensor([enc.ids], dtype=torch.long)  # [1, T]
