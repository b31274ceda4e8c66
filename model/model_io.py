"""What both kinds of loaded model (ours, LoadedModel; transformers', ViewModel) answer the same way: where the
weights live, the text a model reads, one-token ids, the start of a text that fits; and a vision transformer's
image side (ImageIO)."""

from __future__ import annotations

import torch
from attnlab.model.dispatch import main_device
from attnlab.model.images import ImagePrep
from attnlab.model.inputs import InputError, Inputs
from attnlab.model.patches import patch_labels


class ModelIO:
    """Needs `model` (a torch module), `tokenizer`, `src_tokenizer`, `arch`, `context`, `reads_image`, `encode`."""

    @property
    def device(self) -> str:
        """Where the inputs go: 'cpu' or 'cuda' (the first parameter's device type; a model spread by a device
        map: 'cuda' when any of it runs on a GPU)."""
        device_map = getattr(self.model, "hf_device_map", None)
        if device_map:
            return main_device(device_map)
        return next(self.model.parameters()).device.type

    @property
    def dtype(self) -> torch.dtype:
        """The floating-point dtype the model computes in."""
        return next(self.model.parameters()).dtype

    def encode_reading(self, text: str) -> Inputs:
        """`text` as the text the model reads: the source of an encoder–decoder (an empty target), else the text."""
        return self.encode("", text) if self.arch == "encdec" else self.encode(text)

    def first_tokens(self, text: str, source: bool = False, limit: int | None = None) -> str:
        """The longest start of `text` that fits the context (or `limit` tokens, if fewer), cut where a token
        ends (`source`: as an encoder–decoder's source text); `text` itself when it fits."""
        tok = (self.src_tokenizer or self.tokenizer) if source else self.tokenizer
        most = min(self.context, limit or self.context)
        enc = tok.encode(text)
        if len(enc.ids) <= most:
            return text
        ends = [b for (_, b), s in zip(enc.offsets, enc.special) if not s]
        k = min(len(ends), max(most - sum(enc.special), 0))  # [BOS], [CLS], [SEP] … come with any text
        while k > 0 and len(tok.encode(text[:ends[k - 1]]).ids) > most:
            k -= 1  # a cut inside a word can make more tokens than it keeps: step back
        return text[:ends[k - 1]] if k else ""

    def single_token_id(self, label: str) -> int | None:
        """The id of `label` when it is exactly one (non-special) token, else None (always None for images)."""
        if self.reads_image:
            return None
        enc = self.tokenizer.encode(label, add_special=False)
        ids = [i for i, sp in zip(enc.ids, enc.special or [False] * len(enc.ids)) if not sp]
        return ids[0] if len(ids) == 1 else None


class ImageIO:
    """A vision transformer's image side; needs `cfg`, `image` (ImagePrep or None), `name`, `reads_image`."""

    @property
    def patch_grid(self) -> tuple[int, int]:
        """(rows, cols) of patches."""
        self._need_image()
        return self.cfg.grid, self.cfg.grid

    @property
    def image_size(self) -> tuple[int, int]:
        """The model's input (H, W) in pixels."""
        self._need_image()
        return self.cfg.image_size, self.cfg.image_size

    @property
    def class_names(self) -> list[str]:
        """One name per class (class_0 … when the checkpoint names none)."""
        self._need_image()
        names = list(self.image.class_names) if self.image is not None else []
        return names if len(names) == self.cfg.n_classes else [f"class_{i}" for i in range(self.cfg.n_classes)]

    def encode_image(self, image) -> Inputs:
        """uint8 [H, W, 3] → Inputs: pixels [1, C, H, W] resized and normalised by the model's preprocessing,
        ids 0..N (0 = CLS), labels "CLS", "r,c"."""
        self._need_image()
        prep = self.image or ImagePrep(size=self.image_size)
        pixels = prep.tensor(image)  # [1, C, H, W]
        if tuple(pixels.shape[-2:]) != self.image_size:
            raise InputError(f"the image is {pixels.shape[-1]}×{pixels.shape[-2]} pixels after preprocessing; "
                             f"{self.name} reads {self.image_size[1]}×{self.image_size[0]}")
        labels = patch_labels(self.cfg.grid, self.cfg.distill_token)  # "CLS" (, "DIST"), "r,c" …
        return Inputs(torch.arange(self.cfg.max_len)[None], labels, pixels=pixels)

    def _need_image(self) -> None:
        if not self.reads_image:
            raise InputError(f"{self.name} reads text, not images")
