"""The faithfulness benchmark: do attention-based attributions point at the token an answer comes from? The
benchmark, its cases, its image form, why the methods rank as they do, and the report kept on disk (store)."""
