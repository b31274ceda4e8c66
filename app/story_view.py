"""Explore's side by side for the first lecture's story: SmolLM2 on the story as the lecture tells it, beside
lecture-decoder on its own preset of it (analysis/probes/story_answer.py), measured live and cached."""

from __future__ import annotations

import pandas as pd
import streamlit as st
from attnlab.analysis.probes.story_answer import story_answer
from attnlab.app import state
from attnlab.app.frame import guard
from attnlab.app.presets import Preset, presets

STORY_PRESETS = {"smollm2": "smollm2-story-1", "lecture-decoder": "decoder-story-1"}  # model → its story preset
story = state.on_text(story_answer, entries=4, spinner="Reading the story on both models…")  # (name, text, src)


def story_side_by_side(model: str, preset: Preset | None) -> None:
    """Both models on the story, when `preset` is one of STORY_PRESETS and its toggle is on: on by default for
    smollm2; off for lecture-decoder, whose story opens the app (SmolLM2 then loads only when asked)."""
    if preset is None or STORY_PRESETS.get(model) != preset.id:
        return
    if not st.toggle("Show the same story on both models (SmolLM2-135M beside lecture-decoder)",
                     value=model == "smollm2", key=f"story-both-{model}"):
        return
    st.markdown("#### The same story on both models")
    for col, name in zip(st.columns(len(STORY_PRESETS)), STORY_PRESETS):
        with col, guard():
            text = next(p.text for p in presets(name) if p.id == STORY_PRESETS[name])
            a = story(name, text)
            shown = " · ".join(t.replace("`", "'") for t in a.continuation)  # a code span: shown as it is
            st.markdown(f"**{name}** continues the story with `{shown}`")
            st.dataframe(pd.DataFrame([{"step": n + 1, "token": t, "id": i, "p": p}
                                       for n, step in enumerate(a.steps) for t, i, p in step]),
                         hide_index=True, key=f"story-top-{name}")
            st.dataframe(pd.DataFrame([{"fact": f.fact, "tokens": ", ".join(map(str, f.positions)),
                                        "head": f"{f.head[0]}.{f.head[1]}", "weight": f.weight,
                                        "mean of all heads": f.mean} for f in a.facts]),
                         hide_index=True, key=f"story-facts-{name}")
    st.caption("Top: the top 5 of each of the first two greedy steps (SmolLM2 writes a space before a digit, "
               "so its answer's digit comes in step 2). Below: the answer row (the story's last token) — for each "
               "fact, the head that puts the most attention on its tokens, that weight, and the mean over every "
               "head. The story's text differs only in case and tokens: lecture-decoder reads lower-case words.")
