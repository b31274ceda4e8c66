"""CLIPVisionModel: CLIP's vision tower saved on its own (model/families/vision_towers.py)."""

from attnlab.model.families.family import Family, fixed
from attnlab.model.families.vision_towers import convert_clip_vision, read_prep, vision_config

FAMILY = Family("clip_vision_model", "CLIP's vision tower saved alone (CLIPVisionModel checkpoints)",
                lambda hf, names=None: vision_config(hf, "clip_vision_model"), convert_clip_vision,
                fixed("CLIPVisionModel"), image_prep=read_prep)
