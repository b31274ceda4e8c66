"""Mixture of experts (mlp="moe"): a router sends each token to top_k of n_experts MLPs.

Router as in Mixtral: logits = W·x (no bias), softmax over every expert in float32, top-k, the k weights
renormalised to sum to 1; the token's output is Σ weight · expert(x) (+ shared(x) with a shared expert).
Hook points: `{site}.hook_router_logits` [B, T, E] and `{site}.hook_expert_choice` int [B, T, k]; an
intervention on the choice forces experts, mixed with the router's probabilities of the forced experts
(renormalised). Inside a capture each router writes a RouterRecord, as attention sites do.

Training: a module in train mode keeps `aux_loss`, the Switch/Mixtral load-balancing loss
n_experts · Σ_e f_e · P_e of its last forward (f_e: share of the top-k slots sent to e, summed over the
k slots; P_e: mean router probability); `router_loss(model)` adds them up, weighted by router_aux_coef.
"""

from __future__ import annotations

import torch
import torch.nn as nn
from attnlab.model import hooks
from attnlab.model.config import ModelConfig
from attnlab.model.router_record import RouterRecord


def route(logits: torch.Tensor, top_k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Router logits [..., E] → (float32 probs [..., E], chosen experts [..., k] best first,
    float32 weights [..., k] summing to 1)."""
    probs = torch.softmax(logits.float(), dim=-1)
    top, choice = probs.topk(top_k, dim=-1)
    return probs, choice, top / top.sum(-1, keepdim=True)


def load_balancing_loss(logits: torch.Tensor | list[torch.Tensor], top_k: int) -> torch.Tensor:
    """n_experts · Σ_e f_e · P_e over router logits [N, E] (or a list of them, pooled as Mixtral does):
    f_e the share of tokens whose top-k holds e (summing to k), P_e the mean router probability. Balanced
    routing gives k; everything on k experts gives up to n_experts."""
    z = torch.cat(list(logits)) if isinstance(logits, (list, tuple)) else logits
    z = z.reshape(-1, z.shape[-1])  # [N, E]
    n_experts = z.shape[-1]
    probs, choice, _ = route(z, top_k)
    f = torch.zeros(n_experts, device=z.device).index_add_(
        0, choice.reshape(-1), torch.ones(choice.numel(), device=z.device)) / z.shape[0]  # [E]
    return n_experts * (f * probs.mean(0)).sum()


class MoE(nn.Module):
    """Router + n_experts MLPs (built by `expert`, e.g. layers.MLP) + optional shared expert."""

    HOOKS = ("hook_router_logits", "hook_expert_choice")  # [B, T, E] and int [B, T, k]

    def hook_names(self) -> list[str]:
        return [f"{self.site}.{p}" for p in self.HOOKS]

    def __init__(self, cfg: ModelConfig, expert):
        super().__init__()
        expert_cfg = cfg.replace(mlp=cfg.expert_mlp)
        self.n_experts, self.top_k = cfg.n_experts, cfg.top_k
        self.router = nn.Linear(cfg.d_model, cfg.n_experts, bias=False)
        self.experts = nn.ModuleList(expert(expert_cfg) for _ in range(cfg.n_experts))
        self.shared = expert(expert_cfg) if cfg.shared_expert else None
        self.aux_loss: torch.Tensor | None = None
        self.site, self.stack, self.layer = "mlp", "", 0  # set by name_sites()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, D = x.shape
        flat = x.reshape(B * T, D)  # [N, D]
        logits = self.router(flat).view(B, T, self.n_experts)  # [B, T, E]
        cap = hooks.active()
        if cap is not None:
            logits = cap.hook(f"{self.site}.hook_router_logits", logits)
        probs, choice, weights = route(logits, self.top_k)
        if cap is not None:
            forced = cap.hook(f"{self.site}.hook_expert_choice", choice)
            if forced is not choice:  # an intervention chose the experts: mix by their router probabilities
                choice = forced.to(torch.long)
                top = probs.gather(-1, choice)
                weights = top / top.sum(-1, keepdim=True)
            if cap.keep_records:
                cap.add_router(self._record(logits, choice, weights))
        if self.training:
            self.aux_loss = load_balancing_loss(logits, self.top_k)
        out = self._mix(flat, choice.reshape(B * T, -1), weights.reshape(B * T, -1).to(x.dtype))
        if self.shared is not None:
            out = out + self.shared(flat)
        return out.view(B, T, D)

    def _mix(self, flat: torch.Tensor, choice: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        """Σ over each token's slots of weight · expert(token): one batched call per expert. choice, weights [N, k]."""
        k = choice.shape[1]
        slots = choice.flatten()  # [N·k], token-major
        order = slots.argsort(stable=True)  # [N·k]: the slots grouped by expert, each group in token order
        # each expert's number of slots: the layer's one wait on its device (a batch's shape depends on the routing)
        counts = torch.bincount(slots, minlength=len(self.experts)).tolist()
        tokens, w = order // k, weights.flatten()[order]  # [N·k] each
        out = torch.zeros_like(flat)  # [N, D]
        start = 0
        for expert, n in zip(self.experts, counts):
            if n:
                token = tokens[start:start + n]
                y = expert(flat.index_select(0, token)) * w[start:start + n, None]  # [n, D]
                out.index_add_(0, token, y.to(out.dtype))
            start += n
        return out

    def _record(self, logits, choice, weights) -> RouterRecord:
        return RouterRecord(site=self.site, stack=self.stack, layer=self.layer,
                            logits=logits.detach(), choice=choice.detach(), weights=weights.detach())


def router_loss(model: nn.Module) -> torch.Tensor | float:
    """router_aux_coef × the mean load-balancing loss of the MoE layers' last training forward (0 without)."""
    losses = [m.aux_loss for m in model.modules() if isinstance(m, MoE) and m.aux_loss is not None]
    if not losses:
        return 0.0
    return model.cfg.router_aux_coef * torch.stack(losses).mean()


def force_expert(token: int, experts: list[int] | int, batch: int | None = None):
    """Intervention for `{site}.hook_expert_choice`: token `token` goes to `experts` (one per slot; an int
    fills the first slot and keeps the others, moved aside when the forced expert was among them)."""

    def fn(choice: torch.Tensor, name: str) -> torch.Tensor:
        out = choice.clone()
        rows = slice(None) if batch is None else batch
        if isinstance(experts, int):
            row = [experts] + [e for e in out[0, token].tolist() if e != experts]
            out[rows, token] = torch.tensor(row[: out.shape[-1]], device=out.device)
        else:
            if len(experts) != out.shape[-1]:
                raise ValueError(f"{name}: force {len(experts)} experts, the router picks {out.shape[-1]}")
            out[rows, token] = torch.tensor(experts, device=out.device)
        return out

    return fn


def upcycle(model: nn.Module, dense: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A state dict for `model` from a dense model's `dense` state (sparse upcycling): every tensor of the
    same name and shape is copied; expert e of a block takes hidden units [e·h, (e+1)·h) of the dense
    MLP, its down projection × n_experts (the k experts mixed with weights ≈ 1/k then give the dense MLP's
    output in expectation, as dropout rescales kept units) and the dense down bias (the weights sum to 1);
    routers keep `model`'s own initial weights. A non-MoE model gets `dense` unchanged."""
    if not any(isinstance(m, MoE) for m in model.modules()):
        return dense
    out = {k: dense[k].clone() if k in dense and dense[k].shape == v.shape else v.clone()
           for k, v in model.state_dict().items()}
    for name, m in model.named_modules():
        if not isinstance(m, MoE):
            continue
        h, scale = m.experts[0].up.out_features, float(m.n_experts)
        for e in range(m.n_experts):
            rows = slice(e * h, (e + 1) * h)
            for part in ("gate", "up"):
                for kind in ("weight", "bias"):
                    key = f"{name}.experts.{e}.{part}.{kind}"
                    if key in out and f"{name}.{part}.{kind}" in dense:
                        out[key] = dense[f"{name}.{part}.{kind}"][rows].clone()  # [h, D] / [h]
            out[f"{name}.experts.{e}.down.weight"] = dense[f"{name}.down.weight"][:, rows] * scale  # [D, h]
            if f"{name}.experts.{e}.down.bias" in out:
                out[f"{name}.experts.{e}.down.bias"] = dense[f"{name}.down.bias"].clone()
    return out
