import torch
from tests.app.conftest import open_page

def test_x():
    at = open_page("kv_cache", model="random-encdec", text="le", src="the cat", kv_n=3, kv_group="cross")
    print(at.dataframe[0].value[["check","value"]])
    print(at.dataframe[1].value)
    print(at.session_state["text"], "|", at.session_state["src"], "|", at.session_state["model"], at.session_state["backend"])
    import torch; print(torch.get_num_threads())
    assert 0
