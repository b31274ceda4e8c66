"""`attnlab bench --real-size`: random checkpoints in the shapes people run (Llama-3.2-1B, Qwen2.5-3B; bf16
safetensors built here with transformers' own config classes), ours beside transformers, each measurement in
its own process: load time, peak and held memory (bench.load_meter), the fused forward vs a capture at
T = 128 and 512, one head's pattern at T = 512, and Explore's and Heatmaps' first run through AppTest.

Ours: sdpa forward without capture vs with records (lazy: q and k kept, patterns recomputed when read).
Transformers: sdpa forward vs eager with output_attentions (its only way to return attention). Forward and
capture alternate round by round; the ratio is the median of the per-round ratios.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import torch
from attnlab.bench.load_meter import measure_alternating as measure_loads


def llama3_rope(factor: float) -> dict:
    """Llama 3.x's rope_parameters (theta 500,000, original length 8,192) with its `factor`."""
    return {"rope_type": "llama3", "rope_theta": 500000.0, "factor": factor, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}


SHAPES = {  # name: (transformers config class, its fields) — the published configs' hyperparameters
    "llama-3.2-1b": ("LlamaConfig", dict(
        vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
        num_key_value_heads=8, head_dim=64, max_position_embeddings=131072, rms_norm_eps=1e-5,
        tie_word_embeddings=True, rope_parameters=llama3_rope(32.0))),
    "qwen2.5-3b": ("Qwen2Config", dict(
        vocab_size=151936, hidden_size=2048, intermediate_size=11008, num_hidden_layers=36, num_attention_heads=16,
        num_key_value_heads=2, max_position_embeddings=32768, rms_norm_eps=1e-6, tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})),
    # Llama-3.1-8B's layout (32 layers, 32 query and 8 k/v heads, llama3 RoPE) at a width where the host bounds the
    # forward, as it bounds the 8B's on a GPU at T = 512: what a capture adds in Python shows as it does there
    "llama-8b-layout": ("LlamaConfig", dict(
        vocab_size=32000, hidden_size=256, intermediate_size=512, num_hidden_layers=32, num_attention_heads=32,
        num_key_value_heads=8, head_dim=8, max_position_embeddings=131072, rms_norm_eps=1e-5,
        tie_word_embeddings=False, rope_parameters=llama3_rope(8.0))),
    # ~100 M parameters: the CPU test's size (tests/model/test_load_memory.py)
    "llama-100m": ("LlamaConfig", dict(
        vocab_size=32000, hidden_size=768, intermediate_size=2048, num_hidden_layers=8, num_attention_heads=12,
        num_key_value_heads=4, max_position_embeddings=2048, tie_word_embeddings=False)),
}
ABOUT = ("Random checkpoints in the published shapes (bf16 safetensors built here; `attnlab bench --real-size`), each "
         "number from its own process on the CPU, one thread. Load: the files read once first (both sides find them in "
         "the page cache), then ours and transformers' loads in turn, the order swapped each round, the median of the "
         "rounds: seconds of the load call (in brackets: until every weight was read once, what a first forward needs: "
         "transformers maps the file and reads it then); peak = VmHWM growth over the load and a read of every weight; "
         "held = VmRSS growth once every weight was read; both as GB and as a multiple of the weights' bf16 bytes. "
         "Forward / capture at T = 128 and 512: ours = sdpa forward with nothing capturing / with records (lazy: q and k"
         " kept); transformers = sdpa forward / eager with output_attentions (its only way to return attention). One "
         "head's pattern at the longer T: ours from the lazy record, transformers = an eager forward with "
         "output_attentions (it has no other way). Medians; capture / forward = the median of per-round ratios, the two "
         "timed alternately. llama-8b-layout is Llama-3.1-8B's layout (32 layers, 32 query and 8 k/v heads) at width "
         "256: its forward is bound by the host, as the 8B's is on a GPU at T = 512, so its ratio is what a capture adds"
         " in Python there (T = 16 and 128, ten times the rounds).")
LENGTHS = (128, 512)  # forward vs capture; one head's pattern at the longer
# the host-bound layout: lengths where the host still bounds its forward on a CPU, and ten times the rounds (a forward
# of milliseconds whose ratio moves by a few per cent from round to round)
HOST_BOUND = {"llama-8b-layout": (16, 128)}
TEXT = "the cat sat on the mat because the mat was warm and the dog ran in the park "


def build_checkpoint(shape: str, folder: Path, seed: int = 0) -> Path:
    """A random `shape` checkpoint in bf16 (model.safetensors, config.json, a byte-level tokenizer.json): the
    model's tensor names and shapes from transformers' class on the meta device, N(0, 0.02) weights and unit
    norms drawn tensor by tensor. Kept when the folder already holds one."""
    import transformers
    from safetensors.torch import save_file

    folder = Path(folder)
    if (folder / "model.safetensors").is_file():
        return folder
    conf_name, fields = SHAPES[shape]
    conf = getattr(transformers, conf_name)(**fields, bos_token_id=0, eos_token_id=0, dtype="bfloat16")
    with torch.device("meta"):
        shapes = {k: v.shape for k, v in transformers.AutoModelForCausalLM.from_config(conf).state_dict().items()}
    if conf.tie_word_embeddings:
        shapes.pop("lm_head.weight")
    gen = torch.Generator().manual_seed(seed)
    state = {k: torch.ones(s, dtype=torch.bfloat16) if k.endswith("norm.weight") else
             (torch.randn(s, generator=gen) * 0.02).to(torch.bfloat16) for k, s in shapes.items()}
    folder.mkdir(parents=True, exist_ok=True)
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    conf.save_pretrained(folder)
    byte_tokenizer().save(str(folder / "tokenizer.json"))
    return folder


def byte_tokenizer():
    """A byte-level BPE (a few hundred tokens; ids far below any real vocabulary)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<|endoftext|>"], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([TEXT] * 4, trainer)
    return tok


def _median_s(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return sorted(times)[len(times) // 2]


def _paired(forward, capture, repeats: int) -> dict:
    """Forward and capture timed alternately, round by round (a shared machine's load hits both alike): their
    medians and the median of the per-round ratios capture / forward."""
    forward(), capture()  # warm-up
    f, c = [], []
    for _ in range(repeats):
        for fn, out in ((forward, f), (capture, c)):
            t = time.perf_counter()
            fn()
            out.append(time.perf_counter() - t)
    ratios = sorted(b / a for a, b in zip(f, c))
    return {"forward_s": sorted(f)[len(f) // 2], "capture_s": sorted(c)[len(c) // 2],
            "ratio": ratios[len(ratios) // 2], "forward_all_s": f, "capture_all_s": c}


def capture_worker(folder: str, who: str, repeats: int, lengths=LENGTHS) -> dict:
    """Forward vs capture at `lengths` and one head's pattern at the longest (runs in the child process)."""
    ids = {T: (torch.arange(T)[None] * 7 + 3) % 300 for T in lengths}  # [1, T]
    pattern_t = max(lengths)
    out: dict = {"who": who}
    if who == "attnlab":
        from attnlab.model.inputs import Inputs
        from attnlab.model.registry import load

        lm = load(folder, dtype=torch.bfloat16)
        for T, x in ids.items():
            inp = Inputs(x, [str(i) for i in range(T)])

            def forward(inp=inp):  # the fused forward, nothing capturing
                with torch.no_grad():
                    lm.model.forward_inputs(inp, backend="sdpa")

            out[f"T{T}"] = _paired(forward, lambda inp=inp: lm.forward(inp, backend="sdpa"), repeats)
        x = ids[pattern_t]
        rec = lm.forward(Inputs(x, [str(i) for i in range(pattern_t)]), backend="sdpa").capture["blocks.0.attn"]
        out["pattern_s"] = _median_s(lambda: rec.pattern(head=0), repeats)
    else:
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.bfloat16, attn_implementation="sdpa").eval()

        def run(x, kernel, **kw):
            model.set_attn_implementation(kernel)
            with torch.no_grad():
                return model(x, use_cache=False, **kw)

        for T, x in ids.items():
            out[f"T{T}"] = _paired(lambda x=x: run(x, "sdpa"),
                                   lambda x=x: run(x, "eager", output_attentions=True), repeats)
        out["pattern_s"] = _median_s(lambda: run(ids[pattern_t], "eager", output_attentions=True)
                                     .attentions[0][0, 0].float().numpy(), repeats)
    return out


def pages_worker(folder: str) -> dict:
    """Explore's and Heatmaps' first run through AppTest on the folder (seconds; the page's bytes)."""
    from attnlab.analysis.machinery.bench_report import Payload
    from attnlab.bench.payload import page_payload

    os.environ["ATTNLAB_MODEL_ROOTS"] = str(Path(folder).parent)
    rows = {}
    for page in ("explore", "heatmaps"):
        t = time.perf_counter()
        row = page_payload(page, 0, model=folder, text=TEXT * 2)
        rows[page] = {"seconds": time.perf_counter() - t, "bytes": row.get(Payload.BYTES),
                      "error": row.get(Payload.ERROR)}
    return rows


def _child(kind: str, *args: str, timeout: float = 3600) -> dict:
    env = os.environ | {"OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    res = subprocess.run([sys.executable, "-m", "attnlab.bench.real_size", kind, *args], capture_output=True,
                         text=True, timeout=timeout, env=env)
    if res.returncode != 0:
        return {"error": (res.stderr.strip().splitlines() or ["failed"])[-1][:300]}
    return json.loads(res.stdout.strip().splitlines()[-1])


def measure_real_size(shapes, root: Path, repeats: int = 3, pages: bool = True, progress=print,
                      load_rounds: int = 5) -> dict:
    """{shape: {"attnlab": {...}, "transformers": {...}, "pages": {...}}}, every number from its own process."""
    out = {}
    for shape in shapes:
        progress(f"real size: building {shape}")
        folder = build_checkpoint(shape, Path(root) / shape)
        progress(f"real size: {shape} load, ours and transformers' in turn ({load_rounds} rounds)")
        loads = measure_loads(str(folder), load_rounds)
        row = {}
        for who in ("attnlab", "transformers"):
            row[who] = {"load": loads[who]}
            progress(f"real size: {shape} capture ({who})")
            lengths, rounds = (HOST_BOUND[shape], 10 * repeats) if shape in HOST_BOUND else (LENGTHS, repeats)
            row[who]["capture"] = _child("capture", str(folder), who, str(rounds), ",".join(map(str, lengths)))
        if pages:
            progress(f"real size: {shape} Explore and Heatmaps (AppTest)")
            row["pages"] = _child("pages", str(folder))
        out[shape] = row
    return out


def markdown(result: dict) -> str:
    """The side-by-side table of measure_real_size."""
    gb = 1e9
    lines = ["| shape | who | load s (ready s) | peak GB (× weights) | held GB (× weights) | forward / capture ms, "
             "shorter T | forward / capture ms, longer T | one head's pattern ms (longer T) |",
             "|---|---|---|---|---|---|---|---|"]
    for shape, row in result.items():
        for who in ("attnlab", "transformers"):
            ld, cap = row[who]["load"], row[who].get("capture", {})
            w = ld["weight_bytes"]
            ts = sorted(int(k[1:]) for k in cap if k[:1] == "T" and k[1:].isdigit())

            def fc(T, cap=cap):
                c = cap[f"T{T}"]
                return f"T={T}: {c['forward_s'] * 1e3:.1f} / {c['capture_s'] * 1e3:.1f} ({c['ratio']:.3f}×)"

            cells = [fc(T) for T in ts[:2]] + ["—"] * (2 - len(ts[:2]))
            pat = f"{cap['pattern_s'] * 1e3:.1f}" if "pattern_s" in cap else "—"
            ready = f" ({ld['ready_seconds']:.2f})" if "ready_seconds" in ld else ""
            lines.append(f"| {shape} | {who} | {ld['seconds']:.2f}{ready} | {ld['peak_bytes'] / gb:.2f} "
                         f"({ld['peak_bytes'] / w:.2f}×) | {ld['held_bytes'] / gb:.2f} ({ld['held_bytes'] / w:.2f}×) "
                         f"| {cells[0]} | {cells[1]} | {pat} |")
        for page, p in (row.get("pages") or {}).items():
            if isinstance(p, dict):
                lines.append(f"| {shape} | attnlab app: {page} (AppTest, first run) | {p.get('seconds', 0):.1f} s | "
                             f"{p.get('bytes') or p.get('error')} bytes | | | | |")
    return "\n".join(lines)


if __name__ == "__main__":
    kind, *rest = sys.argv[1:]
    if kind == "capture":
        print(json.dumps(capture_worker(rest[0], rest[1], int(rest[2]), [int(t) for t in rest[3].split(",")])))
    elif kind == "pages":
        print(json.dumps(pages_worker(rest[0]), default=str))
