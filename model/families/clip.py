"""CLIP (CLIPModel): its vision tower only, on the Vision page; the text tower and the projections are left out
(model/families/vision_towers.py)."""

from attnlab.model.families.family import Family, fixed
from attnlab.model.families.vision_towers import convert_clip_vision, read_prep, vision_config

FAMILY = Family("clip", "CLIP's vision tower (CLIPModel checkpoints; the text tower is not loaded)",
                lambda hf, names=None: vision_config(hf, "clip"), convert_clip_vision, fixed("CLIPVisionModel"),
                image_prep=read_prep)
