"""DeiT (DeiTModel, DeiTForImageClassification, DeiTForImageClassificationWithTeacher): ViT with a distillation
token (model/families/vision_towers.py)."""

from attnlab.model.families.family import Family
from attnlab.model.families.vision_towers import convert_deit, deit_heads, read_prep, vision_config

CLASSES = {"teacher": "DeiTForImageClassificationWithTeacher", "classes": "DeiTForImageClassification",
           "none": "DeiTModel"}


def _class(cfg) -> str:
    return CLASSES["teacher" if cfg.distill_head else "classes" if cfg.n_classes else "none"]


FAMILY = Family("deit", "DeiT: DeiTModel, DeiTForImageClassification(WithTeacher) checkpoints",
                lambda hf, names=None: vision_config(hf, "deit", deit_heads(names or ())), convert_deit, _class,
                image_prep=read_prep)
