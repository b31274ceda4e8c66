"""Vision (/vision): a Vision Transformer's attention on the image — from [CLS] or any patch, every head of a
layer, rollout and gradient rollout — against the region that decides the label; the ViT paper's two pictures
and the query–key view over a batch of images."""

import pandas as pd
import streamlit as st
from attnlab.analysis.attention.qk_projection import qk_points, qk_table
from attnlab.analysis.probes import patch_maps as vision
from attnlab.analysis.probes.context_mixing import refusal as mixing_refusal
from attnlab.analysis.probes.image_run import (
    ATTRIBUTIONS,
    FUSIONS,
    MAP_KINDS,
    MIXING,
    head_maps,
    mixing_map,
    prediction,
    region_report,
    run_map,
)
from attnlab.app import state
from attnlab.app.columns import column_px
from attnlab.app.downloads import downloads
from attnlab.app.figures.image import (
    distance_figure,
    image_figure,
    overlay_figure,
    overlay_mosaic,
    position_similarity_figure,
)
from attnlab.app.figures.qk import qk_scatter
from attnlab.app.figures.style import md
from attnlab.app.frame import chart, guard, options, page, presenting
from attnlab.app.inputs import BACKENDS
from attnlab.app.url_state import index, select, slider, toggle, token_select
from attnlab.app.vision_captions import aspect_note, distance_caption, position_caption
from attnlab.model.images import MAX_IMAGE_BYTES, decode_image
from attnlab.model.inputs import InputError
from attnlab.model.lecture.shapes import MIN_SIZE
from attnlab.model.registry import model_choices

N_SAMPLES = 6  # generated images per seed: the sample picker's choices and the query–key view's batch
SOURCES = {"sample": "a generated sample", "upload": "an upload"}
MAP_HELP = {"attention": "one layer's attention from the chosen token (one head or the mean)",
            "rollout": "attention multiplied through the layers (heads fused; the lowest weights discarded)",
            "attention norm": "the length of what each patch adds to the chosen token through the layer's attention, "
                              "‖Σ_h α_h v_h W_O^h‖ (Kobayashi et al. 2020)",
            "value zeroing": "how far the chosen token's output of the layer's block moves when a patch's value is "
                             "zeroed in every head, 1 − cosine, the row summing to 1 (Mohebbi et al. 2023)",
            "gradient rollout": "rollout of each pattern weighted by its gradient for the class",
            "relevance": "Chefer et al.'s gradient relevance of each patch for the class",
            "input × gradient": "each patch's embedding times the class logit's gradient (signed)",
            "integrated gradients": "gradients averaged from all-zero patch embeddings to the image, times the "
                                    "embeddings (signed; they sum to the logit's change)",
            "attention × gradient": "every attention weight times its gradient for the class, summed per key patch"}

with page("Vision", "Where does a Vision Transformer look — and is it where the answer is?"):
    present = presenting()
    choices = model_choices(kind="image")
    if not choices:
        st.info("No image model is installed here (the bundled lecture-vit is missing).")
        st.stop()
    folder = st.query_params.get("vit_model")  # a bookmarked folder (checked against the allowed roots on load)
    choices = choices + [folder] if folder and folder not in choices else choices
    name = select("Image model", choices, "vit_model", choices[0], where=st.sidebar,
                  help="Vision Transformers only; the other pages use the text model.")
    backend = select("Backend", BACKENDS, "backend", "eager", where=st.sidebar, show=not present)
    info = state.model_info(name)
    if not info["can"].reads_image:
        st.error(f"{md(name)} reads text, not images: choose a Vision Transformer.", icon=":material/error:")
        st.stop()
    n_layers, n_heads, patch = info["layers"], info["heads"], info["patch_size"]
    grid = (info["image_size"] // patch, info["image_size"] // patch)
    prefix, has_head = info.get("prefix", 1), bool(info["classes"])  # tokens before the patches; a classifier?
    if info["image_size"] < MIN_SIZE:
        st.info(f"{name} reads {info['image_size']} px images; generated samples need at least {MIN_SIZE} px, so "
                "this page has nothing to show for it.", icon=":material/aspect_ratio:")
        st.stop()

    source = select("Image", list(SOURCES), "v_source", "sample", horizontal=True, format_func=SOURCES.get)
    sample = None
    if source == "sample":
        c1, c2 = st.columns(2)
        seed = slider("Sample set (seed)", 0, 999, "v_seed", 0, where=c1)
        samples = state.shape_samples(N_SAMPLES, seed, "eval", info["image_size"])
        sample = samples[index("Sample", N_SAMPLES, "v_sample", 0, where=c2)]
        image, image_name = sample.image, sample.description
    else:
        samples = state.shape_samples(N_SAMPLES, 0, "eval", info["image_size"])  # the query–key view's batch
        up = st.file_uploader(f"A PNG or JPEG, at most {MAX_IMAGE_BYTES:,} bytes", type=["png", "jpg", "jpeg"],
                              key="v_upload")
        if up is None:
            st.info("Upload an image, or choose a generated sample above.")
            st.stop()
        try:
            image = decode_image(up.getvalue())
        except InputError as e:
            st.error(f"{str(e)[0].upper()}{str(e)[1:]}. Upload a PNG or JPEG under {MAX_IMAGE_BYTES:,} bytes, or "
                     "choose a generated sample.", icon=":material/error:")
            st.stop()
        image_name = f"upload {up.name}"
        note = aspect_note(image.shape, (info["image_size"], info["image_size"]))
        if note:
            st.info(note, icon=":material/aspect_ratio:")
    view = state.image_view(name, image)  # uint8 [h, w, 3]: what the model reads
    run = state.image_capture(name, view, backend)
    region = vision.patch_region(sample.mask, grid) if sample is not None else None

    c1, c2 = st.columns([3, 2])
    with c1:
        chart(image_figure(view, grid, present=present, outline=None if sample is None else sample.mask,
                           title=f"The image as {name} reads it: {grid[0]}×{grid[1]} patches of {patch} px"),
              key="image", width=column_px([3, 2], present)[0], name="vision-image")
    with c2:
        pred = prediction(run) if has_head else None
        if pred is None:
            st.markdown(f"**No prediction**: {md(name)} has no classification head, so the page shows its attention "
                        "alone (maps from the run, mean attention distance, position embeddings); gradient maps need "
                        "a class.")
        else:
            st.markdown("**Prediction**")
            st.dataframe(pd.DataFrame(pred, columns=["class", "probability"]), hide_index=True, column_config={
                "probability": st.column_config.ProgressColumn(min_value=0.0, max_value=1.0, format="%.3f")})
        if sample is not None:
            verdict = ("" if pred is None else ": the model's top class is correct" if pred[0][0] == sample.label_name
                       else f": the model's top class ({md(pred[0][0])}) is wrong")
            st.markdown(f"True label: **{md(sample.label_name)}**{verdict}. {md(sample.description, 120)}; the "
                        "cyan outline is the two objects that decide the label (where the red one lies relative "
                        "to the blue one).")

    st.subheader("Where it looks")
    classes = state.image_classes(name)
    with options("Maps"):
        mixes = mixing_refusal(state.model(name)) is None  # context mixing: a converted ViT
        kinds = [k for k in (MAP_KINDS if has_head else MAP_KINDS[:4]) if mixes or k not in MIXING]
        kind = select("Map", kinds, "v_map", "attention", horizontal=True, help=" · ".join(
            f"{k}: {v}" for k, v in MAP_HELP.items()))
        c1, c2, c3 = st.columns(3)
        layer = index("Layer", n_layers, "v_layer", 0, where=c1)  # layer 0: the first layer (lecture-vit's card names its heads)
        head = select("Head", ["mean", *range(n_heads)], "v_head", "mean", where=c2,
                      format_func=lambda h: "mean of the heads" if h == "mean" else f"head {h}")
        query = token_select("From token", run.tokens, "v_query", 0, where=c3,
                             help="CLS, or a patch (row, column): whose attention the map and the mosaic show")
        c1, c2, c3 = st.columns(3)
        fusion = select("Head fusion (rollout)", FUSIONS, "v_fusion", "mean", where=c1, horizontal=True)
        discard = slider("Discard ratio (rollouts)", 0.0, 0.95, "v_discard", 0.0, step=0.05, where=c2,
                         help="The lowest share of each layer's weights set to 0 before the rollout (vit-explain).")
        target = select("Class explained (gradients)", ["predicted", *classes], "v_target", "predicted", where=c3,
                        show=has_head)
    tid = None if target == "predicted" else classes.index(target)
    maps = {"attention": run_map(run, "attention", layer=layer, head=None if head == "mean" else head, query=query,
                                 prefix=prefix),
            "rollout": run_map(run, "rollout", fusion=fusion, discard=discard, prefix=prefix)}
    if mixes:
        maps |= {k: mixing_map(state.image_mixing(name, view, k), layer, query, prefix) for k in MIXING}
    if has_head:
        maps |= {"gradient rollout": state.image_gradient_map(name, view, "gradient rollout", tid, discard),
                 "relevance": state.image_gradient_map(name, view, "relevance", tid, 0.0),
                 **{k: state.image_gradient_map(name, view, k, tid, 0.0) for k in ATTRIBUTIONS}}
    what = {"attention": f"layer {layer}, {'mean of the heads' if head == 'mean' else f'head {head}'}, from "
                         f"{run.tokens[query]}", "rollout": f"rollout ({fusion} fusion, discard {discard:.2f})",
            "gradient rollout": f"gradient rollout (discard {discard:.2f}, class {target})",
            "relevance": f"relevance (class {target})",
            **{k: f"{k}, layer {layer}, from {run.tokens[query]}" for k in MIXING},
            **{k: f"{k} (class {target})" for k in ATTRIBUTIONS}}[kind]
    chart(overlay_figure(view, maps[kind], present=present, outline=region, query=query - prefix if query >= prefix
                         and kind == "attention" else None, title=what,
                         value_name={"attention": "weight", "rollout": "weight", "attention norm": "length",
                                     "value zeroing": "share"}.get(kind, "score")), key="overlay", name="vision-map")
    if region is not None:
        report = region_report(maps, region)
        share = next(r for r in report if r["map"] == kind)
        st.caption(f"{100 * share['share inside']:.0f}% of this map's mass lies on the answer's patches (chance: "
                   f"{100 * share['chance']:.0f}%, their share of the image); its top patch is "
                   f"{'inside' if share['top patch inside'] else 'outside'} the outline.")
        st.dataframe(pd.DataFrame(report), hide_index=True, column_config={
            c: st.column_config.NumberColumn(c, format="%.3f") for c in ("share inside", "chance")})
    else:
        report = None
        st.caption("An upload has no known answer region: the outline and the shares are shown for the samples.")

    st.subheader(f"Every head of layer {layer}")
    per_head = head_maps(run, layer, query, prefix)  # [H, rows, cols]
    chart(overlay_mosaic(view, per_head, [f"head {h}" for h in range(n_heads)], present=present, outline=region,
                         title=f"Attention from {run.tokens[query]} at layer {layer} (each head scaled to its max)"),
          key="mosaic", name="vision-heads")

    st.subheader("The ViT paper's two pictures")
    distance = vision.mean_attention_distance(run, grid, patch, prefix)  # [L, H] pixels
    c1, c2 = st.columns(2)
    with c1:
        chart(distance_figure(distance, present=present, title="Mean attention distance per head"),
              key="distance", width=column_px(2, present)[0], name="vision-distance")
        st.caption(distance_caption(distance, patch, grid))
    with c2, guard():
        sim = state.position_similarity(name)  # [N, rows, cols]
        chart(position_similarity_figure(sim, present=present, title="Position embeddings: cosine similarity"),
              key="positions", width=column_px(2, present)[0], name="vision-positions")
        st.caption(position_caption(sim, grid))

    st.subheader("Queries and keys of one head")
    batch = ([] if sample is not None else [(image_name, view)]) + [(f"sample {i}: {s.label_name}", s.image)
                                                                     for i, s in enumerate(samples)]
    c1, c2, c3 = st.columns(3)
    sites = list(run.records)
    qk_site = select("Attention site", sites, "v_qk_site", sites[-1], where=c1)
    qk_head = index("Head", n_heads, "v_qk_head", 0, where=c2)
    aligned = toggle("Align keys to queries", "v_qk_align", True, where=c3)
    runs = [state.image_capture(name, im, backend) for _, im in batch]
    points = qk_points(runs, qk_site, qk_head, [n for n, _ in batch], normalise=aligned)
    chart(qk_scatter(points, present=present, title=f"{qk_site}, head {qk_head}: queries and keys of {len(batch)} "
                                                    "images (PCA)"), key="qk", name="vision-qk")
    st.caption("Each dot is one token (CLS or a patch r,c) of one image: its query or key for this head, exactly "
               "what is dotted, projected on the principal components of all of them.")

    grid_df = pd.DataFrame(maps[kind], index=[f"row {r}" for r in range(grid[0])],
                           columns=[f"col {c}" for c in range(grid[1])])
    downloads("vision", csv=grid_df.to_csv(index_label=kind), npz={**{ATTRIBUTIONS.get(k, k.replace(" ", "_")): m for k, m in maps.items()},
                                                                   "heads": per_head, "distance": distance},
              json_obj={"model": name, "image": image_name, "prediction": pred, "map": kind, "layer": layer,
                        "head": head, "query": run.tokens[query], "fusion": fusion, "discard": discard,
                        "maps": maps, "region_share": report, "mean_attention_distance": distance})
    downloads("vision-qk", csv=pd.DataFrame(qk_table(points)))
