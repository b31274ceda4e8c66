"""ViewModel: the LoadedModel interface the pages and the CLI use, over a model transformers runs itself.

What it can do: encode text, run once and return a CapturedRun of attention weights (every layer and head),
the top-k predictions and hidden states. What it cannot (its capabilities say so): q, k and scores, backends
other than eager, a KV cache, generation, interventions, masks other than the model's own, images.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from attnlab.model.capabilities import Capabilities, ModelKind
from attnlab.model.captured import CapturedRun
from attnlab.model.checkpoint import CheckpointError
from attnlab.model.device import dtype_name
from attnlab.model.hf.reading import read_tokenizer
from attnlab.model.hooks import name_filter
from attnlab.model.inputs import InputError, Inputs, check_tokens, validate_text
from attnlab.model.model_io import ModelIO
from attnlab.model.tl_runs import TransformerLensRuns, as_inputs
from attnlab.model.tokenizer import HFTokenizer
from attnlab.model.view.config import ViewConfig
from attnlab.model.view.folder import check_size, check_view_folder, kind_of, model_class
from attnlab.model.view.record import view_records

KINDS = {"decoder": "decoder", "encoder": "encoder", "encdec": "encoder–decoder"}
MODE = "transformers view"
TOP_K = 5
NEEDS_CONVERTED = "needs a converted family"


@dataclass
class ViewCapture:
    """The records of one forward, as model.hooks.Capture gives them (`sites`, `capture[site]`), and the
    weights as tensors ({site}.hook_pattern, in the autograd graph when the forward kept gradients)."""

    records: dict
    tensors: dict = field(default_factory=dict)
    routers: dict = field(default_factory=dict)

    @property
    def sites(self) -> list[str]:
        return list(self.records)

    def __getitem__(self, site: str):
        return self.records[site]


@dataclass(frozen=True)
class ViewSite:
    """An attention site as analysis.probes.relevance orders them (model.attention.Attention's site, stack, cross)."""

    site: str
    stack: str
    layer: int
    cross: bool = False


@dataclass
class ViewForward:
    logits: torch.Tensor | None  # [B, T, V] (None without a language-model head)
    hidden: torch.Tensor  # [B, T, D]: the last hidden state (the decoder's for an encoder–decoder)
    capture: ViewCapture


@dataclass
class ViewModel(ModelKind, ModelIO, TransformerLensRuns):
    name: str
    model: torch.nn.Module  # the transformers model, eager attention, eval mode
    tokenizer: HFTokenizer
    cfg: ViewConfig
    source: str
    family: str = ""
    card: dict = field(default_factory=dict)
    src_tokenizer: HFTokenizer | None = None
    image = None
    mode = MODE

    # -- what it can do -------------------------------------------------------------------------------
    converted = False
    has_qk = False  # transformers returns weights only
    has_cache = False
    has_interventions = False
    backends = ("eager",)

    @property
    def arch(self) -> str:
        return self.cfg.arch

    @property
    def has_logits(self) -> bool:
        return self.cfg.has_logits

    @property
    def capabilities(self) -> Capabilities:
        """What the pages may ask of this model (the same fields as LoadedModel.capabilities)."""
        return Capabilities(converted=False, has_qk=False, has_cache=False, generates=False, interventions=False,
                            masks=False, internals=False, relevance=self.has_logits, reads_source=self.reads_source,
                            reads_image=self.reads_image, has_logits=self.has_logits, causal=self.is_causal,
                            next_token=self.predicts_next_token)

    # -- device and precision -------------------------------------------------------------------------
    def to(self, device: str | None = None, dtype: torch.dtype | None = None) -> ViewModel:
        self.model.to(device=device, dtype=dtype)
        return self

    def reference_model(self) -> ViewModel:
        return self

    @property
    def context(self) -> int:
        """The most tokens one text may have: the position table, and at most what keeps the returned weights
        within MAX_CELLS (transformers returns every layer's full [H, T, T])."""
        return self.cfg.cpu_context()

    def run_info(self) -> dict:
        return {"device": self.device, "dtype": dtype_name(self.dtype)}

    def info(self) -> dict:
        c = self.cfg
        return {"name": self.name, "source": self.source, "family": self.family, "arch": c.arch,
                "kind": KINDS[c.arch], "mode": MODE, "class": c.head,
                "layers": c.n_layers if c.arch != "encdec" else [c.n_layers, c.dec_layers], "heads": c.n_heads,
                "d_model": c.d_model, "context": self.context, "vocab": c.vocab_size, "positional": c.positional,
                "norm": c.norm, "mlp": c.mlp, "experts": None}

    def describe(self) -> dict:
        card = {k: v for k, v in self.card.items() if isinstance(v, (str, int, float, list, dict))}
        return self.info() | {"has_logits": self.has_logits, "card": card, "full_context": self.cfg.max_len,
                              "can": self.capabilities}

    # -- tokens ---------------------------------------------------------------------------------------
    def encode(self, text: str, src_text: str | None = None, pair: str | None = None) -> Inputs:
        """Validate and tokenize. Encoder–decoder: `src_text` is the source; the target is the decoder's start
        token then `text`'s tokens (what transformers' generate starts from)."""
        if self.arch == "encdec":
            if src_text is None or not src_text.strip():
                raise InputError("an encoder–decoder needs a source text (--src-text)")
            src = self._encode(validate_text(src_text, "source text"), "source text")
            body = self.tokenizer.encode(text, add_special=False) if text and text.strip() else None
            if text and text.strip():
                validate_text(text, "target text")
            ids = [self.cfg.decoder_start] + (list(body.ids) if body else [])
            labels = [self.tokenizer.label(self.cfg.decoder_start)] + (list(body.labels) if body else [])
            check_tokens(len(ids), self.context, "target text")
            return Inputs(torch.tensor([ids]), labels, torch.tensor([src.ids]), src.labels)
        if text is None or not text.strip():
            raise InputError("the text is empty; type or choose some text")
        enc = self._encode(validate_text(text), "text", pair)
        typed = enc.type_ids is not None and self.cfg.type_vocab_size and self._takes("token_type_ids")
        tt = torch.tensor([enc.type_ids]) if typed else None
        return Inputs(torch.tensor([enc.ids]), enc.labels, type_ids=tt)

    def _takes(self, argument: str) -> bool:
        """True when the transformers model's forward has this argument."""
        import inspect

        return argument in inspect.signature(self.model.forward).parameters

    def _encode(self, text: str, what: str, pair: str | None = None):
        enc = self.tokenizer.encode(text, pair=pair) if pair is not None else self.tokenizer.encode(text)
        check_tokens(len(enc.ids), self.context, what)
        return enc

    def label(self, i: int) -> str:
        return self.tokenizer.label(int(i))

    def mask_spec(self, choice: tuple, n_tokens: int):
        if choice and choice[0] != "default":
            raise InputError(f"{self.name} runs as a {MODE}: only its own mask ({NEEDS_CONVERTED} for others)")
        return None

    # -- running --------------------------------------------------------------------------------------
    def attention_sites(self) -> list[ViewSite]:
        """The sites in the order a forward runs them: encoder, then decoder self → cross per layer."""
        c = self.cfg
        if c.arch != "encdec":
            return [ViewSite(f"blocks.{i}.attn", c.arch, i) for i in range(c.n_layers)]
        enc = [ViewSite(f"encoder.blocks.{i}.attn", "encoder", i) for i in range(c.n_layers)]
        return enc + [s for i in range(c.dec_layers) for s in (ViewSite(f"decoder.blocks.{i}.attn", "decoder", i),
                                                              ViewSite(f"decoder.blocks.{i}.cross_attn", "decoder",
                                                                       i, True))]

    def forward(self, inputs: Inputs, *, backend: str = "eager", mask=None, interventions=None, grad: bool = False,
                names=None, **_) -> ViewForward:
        """One transformers forward with output_attentions: logits, the last hidden state and the records; with
        `names` (globs, a list or a filter, as model.hooks.capture takes them), the weights whose {site}.hook_pattern
        they name as tensors too ([B, H, q, k], with gradients if `grad`): what run_with_cache keeps here."""
        if backend != "eager":
            raise InputError(f"{self.name} runs as a {MODE}: eager attention only ({NEEDS_CONVERTED} for "
                             f"backend {backend!r})")
        if interventions:
            raise InputError(f"{self.name} runs as a {MODE}: interventions {NEEDS_CONVERTED}")
        if mask is not None:
            raise InputError(f"{self.name} runs as a {MODE}: only its own mask")
        inputs = inputs.to(self.device)
        kw = dict(output_attentions=True, output_hidden_states=True, return_dict=True)
        with torch.set_grad_enabled(grad):
            if self.arch == "encdec":
                if inputs.src_mask is not None:
                    kw["attention_mask"] = inputs.src_mask.long()  # [B, S]: the source's padding
                if inputs.attention_mask is not None:
                    kw["decoder_attention_mask"] = inputs.attention_mask.long()  # [B, T]
                out = self.model(input_ids=inputs.src_ids, decoder_input_ids=inputs.ids, use_cache=False, **kw)
                attn = {"encoder": out.encoder_attentions, "decoder": out.decoder_attentions,
                        "cross": out.cross_attentions}
                hidden = out.decoder_hidden_states[-1]
            else:
                extra = {"use_cache": False} if self.arch == "decoder" else {}
                if inputs.attention_mask is not None:
                    extra["attention_mask"] = inputs.attention_mask.long()  # [B, T]: padding
                if inputs.type_ids is not None:
                    extra["token_type_ids"] = inputs.type_ids  # [B, T]: a sentence pair's segments
                out = self.model(input_ids=inputs.ids, **extra, **kw)
                attn, hidden = {"self": out.attentions}, out.hidden_states[-1]
        logits = getattr(out, "logits", None)
        logits = logits if self.has_logits and logits is not None and logits.ndim == 3 else None
        records = view_records(attn, self.arch, self.arch == "decoder")
        weights = [w for k in ("self", "encoder") if k in attn for w in attn[k]]
        weights += [w for pair in zip(attn.get("decoder", ()), attn.get("cross", ())) for w in pair]
        keep = name_filter(names)
        tensors = {f"{s}.hook_pattern": [w] for s, w in zip(records, weights) if keep(f"{s}.hook_pattern")}
        return ViewForward(logits, hidden, ViewCapture(records, tensors))

    def run_with_hooks(self, text_or_inputs, fwd_hooks=(), *, backend: str = "eager", return_type: str = "logits",
                       grad: bool = False):
        """The logits [B, T, V] of one forward; hook functions need a converted family (one line)."""
        if fwd_hooks:
            raise InputError(f"{self.name} runs as a {MODE}: a hook function {NEEDS_CONVERTED}")
        if return_type != "logits":
            raise InputError(f"return_type {return_type!r}: run_with_hooks returns logits here")
        return self.forward(as_inputs(self, text_or_inputs), backend=backend, grad=grad).logits

    def run(self, text: str | None = None, src_text: str | None = None, *, backend: str = "eager",
            mask: tuple = (), interventions: dict | None = None, names=None, inputs: Inputs | None = None,
            top_k: int = TOP_K) -> CapturedRun:
        """Tokenize (unless `inputs` are given) and run once: a torch-free CapturedRun of attention weights."""
        t0 = time.perf_counter()
        inp = inputs or self.encode(text, src_text)
        self.mask_spec(mask, inp.ids.shape[1])
        fwd = self.forward(inp, backend=backend, interventions=interventions)
        top_ids = top_tokens = top_probs = None
        if fwd.logits is not None and top_k:
            probs = torch.softmax(fwd.logits[0].float(), dim=-1)  # [T, V]
            p, i = probs.topk(min(top_k, probs.shape[-1]), dim=-1)  # [T, K]
            top_ids, top_probs = i.cpu().numpy(), p.cpu().numpy()
            top_tokens = [[self.label(j) for j in row] for row in top_ids.tolist()]
        src_ids = None if inp.src_ids is None else inp.src_ids[0].tolist()
        return CapturedRun(self.name, list(inp.tokens), inp.ids[0].tolist(), fwd.capture.records, backend,
                           src_tokens=inp.src_tokens, src_ids=src_ids, mask=(), context=self.context,
                           top_ids=top_ids, top_tokens=top_tokens, top_probs=top_probs,
                           seconds=time.perf_counter() - t0, kernels=["transformers eager"])

    def capture(self, inputs: Inputs, backend: str = "eager", mask: tuple = ()) -> CapturedRun:
        return self.run(inputs=inputs, backend=backend, mask=mask)

    def generate(self, *args, **kw):
        raise InputError(f"{self.name} runs as a {MODE}: generation {NEEDS_CONVERTED} (it runs on our KV cache)")

    def readout(self, need_linear: bool = False):
        raise InputError(f"{self.name} runs as a {MODE}: its residual stream and unembedding {NEEDS_CONVERTED}")

    def embed_modules(self):
        raise InputError(f"{self.name} runs as a {MODE}: its input embeddings' hooks {NEEDS_CONVERTED}")


def load_view(folder: Path, hf: dict, name: str | None = None, source: str | None = None,
              dtype: torch.dtype | None = None, placement=None) -> ViewModel:
    """A local Hugging Face folder whose family has no converter → ViewModel (transformers' own classes, eager
    attention, safetensors only, never repository code), in `dtype` (None: the checkpoint's own), spread as
    `placement` (model.dispatch.Placement) says."""
    check_view_folder(folder, hf)
    import transformers
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()  # "Loading weights" bars: a refusal after loading is one line, nothing else
    try:
        config = transformers.AutoConfig.from_pretrained(str(folder), local_files_only=True, trust_remote_code=False)
    except Exception as e:  # noqa: BLE001 — transformers' own message names the problem
        raise CheckpointError(f"{folder}: transformers cannot read config.json ({_first_line(e)})") from None
    arch = kind_of(config)
    cls = model_class(config, arch)
    check_size(folder, cls, config, dtype, placed=placement is not None)
    where = placement.from_pretrained_kwargs() if placement is not None else {}
    try:
        model, loading = cls.from_pretrained(str(folder), local_files_only=True, trust_remote_code=False,
                                             use_safetensors=True, attn_implementation="eager",
                                             dtype=dtype or "auto", output_loading_info=True, **where)
    except Exception as e:  # noqa: BLE001
        raise CheckpointError(f"{folder}: transformers cannot load it as {cls.__name__} ({_first_line(e)})") from None
    unset = sorted(loading.get("missing_keys") or []) + sorted(str(k[0]) if isinstance(k, tuple) else str(k)
                                                               for k in loading.get("mismatched_keys") or [])
    if unset:  # transformers would run them as random numbers
        raise CheckpointError(f"{folder}: the weights do not match model_type {config.model_type!r}: {len(unset)} "
                              f"weights of {cls.__name__} are missing or of another shape (e.g. {unset[0]})")
    model.eval()
    cfg = ViewConfig.of(config, arch, type(model).__name__)
    if arch == "encdec" and cfg.decoder_start is None:
        raise CheckpointError(f"{folder}: config.json names no decoder_start_token_id")
    tok = read_tokenizer(folder, config.model_type, cfg)
    card = {"folder": str(folder), "model_type": config.model_type, "architectures": hf.get("architectures") or [],
            "mode": MODE}
    return ViewModel(name or str(folder), model, tok, cfg, source or str(folder), family=config.model_type, card=card)


def _first_line(e: Exception) -> str:
    return (str(e).splitlines() or [type(e).__name__])[0][:200]
