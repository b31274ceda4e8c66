import pytest
from attnlab.model.config import ModelConfig


@pytest.mark.parametrize(
    "kw, message",
    [
        (dict(d_model=30, n_heads=4), "not divisible"),
        (dict(norm="middle"), "norm='middle'"),
        (dict(positional="xpos"), "positional='xpos'"),
        (dict(mlp="tanh"), "mlp='tanh'"),
        (dict(backend="triton"), "backend='triton'"),
        (dict(arch="rnn"), "arch='rnn'"),
        (dict(n_layers=0), "n_layers must be ≥ 1"),
        (dict(positional="rope", d_model=12, n_heads=4), "even head size"),
        (dict(n_dec_layers=2), "only for arch='encdec'"),
        (dict(output_head="mlm"), "not 'mlm'"),
    ],
)
def test_invalid_configs_raise_clear_errors(kw, message):
    with pytest.raises(ValueError, match=message):
        ModelConfig(**kw)


def test_config_is_frozen_and_round_trips():
    cfg = ModelConfig(arch="encdec", n_dec_layers=3, positional="alibi", mlp="swiglu", qk_norm=True)
    with pytest.raises(AttributeError):
        cfg.d_model = 8
    assert ModelConfig.from_dict(cfg.to_dict()) == cfg
    assert cfg.dec_layers == 3 and cfg.d_head == 16
    assert cfg.hidden == int(8 * 64 / 3)
    with pytest.raises(ValueError, match="unknown config fields: colour"):
        ModelConfig.from_dict({**cfg.to_dict(), "colour": "red"})
