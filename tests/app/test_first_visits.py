"""First visits: Rollout's held-out faithfulness table is computed once per model, then read from disk."""

from unittest import mock

from attnlab.analysis.faithfulness import benchmark as faithfulness_
from attnlab.app import mechanics, state


def test_faithfulness_table_kept_across_server_restarts(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNLAB_CACHE_DIR", str(tmp_path))
    state.faithfulness.clear()
    first = state.faithfulness("random-decoder", 5, 0, ablation=False)
    assert first["n_examples"] == 5 and list((tmp_path / "faithfulness").glob("*.json"))
    state.faithfulness.clear()  # a restarted server: nothing in Streamlit's memory
    with mock.patch.object(faithfulness_, "faithfulness", side_effect=AssertionError("computed again")):
        assert state.faithfulness("random-decoder", 5, 0, ablation=False) == first
    state.faithfulness.clear()


def test_rollout_first_visit_scores_integrated_gradients_only_when_asked(tmp_path, monkeypatch):
    """A model's first visit scores every held-out method but integrated gradients (seconds); its row waits for
    the button, which scores each example once; the next server reads the whole table back from disk."""
    from attnlab.analysis.faithfulness import store as kept_
    from attnlab.app.held_out import IG

    from .conftest import finish_jobs, ok, open_page

    monkeypatch.setenv("ATTNLAB_CACHE_DIR", str(tmp_path))
    calls = []
    real = faithfulness_.integrated_gradients_many  # the examples' integrated gradients, in shared passes
    monkeypatch.setattr(faithfulness_, "integrated_gradients_many",
                        lambda lm, jobs, *a, **k: calls.extend([1] * len(jobs)) or real(lm, jobs, *a, **k))

    def fresh_server():
        for fn in (state.faithfulness, state.faithfulness_path, state.ranking_reasons):
            fn.clear()

    def table(at):
        (t,) = [d.value for d in at.dataframe if "attnlab name" in d.value.columns]
        return t.set_index("attnlab name")

    fresh_server()
    at = open_page("rollout", model="lecture-decoder", faith_n=20, timeout=600)
    ok(at)
    assert calls == []  # the first visit did not integrate a single held-out example
    first = table(at)
    assert list(first.index) == list(faithfulness_.METHODS) and first["top-1 agreement"].isna().tolist() == [
        m == "integrated_gradients" for m in faithfulness_.METHODS]
    assert [b.key for b in at.button if b.key == "faith_ig"] == ["faith_ig"]
    assert any(c.value.startswith("Integrated gradients is not scored on these 20 examples yet") for c in at.caption)

    finish_jobs(at.button(key="faith_ig").click().run())  # a job (app.jobs): its progress bar polls until done
    ok(at)
    assert len(calls) == 20  # once per held-out example
    after = table(at)
    lm = state.model("lecture-decoder")
    kept = kept_.read_report(kept_.report_path(lm, 20, 0, methods=IG))
    assert after.loc["integrated_gradients", "top-1 agreement"] == kept["methods"]["integrated_gradients"]["top1"]
    assert after.loc["integrated_gradients", "examples"] == 20
    assert after.drop(index="integrated_gradients").equals(first.drop(index="integrated_gradients"))
    assert any(c.value.startswith("Integrated gradients over these examples") for c in at.caption)
    assert not [b for b in at.button if b.key == "faith_ig"]

    fresh_server()  # a restarted server: the whole table, integrated gradients included, comes from disk
    again = open_page("rollout", model="lecture-decoder", faith_n=20, timeout=600)
    ok(again)
    assert len(calls) == 20 and table(again).equals(after)
    fresh_server()


def test_kv_cache_first_visit_feeds_the_model_a_bounded_number_of_tokens(monkeypatch):
    """A first visit of KV cache (an empty cache, the 64-token default sample) feeds the model the cache check's
    chunks and its full pass, the page's capture and the output scale (T each), and the prefixes 1..32 with one
    run of the first 32 tokens: 4·64 + 32 + 32·33/2 = 816 tokens, not the 2,400 of every prefix up to 64."""
    from attnlab.analysis.machinery import kv_cache
    from attnlab.model.loaded import LoadedModel

    from .conftest import ok, open_page

    fed = []
    real = LoadedModel.forward
    monkeypatch.setattr(LoadedModel, "forward", lambda self, inputs, *a, **k: fed.append(int(inputs.ids.shape[1]))
                        or real(self, inputs, *a, **k))
    for fn in (mechanics.kv_cache_check, mechanics.greedy_cache_check, mechanics.cache_generation, state.capture,
               mechanics.output_scale, mechanics.prefix_stability):
        fn.clear()
    at = open_page("kv_cache", model="lecture-decoder")
    ok(at)
    T, P = 64, kv_cache.PREFIX_TOKENS
    assert P == 32 and any(c.value.startswith(f"(the first {P} tokens of the text") for c in at.caption)
    chunks = [b - a for a, b in kv_cache.chunks(T)]  # the cache check's cached steps (32, 2, then 1 by 1)
    runs = chunks + [T] * 3 + [P] + list(range(1, P + 1))  # + its full pass, capture, output scale; the prefixes
    assert sorted(fed) == sorted(runs) and sum(fed) == 4 * T + P + P * (P + 1) // 2 == 816, sorted(fed)
