"""Every model card, written in one place: the text lecture models' (lecture), their heads (heads), lecture-vit's
(vit), the mixture-of-experts decoder's (moe) and smollm2's, with its presets (smollm2, smollm2_texts)."""
