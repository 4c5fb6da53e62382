"""Each causal self-attention owns its KV cache: ``new_cache`` gives every one an empty cache, the
model appends to them only when asked (``cache=``), and no cache ever lands in the state_dict."""

import torch

from tinylm.models.gpt import GPT, GPTConfig
from tinylm.models.seq2seq import BEGIN_ID, Seq2Seq, Seq2SeqConfig


def gpt() -> GPT:
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=11, block_size=8, n_embd=16, num_heads=2, num_layers=3, dropout=0.0)).eval()


def test_every_attention_keeps_its_own_cache_outside_the_state_dict():
    model = gpt()
    names = list(model.state_dict()), [name for name, _ in model.named_buffers()]
    x = torch.randint(11, (2, 6), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        cache = model.new_cache(2)
        model(x[:, :4], cache=cache)
        plain = model(x)[0]  # without ``cache`` the stored keys and values are neither read nor grown
        model(x[:, 4:5], cache=cache)
    attentions = [block.attn for block in model.blocks]
    assert [a.kv_cache.keys.shape for a in attentions] == [(2, 2, 5, 8)] * 3  # (B, h, P, hs) per attention
    assert len({id(a.kv_cache) for a in attentions}) == 3 and cache.length == 5
    assert (list(model.state_dict()), [name for name, _ in model.named_buffers()]) == names
    assert torch.equal(plain, model(x)[0])


def test_a_step_starts_from_its_past_and_leaves_no_cache_behind():
    model = gpt()
    x = torch.randint(11, (2, 6), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        first, keys, values = model.step(x[:, :2], *(torch.zeros(model.past_shape(2, 0)),) * 2)
        rest, keys, values = model.step(x[:, 2:], keys, values)
        full = model(x)[0]
    assert keys.shape == values.shape == model.past_shape(2, 6)
    assert torch.allclose(torch.cat([first, rest], dim=1), full, atol=1e-5)
    assert all(block.attn.kv_cache is None for block in model.blocks)


def test_a_beam_keeps_the_rows_of_every_decoder_attention():
    torch.manual_seed(0)
    model = Seq2Seq(Seq2SeqConfig(vocab_size=11, block_size=8, n_embd=16, num_heads=2, dropout=0.0)).eval()
    src = torch.tensor([[3, 4, 5, 6]])
    tgt = torch.tensor([[BEGIN_ID, 7, 8]])
    with torch.no_grad():
        memory = model.encode(src)
        cache = model.new_cache(1)
        model.decode(tgt, memory, cache)
        cache.keep_rows(torch.tensor([0, 0, 0]))  # one hypothesis becomes three
    caches = [block.self_attn.kv_cache for block in model.decoder]
    assert [c.keys.shape for c in caches] == [(3, 2, 3, 8)] * 2 and cache.length == 3
    assert all(torch.equal(c.values[0], c.values[2]) for c in caches)
