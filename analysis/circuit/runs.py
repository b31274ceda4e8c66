"""The runs circuit discovery makes on one clean/corrupted pair: the senders' activations, the gradient of the
logit difference with respect to every receiver's own input (split inputs, model/layers.py), and circuit runs
where each edge outside a circuit carries its sender's corrupted activation.

M = logit(answer) − logit(wrong) at the last position, as the model computes its logits.
"""

from __future__ import annotations

import torch
from attnlab.analysis.circuit.graph import Graph
from attnlab.model.inputs import Inputs


class Runs:
    """Both prompts' sender activations A [S, T, D] and M; gradients and circuit runs on the clean prompt."""

    def __init__(self, lm, graph: Graph, clean: Inputs, corrupt: Inputs, answer: int, wrong: int):
        self.lm, self.graph, self.clean, self.a, self.b = lm, graph, clean, answer, wrong
        self.blocks = lm.model.blocks
        self.embed_hook = f"{self.blocks[0].site}.hook_resid_pre"
        self.valid = torch.from_numpy(graph.valid()).to(lm.device)  # [S, R]
        self.acts, self.m = {}, {}
        for key, inp in (("clean", clean), ("corrupt", corrupt)):
            self.acts[key], self.m[key] = self._activations(inp)

    def metric(self, logits: torch.Tensor) -> torch.Tensor:
        """M per run [B] of logits [B, T, V]."""
        last = logits[:, -1].float()  # [B, V]
        return last[:, self.a] - last[:, self.b]

    @torch.no_grad()
    def _activations(self, inp: Inputs) -> tuple[torch.Tensor, float]:
        names = [self.embed_hook]
        for blk in self.blocks:
            names += [f"{blk.attn.site}.hook_result", f"{blk.site}.hook_mlp_out"]
        fwd = self.lm.forward(inp, names=names, records=False)
        t = fwd.capture.tensor
        parts = [t(self.embed_hook)[0, None]]  # [1, T, D]
        for blk in self.blocks:
            parts += [t(f"{blk.attn.site}.hook_result")[0].transpose(0, 1),  # [T, H, D] -> [H, T, D]
                      t(f"{blk.site}.hook_mlp_out")[0, None]]  # [1, T, D]
        return torch.cat(parts).float(), float(self.metric(fwd.logits)[0])

    # -- gradients ----------------------------------------------------------------------------------
    def receiver_hooks(self) -> list[tuple[str, int, bool, int]]:
        """(hook name, first receiver index, one per head?, senders upstream) of every receiver hook, in order:
        senders are numbered so that those upstream of a receiver come first."""
        g, out = self.graph, []
        for L, blk in enumerate(self.blocks):
            out += [(f"{blk.attn.site}.hook_{p}_input", g.receiver(L, p), True, g.sender(L, 0)) for p in "qkv"]
            out.append((f"{blk.site}.hook_mlp_in", g.receiver(L, "mlp"), False, g.sender(L, None)))
        return out + [(f"{self.blocks[-1].site}.hook_resid_post", len(g.receivers) - 1, False, len(g.senders))]

    def gradients(self, alphas: list[float]) -> torch.Tensor:
        """Mean over `alphas` of ∂M/∂(each receiver's input) [R, T, D], M on the clean prompt whose embeddings are
        corrupt + α·(clean − corrupt) (α = 1: the clean run itself)."""
        clean, corrupt = self.acts["clean"][0], self.acts["corrupt"][0]  # [T, D]
        B = len(alphas)
        alpha = torch.tensor(alphas, device=clean.device)[:, None, None]  # [B, 1, 1]
        path = corrupt + alpha * (clean - corrupt)  # [B, T, D]
        probes: dict[str, torch.Tensor] = {}

        def probe(x, name):
            probes[name] = torch.zeros_like(x, requires_grad=True)
            return x + probes[name]

        hooks = self.receiver_hooks()
        fixes = {name: probe for name, *_ in hooks}
        if any(a != 1.0 for a in alphas):
            fixes[self.embed_hook] = lambda x, name: path.to(x.dtype)
        inp = Inputs(self.clean.ids.expand(B, -1), self.clean.tokens)
        fwd = self.lm.forward(inp, interventions=fixes, records=False, grad=True, split_inputs=True)
        grads = torch.autograd.grad(self.metric(fwd.logits).sum(), [probes[n] for n, *_ in hooks])
        out = torch.zeros(len(self.graph.receivers), *clean.shape, device=clean.device)  # [R, T, D]
        for (_, i, per_head, _), g in zip(hooks, grads):
            g = g.float().mean(0)  # the mean over the path's points
            if per_head:
                out[i:i + g.shape[1]] = g.transpose(0, 1)  # [T, n, D] -> [n, T, D]
            else:
                out[i] = g
        return out

    # -- circuits -----------------------------------------------------------------------------------
    @torch.no_grad()
    def circuit_m(self, keep: torch.Tensor) -> torch.Tensor:
        """M [K] of K circuit runs on the clean prompt; keep bool [K, S, R]: each receiver reads, over its senders,
        this run's activation where the edge is kept and the corrupted activation elsewhere."""
        K = keep.shape[0]
        corrupt = self.acts["corrupt"]  # [S, T, D]
        off = (~keep & self.valid).to(corrupt.dtype)  # [K, S, R]
        delta = torch.zeros(corrupt.shape[0], K, *corrupt.shape[1:], device=corrupt.device)  # [S, K, T, D]
        g = self.graph

        def record(first: int, heads: bool):
            def fn(x, name):
                now = x.float().permute(2, 0, 1, 3) if heads else x.float()[None]  # [n, K, T, D]
                delta[first:first + now.shape[0]] = now - corrupt[first:first + now.shape[0], None]
                return x
            return fn

        def receive(first: int, per_head: bool, upto: int):
            def fn(x, name):
                if not per_head:
                    w = off[:, :upto, first]  # [K, s]
                    return x - torch.einsum("ks,sktd->ktd", w, delta[:upto]).to(x.dtype)
                w = off[:, :upto, first:first + x.shape[2]]  # [K, s, n]
                return x - torch.einsum("ksn,sktd->ktnd", w, delta[:upto]).to(x.dtype)  # Σ_s (now − corrupt)
            return fn

        fixes = {self.embed_hook: record(0, False)}
        for L, blk in enumerate(self.blocks):
            fixes[f"{blk.attn.site}.hook_result"] = record(g.sender(L, 0), True)
            fixes[f"{blk.site}.hook_mlp_out"] = record(g.sender(L), False)
        for name, first, per_head, upto in self.receiver_hooks():
            fixes[name] = receive(first, per_head, upto)
        inp = Inputs(self.clean.ids.expand(K, -1), self.clean.tokens)
        fwd = self.lm.forward(inp, interventions=fixes, records=False, split_inputs=True)
        return self.metric(fwd.logits)
