"""Long inputs (/long-inputs): up to the model's context (random-long-decoder: 4,096 tokens on the CPU, 32,768 on
a CUDA GPU) in one fused pass; a pooled overview of any head and any window of it at full resolution, with exact values."""

import streamlit as st
from attnlab.app import longinput as L
from attnlab.app import state
from attnlab.app.downloads import downloads, matrix_csv
from attnlab.app.figures.overview import overview_heatmap, payload_bytes, window_heatmap
from attnlab.app.frame import chart, options, page, presenting
from attnlab.app.inputs import FOLDER, URL_TEXT_LIMIT, needs_converted
from attnlab.app.url_state import URL, index, select, url_active
from attnlab.model.registry import model_choices

DEFAULT_MODEL = "random-long-decoder"


def _fill_sample(n_chars: int) -> None:
    st.session_state["long_text"] = L.long_sample(n_chars)
    for k in ("long_q0", "long_k0"):  # a new text: the window starts again at its default place
        st.session_state.pop(k, None)


def _number(label: str, key: str, hi: int, default: int, where) -> int:
    """A position 0..hi, seeded from the URL on a bookmark's first run, clamped to this text, kept in the URL."""
    ss = st.session_state
    if key not in ss:
        raw = st.query_params.get(key) if url_active() else None
        digits = raw is not None and raw.isascii() and raw.isdigit() and len(raw) <= 12  # not '²', not 5,000 digits
        ss[key] = int(raw) if digits else default
    ss[key] = min(max(int(ss[key]), 0), hi)
    value = int(where.number_input(label, min_value=0, max_value=hi, step=1, key=key))
    ss.setdefault(URL, {})[key] = str(value)
    return value


with page("Long inputs", "What does one head do across thousands of tokens? The whole matrix pooled, then any "
                         "window of it exactly.", icon=":material/straighten:"):
    present = presenting()
    ss = st.session_state
    side = st.sidebar  # the inputs sit in the sidebar, as on every page
    side.markdown("**Model and text**")
    choices = model_choices()
    name = select("Model", [*choices, FOLDER], "long_model",
                  DEFAULT_MODEL if DEFAULT_MODEL in choices else choices[0], where=side,
                  help="Any model: its context is the limit. random-long-decoder reads 4,096 tokens on the "
                       "CPU and 32,768 on a CUDA GPU (attnlab app --device cuda); a local folder with a long "
                       "context works the same way.")
    if name == FOLDER:
        if "long_folder" not in ss:
            ss["long_folder"] = (st.query_params.get("long_folder") if url_active() else None) or ""
        name = side.text_input("Model folder", key="long_folder", placeholder="/path/to/model-folder").strip()
        ss.setdefault(URL, {})["long_folder"] = name
        if not name:
            st.info("Type the path of a model folder.")
            st.stop()
    info = state.model_info(name)
    if not info["can"].internals:
        st.info(needs_converted(name, "page runs the fused kernel (sdpa) and keeps q and k"), icon=":material/info:")
        st.stop()
    context = int(info["context"])
    full = int(info.get("full_context", context))
    more = f" (the CPU limit; a CUDA GPU run reads {full:,})" if full > context else ""
    n_sample = L.sample_chars(context)
    side.button(f"Fill a long sample ({n_sample:,} characters)", key="long_fill", on_click=_fill_sample,
                args=(n_sample,), help="Random nonsense words repeated every ~1/8 of the text: a copy of every "
                                       "stretch appears earlier, which induction heads look back to.")
    if "long_text" not in ss:
        raw = st.query_params.get("long_text") if url_active() else None
        ss["long_text"] = raw or ""
    text = side.text_area("Text", key="long_text", height=140,
                          placeholder=f"Paste up to {context:,} tokens, or fill the long sample.")
    st.markdown(f"**{name}**: {info['kind']}, context **{context:,} tokens**{more}, {info['layers']} layers × "
                f"{info['heads']} heads. The text runs once on the fused kernel (sdpa); only q and k are kept, "
                "and the rows shown are recomputed from them.")
    if len(text) <= URL_TEXT_LIMIT and text:
        ss.setdefault(URL, {})["long_text"] = text
    if not text.strip():
        st.info(f"The text is empty. Paste up to {context:,} tokens, or press **Fill a long sample**.")
        st.stop()

    cap = state.long_capture(name, text)  # an over-long text stops here with the model's context in the message
    T, n_layers = len(cap.text_tokens), len(L.text_records(cap))
    with options("Head and window"):
        c1, c2, c3 = st.columns(3)
        layer = index("Layer", n_layers, "long_layer", n_layers - 1, where=c1)
        head = index("Head", cap.n_heads, "long_head", 0, where=c2)
        how = select("Pooling", ("max", "mean"), "long_pool", "max", where=c3, horizontal=True,
                     help="What one overview cell shows of its block of weights (masked cells ignored).")
        c1, c2, c3 = st.columns(3)
        size = select("Window size", L.WINDOW_SIZES, "long_size", 128, where=c1, horizontal=True,
                      help=f"Up to {L.MAX_WINDOW}×{L.MAX_WINDOW} weights at full resolution.")
        side = min(size, T)
        q0 = _number("First query row", "long_q0", T - side, T - side, c2)
        k0 = _number("First key column", "long_k0", T - side, T - side, c3)

    win = L.head_window(cap, layer, head, q0, k0, size)
    ov = state.long_overview(name, text, layer, head, how)
    where = "encoder self-attention, " if cap.text_group == "encoder" else ""
    bq, bk = ov.block
    fig_o = overview_heatmap(ov.pooled, ov.q_edges, ov.k_edges, how=how, present=present,
                             window=(win.q0, win.q1, win.k0, win.k1),
                             title=f"{where}layer {layer}, head {head}: all {T:,} tokens"
                                   + (f" ({how} over {bq}×{bk} blocks)" if bq * bk > 1 else ""))
    fig_w = window_heatmap(win.values, win.mask, cap.text_tokens, win.q0, win.k0, present=present,
                           title=f"rows {win.q0}–{win.q1 - 1}, keys {win.k0}–{win.k1 - 1} (exact)")
    left, right = st.columns(2, gap="medium")
    with left:
        chart(fig_o, key="long-overview", name=f"overview-L{layer}H{head}")
        st.caption(f"Each cell is the {how} of a {bq}×{bk} block of weights; grey = masked. Colours top out at the "
                   f"99th percentile ({fig_o.layout.meta['cmax']:.3g}), so the few near-1 weights of the first "
                   "tokens do not wash out the rest. The orange box is the window on the right. Hover for the "
                   "block's rows, columns and value.")
    with right:
        chart(fig_w, key="long-window", name=f"window-L{layer}H{head}-{win.q0}-{win.k0}")
        st.caption("Every weight of the window, unpooled: the softmax ran over the whole row, so these are the "
                   "model's own values. Axes are token positions; hover for the tokens and the weight.")
    sent_o, sent_w = payload_bytes(fig_o), payload_bytes(fig_w)
    st.caption(f"{T:,} tokens · kernel: {', '.join(cap.kernels)} · capture {cap.seconds * 1e3:,.0f} ms (once per text; cached) · "
               f"overview {ov.ms:,.0f} ms · window {win.ms:,.1f} ms · sent {(sent_o + sent_w) / 1e6:.2f} MB "
               f"(overview {sent_o / 1e6:.2f} MB + window {sent_w / 1e6:.2f} MB)")
    downloads(f"long-L{layer}H{head}-{win.q0}-{win.k0}",
              csv=matrix_csv(win.values, cap.text_tokens[win.q0:win.q1], cap.text_tokens[win.k0:win.k1]),
              npz={"window": win.values, "window_mask": win.mask, "window_origin": [win.q0, win.k0],
                   "overview": ov.pooled, "q_edges": ov.q_edges, "k_edges": ov.k_edges},
              json_obj={"model": name, "layer": layer, "head": head, "pooling": how, "q0": win.q0, "k0": win.k0,
                        "tokens": cap.text_tokens[win.q0:win.q1], "keys": cap.text_tokens[win.k0:win.k1],
                        "window": win.values})
