"""First visits: Rollout's held-out faithfulness table is computed once per model, then read from disk."""

from unittest import mock

from analysis import faithfulness as faithfulness_
from app import state


def test_faithfulness_table_kept_across_server_restarts(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNLAB_CACHE_DIR", str(tmp_path))
    state.faithfulness.clear()
    first = state.faithfulness("random-decoder", 5, 0, ablation=False)
    assert first["n_examples"] == 5 and list((tmp_path / "faithfulness").glob("*.json"))
    state.faithfulness.clear()  # a restarted server: nothing in Streamlit's memory
    with mock.patch.object(faithfulness_, "faithfulness", side_effect=AssertionError("computed again")):
        assert state.faithfulness("random-decoder", 5, 0, ablation=False) == first
    state.faithfulness.clear()
