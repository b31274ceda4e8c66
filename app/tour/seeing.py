"""Tour steps beyond text attention: a Vision Transformer's rollout on a generated image (against the object
that decides the label) and a mixture of experts' router."""

from __future__ import annotations

import numpy as np
from attnlab.analysis.probes import patch_maps as vision
from attnlab.analysis.probes.image_run import prediction, region_report, run_map
from attnlab.app import state
from attnlab.app.figures.image import overlay_figure
from attnlab.app.figures.routing import gate_heatmap
from attnlab.app.tour.core import View, box, fit, pct, tok
from attnlab.app.tour.look import preset

VIT, MOE = "lecture-vit", "lecture-moe"
SAMPLES = 6  # the Vision page's samples per seed


def vit(present: bool) -> View:
    """Topic 13: patches and CLS; the rollout map on the image and its share on the deciding objects."""
    info = state.model_info(VIT)
    patch, size = int(info["patch_size"]), int(info["image_size"])
    grid = (size // patch, size // patch)
    sample = state.shape_samples(SAMPLES, 0, "eval", size)[0]
    view = state.image_view(VIT, sample.image)
    run = state.image_capture(VIT, view, "eager")
    region = vision.patch_region(sample.mask, grid)
    m = run_map(run, "rollout")
    share = next(r for r in region_report({"rollout": m}, region) if r["map"] == "rollout")
    (top, prob), *_ = prediction(run)
    dist = vision.mean_attention_distance(run, grid, patch).mean(-1)  # [L]: pixels, head mean
    fig = overlay_figure(view, m, present=present, outline=region, title=f"{VIT}: attention rollout from CLS")
    numbers = {"grid": list(grid), "patch": patch, "tokens": len(run.tokens), "prediction": top, "probability": prob,
               "label": sample.label_name, "share": float(share["share inside"]), "chance": float(share["chance"]),
               "distance_first": float(dist[0]), "distance_last": float(dist[-1])}
    text = (f"The {size}×{size} image is cut into {grid[0]}×{grid[1]} patches of {patch} px, each linearly embedded, "
            f"plus a learned [CLS]: {len(run.tokens)} tokens, no causal mask. It predicts {tok(top)} (p = "
            f"**{prob:.2f}**; the label: {tok(sample.label_name)}); the rollout puts **{pct(share['share inside'])}** "
            f"of its mass on the two deciding objects (chance {pct(share['chance'])}). Mean attention distance goes from "
            f"{dist[0]:.1f} px in layer 0 to {dist[-1]:.1f} px in layer {len(dist) - 1}.")
    params = {"vit_model": VIT, "v_source": "sample", "v_seed": 0, "v_sample": 0, "v_map": "rollout"}
    return View(fit(fig, present), text, numbers, "the cyan outline: the two objects that decide the label", params)


def moe(present: bool) -> View:
    """Topic 14: the router's weights per token and expert at layer 0, and the experts' load."""
    p = preset(MOE, "decoder-retrieval-2")
    r, _ = state.route_text(MOE, p.text, None, "eager")
    layer, E = 0, r.n_experts
    busiest = int(np.argmax(r.load[layer]))
    fig = gate_heatmap(r.gates[layer], r.tokens, chosen=r.choice[layer], present=present,
                       title=f"{MOE}, layer {layer}: router weight per token and expert")
    box(fig, busiest, busiest, 0, len(r.tokens) - 1, "")
    numbers = {"experts": E, "top_k": r.top_k, "busiest": busiest, "load": float(r.load[layer, busiest]),
               "uniform": r.uniform, "entropy": float(r.entropy[layer].mean()), "max_entropy": float(np.log2(E))}
    text = (f"The MLP of each block is replaced by {E} expert MLPs and a router that sends each token to its top "
            f"{r.top_k}: more parameters, the same compute per token. At layer {layer} expert E{busiest} takes "
            f"**{pct(r.load[layer, busiest])}** of the token slots (uniform {pct(r.uniform)}); the router's mean "
            f"entropy is **{r.entropy[layer].mean():.2f}** bits of at most {np.log2(E):.0f} — a load-balancing loss "
            "keeps every expert in use.")
    params = {"model": MOE, "preset": p.id, "rt_layer": layer}
    return View(fit(fig, present), text, numbers, f"expert E{busiest}: the busiest column", params)
