"""Marian (MarianMTModel, the Helsinki-NLP opus-mt translators): BART's layout with fixed sinusoidal positions
and scaled embeddings (model/families/bart.py)."""

from attnlab.model.families.bart import SPECIALS, bart_config, convert_bart
from attnlab.model.families.family import Family, fixed

FAMILY = Family("marian", "MarianMT (Helsinki-NLP opus-mt and other MarianMTModel checkpoints, shared vocabulary)",
                lambda hf, names=None: bart_config(hf), lambda state, cfg: convert_bart(state, cfg, "marian"),
                fixed("MarianMTModel"), SPECIALS["marian"])
