"""`attnlab mixing`: the JSON contract (the row is the analysis' last-layer row, the matrix its layer, the attention the
layer's head mean), the table, a ViT's [CLS], an encoder–decoder's three attentions (--src-text, --group), and bad
input as one line with exit 2."""

import json

import numpy as np
import pytest
from attnlab.analysis.probes.context_mixing import attention_norms, value_zeroing
from attnlab.cli.main import main
from attnlab.model.registry import load

TEXT = "who is the best friend of alex ?"


def run_cli(capsys, *argv):
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_mixing_json_is_the_analysis(capsys):
    lm = load("lecture-decoder")
    inputs = lm.encode(TEXT)
    z = value_zeroing(lm, inputs)
    rc, out, _ = run_cli(capsys, "mixing", "--model", "lecture-decoder", "--text", TEXT, "--json")
    js = json.loads(out)
    assert rc == 0 and js["method"] == "value_zeroing" and js["layer"] == 3 and js["query"] == 8
    assert js["tokens"] == inputs.tokens and js["tokens"][8] == "?"
    np.testing.assert_allclose(js["row"], z[3, 8], atol=1e-12)
    np.testing.assert_allclose(js["matrix"], z[3], atol=1e-12)
    att = lm.capture(inputs).matrices("self")[3, :, 8].mean(0)
    np.testing.assert_allclose(js["attention"], att, atol=1e-7)
    assert sum(js["attention"]) == pytest.approx(1, abs=1e-5) and sum(js["row"]) == pytest.approx(1, abs=1e-9)

    rc, out, _ = run_cli(capsys, "mixing", "--model", "lecture-decoder", "--text", TEXT, "--method", "attention_norm",
                         "--layer", "1", "--query", "5", "--json")
    js = json.loads(out)
    np.testing.assert_allclose(js["row"], attention_norms(lm, inputs)[1, 5], atol=1e-12)
    assert np.triu(np.array(js["matrix"]), 1).max() == 0  # causal


def test_mixing_table_and_vit(capsys):
    rc, out, _ = run_cli(capsys, "mixing", "--model", "lecture-decoder", "--text", TEXT)
    lines = out.splitlines()
    assert rc == 0 and lines[0] == "lecture-decoder: value_zeroing of layer 3, query 8 '?' (top 9 of 9 tokens)"
    first = lines[2].split()
    assert len(lines) == 2 + 9 and first[:2] == ["2", "'is'"]  # the row's largest share first
    rc, out, _ = run_cli(capsys, "mixing", "--model", "lecture-vit", "--method", "attention_norm", "--json")
    js = json.loads(out)
    assert rc == 0 and js["query"] == 0 and js["tokens"][0] == "CLS" and len(js["row"]) == 65


def test_mixing_reads_an_image_file(capsys, tmp_path):
    from attnlab.model.lecture.shapes import shape_images
    from PIL import Image

    image = shape_images(3, 0, "eval")[2].image
    Image.fromarray(image).save(tmp_path / "s.png")
    rc, out, _ = run_cli(capsys, "mixing", "--model", "lecture-vit", "--image", str(tmp_path / "s.png"), "--layer", "2",
                         "--json")
    vit = load("lecture-vit")
    want = value_zeroing(vit, vit.encode_image(image))[2, 0]
    assert rc == 0 and json.loads(out)["query"] == 0
    np.testing.assert_allclose(json.loads(out)["row"], want, atol=1e-9)


def test_mixing_of_an_encoder_decoder(capsys):
    from attnlab.analysis.probes.context_mixing import context_mixing

    src, tgt = "the big red dog sees a cat .", "ka vasko roda grano na miru vidu ."
    lm = load("lecture-encdec")
    inputs = lm.encode(tgt, src)
    z = value_zeroing(lm, inputs)
    rc, out, _ = run_cli(capsys, "mixing", "--model", "lecture-encdec", "--src-text", src, "--text", tgt, "--query",
                         "1", "--json")
    js = json.loads(out)
    assert rc == 0 and (js["group"], js["layer"], js["query"]) == ("cross", 2, 1)
    assert js["tokens"] == inputs.tokens and js["keys"] == inputs.src_tokens and js["keys"][4] == "dog"
    np.testing.assert_allclose(js["matrix"], z.cross[2], atol=1e-12)  # [T, S]
    assert int(np.argmax(js["row"])) == 4  # 'ka' predicts 'vasko', read from 'dog'
    att = lm.capture(inputs).matrices("cross")[2, :, 1].mean(0)
    np.testing.assert_allclose(js["attention"], att, atol=1e-7)
    for group, method in (("encoder", "attention_norm"), ("decoder", "value_zeroing")):
        rc, out, _ = run_cli(capsys, "mixing", "--model", "lecture-encdec", "--src-text", src, "--text", tgt,
                             "--group", group, "--method", method, "--layer", "0", "--json")
        js = json.loads(out)
        want = context_mixing(lm, inputs, method).group(group)[0]
        assert rc == 0 and js["group"] == group and len(js["keys"]) == want.shape[1]
        np.testing.assert_allclose(js["matrix"], want, atol=1e-12)
        np.testing.assert_allclose(js["row"], want[-1], atol=1e-12)
    rc, out, _ = run_cli(capsys, "mixing", "--model", "lecture-encdec", "--src-text", src, "--text", tgt, "--query", "1")
    lines = out.splitlines()
    assert rc == 0 and lines[0] == ("lecture-encdec: value_zeroing of cross attention's layer 2, query 1 'ka' "
                                    "(top 9 of 9 tokens)")
    assert lines[2].split()[:2] == ["4", "'dog'"]


@pytest.mark.parametrize("argv, msg", [
    (["--model", "lecture-vit", "--text", "a b"], "lecture-vit is a vision transformer: give --image FILE, not --text"),
    (["--model", "lecture-decoder", "--text", "a", "--image", "x.png"], "--image is for vision models"),
    (["--model", "lecture-encdec", "--text", "x"], "an encoder–decoder needs a source text (--src-text)"),
    (["--model", "lecture-decoder", "--text", "a", "--group", "cross"], "--group picks an encoder–decoder's attention"),
    (["--model", "lecture-decoder", "--text", "a", "--src-text", "b"], "--src-text is the source of an encoder–decoder"),
    (["--model", "lecture-decoder", "--text", "a b", "--layer", "7"], "layer 7 is out of range: this model has layers 0–3"),
    (["--model", "lecture-decoder", "--text", "a b", "--query", "-9"], "query -9 is out of range: the text has positions"),
    (["--model", "lecture-decoder"], "--text is required: lecture-decoder reads text"),
    (["--model", "lecture-encdec", "--src-text", "the dog", "--text", "ka", "--group", "encoder", "--query", "3"],
     "query 3 is out of range: the source has positions 0–2"),
    (["--model", "lecture-encdec", "--src-text", "the big dog", "--text", "ka", "--query", "2"],
     "query 2 is out of range: the target has positions 0–1"),
    (["--model", "lecture-encdec", "--src-text", "the dog", "--text", "ka", "--group", "encoder", "--layer", "3"],
     "layer 3 is out of range: this model has layers 0–2"),
    (["--model", "lecture-decoder", "--text", "a", "--method", "alti"], "invalid choice: 'alti'"),
])
def test_bad_input_is_one_line(capsys, argv, msg):
    rc, out, err = run_cli(capsys, "mixing", *argv)
    assert rc == 2 and out == "" and msg in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("argv", [["--layer", "9"], ["--query", "-9"], ["--group", "encoder", "--query", "5"]])
def test_a_bad_index_is_refused_before_the_mixing_runs(capsys, monkeypatch, argv):
    """--layer and --query are checked against the model and the tokens before value zeroing reruns every block."""
    import attnlab.analysis.probes.context_mixing as cm

    def refuse(*a, **k):
        raise AssertionError("context mixing ran before the index was checked")

    monkeypatch.setattr(cm, "context_mixing", refuse)
    rc, out, err = run_cli(capsys, "mixing", "--model", "lecture-encdec", "--src-text", "the dog", "--text", "ka", *argv)
    assert rc == 2 and out == "" and "is out of range" in err and len(err.strip().splitlines()) == 1
