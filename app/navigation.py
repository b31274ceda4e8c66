"""The app's pages: (file in pages/, title, URL path, icon), and the sections of the navigation that group
them (every page visible, no "View more"). Keep the URL paths stable; icons are Material names (emoji render
as empty boxes in Debian's chromium)."""

from attnlab.data import data_folder

PAGES = [
    ("explore.py", "Explore", "", ":material/search:"),
    ("heatmaps.py", "Heatmaps", "heatmaps", ":material/grid_on:"),
    ("masks.py", "Masks", "masks", ":material/filter_alt:"),
    ("scores.py", "Score scales", "scores", ":material/equalizer:"),
    ("rollout.py", "Rollout & attribution", "rollout", ":material/account_tree:"),
    ("heads.py", "Heads", "heads", ":material/psychology:"),
    # part 2: mechanics
    ("kv_cache.py", "KV cache", "kv-cache", ":material/memory:"),
    ("backends.py", "Backends", "backends", ":material/speed:"),
    ("step_by_step.py", "Step by step", "step-by-step", ":material/calculate:"),
    ("cross_attention.py", "Cross-attention", "cross-attention", ":material/translate:"),
    ("positions.py", "Positions", "positions", ":material/pin_drop:"),
    ("generate.py", "Generate", "generate", ":material/edit_note:"),
    # issue #8: up to 4,096 tokens, a pooled overview and exact windows
    ("long_input.py", "Long inputs", "long-inputs", ":material/straighten:"),
    # issue #20: the block and permutation equivariance
    ("block.py", "Block", "block", ":material/view_agenda:"),
    ("permutation.py", "Permutation", "permutation", ":material/shuffle:"),
    # issue #18: mixture of experts
    ("routing.py", "Routing", "routing", ":material/alt_route:"),
    # issue #16: a Vision Transformer's attention on the image
    ("vision.py", "Vision", "vision", ":material/image:"),
    # issue #28: beyond attention maps
    ("lens.py", "Logit lens", "logit-lens", ":material/layers:"),
    ("patching.py", "Activation patching", "patching", ":material/healing:"),
    # issue #41: circuit discovery (EAP, EAP-IG)
    ("circuit.py", "Circuit", "circuit", ":material/hub:"),
    # issue #41: attention sinks and the StreamingLLM window test
    ("sinks.py", "Attention sinks", "sinks", ":material/anchor:"),
    # issue #30: the lecture as a guided tour
    ("tour.py", "Lecture tour", "tour", ":material/school:"),
]

# Section title -> URL paths, in navigation order. Every page of PAGES is in exactly one section.
SECTIONS = {
    "Look at attention": ["", "heatmaps", "heads", "rollout", "cross-attention", "vision"],
    "How it is computed": ["step-by-step", "scores", "masks"],
    "Block and positions": ["block", "positions", "permutation", "routing"],
    "Running a model": ["generate", "kv-cache", "backends", "long-inputs"],
    "Beyond attention": ["logit-lens", "patching", "circuit", "sinks"],
    "Lecture": ["tour"],
}
APP_ICON = str(data_folder("app") / "icon.png")  # a file the server sends: a Material name fetches from Google


def sections() -> dict[str, list[tuple[str, str, str, str]]]:
    """The PAGES entries grouped by SECTIONS (section title -> entries in section order)."""
    by_path = {p[2]: p for p in PAGES}
    return {title: [by_path[u] for u in paths] for title, paths in SECTIONS.items()}


def icon_of(title: str) -> str:
    """The navigation icon of the page with this title ('' for none)."""
    return next((p[3] for p in PAGES if p[1] == title), "")
