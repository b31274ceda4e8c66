"""The real-size section on a GPU: a random bf16 checkpoint in a published shape (default Llama-3.1-8B), loaded by
attnlab and by transformers on one CUDA GPU in one process, one after the other: load seconds, peak and held GPU
memory, the fused forward vs a lazy capture (CUDA-event medians) and one head's pattern from the lazy record, beside
transformers' sdpa forward and eager forward with output_attentions. JSON to $OUT/real-size-cuda.json.

    python3 scripts/gpu_real_size.py [--shape llama-3.1-8b] [--lengths 512,4096] [--device cpu]   (cpu: a dry run)
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
from attnlab.bench.real_size import SHAPES, byte_tokenizer, llama3_rope  # noqa: E402

SHAPES = SHAPES | {"llama-3.1-8b": ("LlamaConfig", dict(  # the published config's hyperparameters
    vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
    num_key_value_heads=8, head_dim=128, max_position_embeddings=131072, rms_norm_eps=1e-5, tie_word_embeddings=False,
    rope_parameters=llama3_rope(8.0)))}
GB = 1024 ** 3


def build(shape: str, folder: Path, device: str) -> float:
    """The random bf16 checkpoint, drawn on `device` tensor by tensor; its bytes."""
    import transformers
    from safetensors.torch import save_file

    conf_name, fields = SHAPES[shape]
    conf = getattr(transformers, conf_name)(**fields, bos_token_id=0, eos_token_id=0, dtype="bfloat16")
    with torch.device("meta"):
        shapes = {k: v.shape for k, v in transformers.AutoModelForCausalLM.from_config(conf).state_dict().items()}
    gen = torch.Generator(device=device).manual_seed(0)
    state = {k: torch.ones(s, dtype=torch.bfloat16) if k.endswith("norm.weight") else
             (torch.randn(s, generator=gen, device=device, dtype=torch.bfloat16) * 0.02).cpu() for k, s in shapes.items()}
    if conf.tie_word_embeddings:
        state.pop("lm_head.weight", None)  # tied: the checkpoint holds the embedding once
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    conf.save_pretrained(folder)
    byte_tokenizer().save(str(folder / "tokenizer.json"))
    return sum(t.numel() * 2 for t in state.values())


def timed(fn, device: str, repeats: int = 3) -> float:
    """Median milliseconds of fn after one warm-up (CUDA events on a GPU); what fn returns (logits, a capture) is freed
    after the clock stops, for both alike."""
    fn()
    out = []
    for _ in range(repeats):
        if device == "cuda":
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            kept = fn()  # held past the end event: the run is timed, not the freeing of what it returned
            b.record()
            torch.cuda.synchronize()
            out.append(a.elapsed_time(b))
            del kept
        else:
            t = time.perf_counter()
            kept = fn()
            out.append((time.perf_counter() - t) * 1000)
            del kept
    return sorted(out)[len(out) // 2]


def median(xs: list[float]) -> float:
    return sorted(xs)[len(xs) // 2]


def paired(fa, fb, device: str, rounds: int = 25) -> tuple[list[float], list[float]]:
    """Milliseconds of fa and fb in interleaved rounds (a, b, a, b, …) after one warm-up of each; Python's garbage
    collector runs before each timed call (not inside it), as for both alike."""
    fa(), fb()
    a, b = [], []
    for _ in range(rounds):
        gc.collect()
        a.append(timed(fa, device, repeats=1))
        gc.collect()
        b.append(timed(fb, device, repeats=1))
    return a, b


def profiled(fa, fb, device: str) -> dict:
    """Self CPU and CUDA milliseconds of one fa and one fb under torch.profiler, and fb's top CPU operators."""
    if device != "cuda":
        return {}
    from torch.profiler import ProfilerActivity, profile

    row = {}
    for name, fn in (("forward", fa), ("capture", fb)):
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p:
            fn()
            torch.cuda.synchronize()
        ev = p.key_averages()
        row[f"{name}_self_cpu_ms"] = sum(e.self_cpu_time_total for e in ev) / 1000
        row[f"{name}_self_cuda_ms"] = sum(getattr(e, "self_device_time_total", 0) for e in ev) / 1000
        row[f"{name}_top_cpu"] = ev.table(sort_by="self_cpu_time_total", row_limit=10)
    return row


def gpu_bytes(device: str) -> tuple[int, int]:
    if device != "cuda":
        return 0, 0
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated(), torch.cuda.memory_allocated()


def reset(device: str) -> None:
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def ours(folder: Path, device: str, lengths) -> dict:
    from attnlab.model import hooks

    import attnlab as al

    reset(device)
    t = time.perf_counter()
    lm = al.load(str(folder), dtype=torch.bfloat16, device=device)
    load_s = time.perf_counter() - t
    peak, held = gpu_bytes(device)
    row = {"load_s": load_s, "peak_gb": peak / GB, "held_gb": held / GB}
    with torch.no_grad():
        for T in lengths:
            ids = ((torch.arange(T)[None] * 7 + 3) % 300).to(device)  # [1, T]

            def capture(ids=ids):
                with hooks.capture() as cap:
                    lm.model(ids, backend="flash")
                return cap
            fwd, cpt = paired(lambda ids=ids: lm.model(ids, backend="flash"), capture, device)
            row[f"forward_ms_{T}"], row[f"capture_ms_{T}"] = median(fwd), median(cpt)
            row[f"capture_ratio_{T}"] = median([c / f for f, c in zip(fwd, cpt)])  # per round, interleaved
            row[f"profile_{T}"] = profiled(lambda ids=ids: lm.model(ids, backend="flash"), capture, device)
            cap = capture()
            rec = cap[cap.sites[-1]]
            t = time.perf_counter()
            rec.pattern(0)
            row[f"pattern_s_{T}"] = time.perf_counter() - t  # one head of the last layer, recomputed from q and k
    return row


def theirs(folder: Path, device: str, lengths) -> dict:
    import transformers

    reset(device)
    t = time.perf_counter()
    hf = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.bfloat16, device_map=device,
                                                           attn_implementation="sdpa").eval()
    load_s = time.perf_counter() - t
    peak, held = gpu_bytes(device)
    row = {"load_s": load_s, "peak_gb": peak / GB, "held_gb": held / GB}
    with torch.no_grad():
        for T in lengths:
            ids = ((torch.arange(T)[None] * 7 + 3) % 300).to(device)
            row[f"forward_ms_{T}"] = timed(lambda ids=ids: hf(ids), device)
            hf.set_attn_implementation("eager")
            try:
                row[f"attentions_ms_{T}"] = timed(lambda ids=ids: hf(ids, output_attentions=True), device)
            except torch.OutOfMemoryError:
                row[f"attentions_ms_{T}"] = None
            hf.set_attn_implementation("sdpa")
    return row


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--shape", default="llama-3.1-8b", choices=list(SHAPES))
    p.add_argument("--lengths", default="512,4096")
    p.add_argument("--device", default="cuda")
    a = p.parse_args()
    lengths = [int(x) for x in a.lengths.split(",")]
    out = Path(os.environ.get("OUT", "gpu-out"))
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        t = time.perf_counter()
        weights = build(a.shape, Path(tmp), a.device)
        result = {"shape": a.shape, "device": torch.cuda.get_device_name(0) if a.device == "cuda" else "cpu",
                  "torch": torch.__version__, "weights_gb": weights / GB, "build_s": time.perf_counter() - t}
        print(json.dumps(result), flush=True)
        for who, fn in (("attnlab", ours), ("transformers", theirs)):
            try:
                result[who] = fn(Path(tmp), a.device, lengths)
            except Exception as e:  # noqa: BLE001 — the other side still runs
                result[who] = {"error": f"{type(e).__name__}: {e}"[:500]}
            print(who, json.dumps(result[who]), flush=True)
    (out / "real-size-cuda.json").write_text(json.dumps(result, indent=1))
