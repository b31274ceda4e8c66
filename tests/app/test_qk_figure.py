"""The query–key scatter (app.figures.qk) by its data: one trace per kind, counts, escaped hover, axes."""

import numpy as np
from attnlab.analysis.attention.qk_projection import QKPoints
from attnlab.app.figures.qk import qk_scatter


def test_two_colours_counts_and_escaped_hover():
    pts = QKPoints(xy=np.array([[0.0, 1], [2, 3], [4, 5], [6, 7], [8, 9]]),
                   kind=np.array(["query", "query", "key", "key", "key"]), source=np.array([0, 1, 0, 1, 1]),
                   position=np.array([0, 0, 0, 1, 1]), labels=["<s>", "a", "<s>", "&", "&"],
                   explained=np.array([0.625, 0.25]), names=["first <b>", "second"])
    fig = qk_scatter(pts, title="t")
    q, k = fig.data
    assert (q.name, k.name) == ("queries (2)", "keys (3)") and q.marker.color != k.marker.color
    np.testing.assert_array_equal(q.x, [0, 2])
    np.testing.assert_array_equal(k.y, [5, 7, 9])
    assert q.text[0] == "query · &lt;s&gt; (position 0)<br>first &lt;b&gt;"
    assert k.text[1] == k.text[2] == "key · &amp; (position 1)<br>second"  # repeated tokens stay separate points
    assert fig.layout.xaxis.title.text == "PC 1 (62% of variance)" and fig.layout.yaxis.title.text.startswith("PC 2 (25%")
    assert fig.layout.meta == {"explained": [0.625, 0.25], "inputs": 2}
