"""lecture-vit's training-only extras (lecture/vit_aux.py): the locality penalty is block 0's attention mass
outside each patch's 3×3 neighbourhood, as the app's captured run shows it; the sine–cosine start sets the position
table; inpainting paints whole patches, trains its own head and leaves the saved model plain."""

import numpy as np
import torch
from attnlab.analysis.probes.image_run import image_capture
from attnlab.lecture.train_vit import CONFIG, PREP
from attnlab.lecture.vit_aux import Inpainter, Locality, sincos_init
from attnlab.model.checkpoint import save_folder
from attnlab.model.lecture.shapes import BACKGROUND, shape_images
from attnlab.model.patches import sinusoidal_2d
from attnlab.model.registry import load_attnlab_folder
from attnlab.model.transformer import build_model

CFG = CONFIG.replace(d_model=32, n_layers=2, n_heads=2)


def _model():
    torch.manual_seed(0)
    return build_model(CFG).train()


def test_locality_penalty_is_block_0s_far_mass_in_the_captured_run(tmp_path):
    model = _model()
    sincos_init(model)  # positions that make block 0's attention depend on where a patch is
    ims = [ex.image for ex in shape_images(3, 4, "eval")]
    loc = Locality(model)
    model(PREP.tensor(ims), backend="sdpa")
    got = loc.penalty().item()
    save_folder(model.eval(), CFG, tmp_path, extra={"image": PREP.to_dict()})
    lm = load_attnlab_folder(tmp_path, "t", str(tmp_path))
    r, c = np.divmod(np.arange(64), 8)  # [N] each
    far = np.maximum(abs(r[:, None] - r[None]), abs(c[:, None] - c[None])) > 1  # [N, N]: outside the 3×3
    want = []
    for im in ims:
        a = image_capture(lm, im).matrices("self")[0, :, 1:, 1:].astype(np.float64)  # [h, N, N] block 0, patches
        a /= a.sum(-1, keepdims=True)
        want.append((a * far).sum(-1).mean())
    np.testing.assert_allclose(got, np.mean(want), rtol=1e-4)
    assert 0.1 < got < 1  # 55 of 64 patches lie outside a 3×3 neighbourhood on average: far from 0 untrained


def test_locality_penalty_falls_when_trained_alone():
    model = _model()
    loc = Locality(model)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    x = PREP.tensor([ex.image for ex in shape_images(4, 5, "train")])
    first = None
    for _ in range(30):
        model(x, backend="sdpa")
        p = loc.penalty()
        first = first if first is not None else p.item()
        opt.zero_grad()
        p.backward()
        opt.step()
    assert p.item() < first - 0.15  # measured: 0.88 → 0.70


def test_sincos_init_sets_the_patch_rows_only():
    model = _model()
    cls = model.embed.pos[0, 0].detach().clone()
    sincos_init(model, 0.5)
    torch.testing.assert_close(model.embed.pos[0, 1:], 0.5 * sinusoidal_2d(8, 32))
    torch.testing.assert_close(model.embed.pos[0, 0], cls)


def test_inpainting_paints_whole_patches_and_trains_its_head():
    model = _model()
    inp = Inpainter(model, PREP, BACKGROUND, layer=0, share=0.5)
    x = PREP.tensor([ex.image for ex in shape_images(2, 6, "train")])
    seen = []
    h = model.embed.register_forward_pre_hook(lambda m, args: seen.append(args[0]))
    loss = inp.loss(model, x, torch.Generator().manual_seed(0))
    h.remove()
    painted = seen[0]  # [B, 3, H, W]
    bg = PREP.tensor([np.full((4, 4, 3), BACKGROUND, np.uint8)])[0, :, 0, 0]  # [3]
    patches = painted.unflatten(2, (8, 4)).unflatten(4, (8, 4))  # [B, 3, 8, 4, 8, 4]
    changed = (patches != x.unflatten(2, (8, 4)).unflatten(4, (8, 4))).any(1).any(2).any(-1)  # [B, 8, 8]
    whole = (patches == bg.view(1, 3, 1, 1, 1, 1)).all(1).all(2).all(-1)  # [B, 8, 8] entirely background
    assert changed.any() and bool((whole | ~changed).all())  # every changed patch is painted whole
    loss.backward()
    assert loss.item() > 0 and inp.head.weight.grad.abs().sum() > 0
    assert not any(k.startswith("head.weight") and v.shape == inp.head.weight.shape
                   for k, v in model.state_dict().items())  # the inpainting head is not part of the model
