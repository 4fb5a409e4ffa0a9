#!/usr/bin/env python3
"""Inference: a tiny LLaMA whose next token is known, served with the seeds' engine settings
(greedy and beam search, KV cache), so every continuation can be checked token by token.

Part of the workload probe (workload.py)."""

from __future__ import annotations

import time

# The probe's parts, beside it in the image's probe folder (sys.path[0] when it runs as a script).
from workload_base import FAILED, PASSED, TINY, gpu_note, load_yaml
from workload_settings import accepted_keys
from workload_train import seed_everything


COUNT_VOCAB = 64         # the inference model's vocabulary and hidden size (one direction per token)


def counting_model(device):
    """A tiny LLaMA whose next token is known: fixed weights, no training. Token t embeds as the
    t-th unit vector; every attention and MLP block writes nothing back (o_proj and down_proj are
    zero, so their maths still runs, KV cache included), and the head maps direction t to token
    t + 1 (mod the vocabulary). Greedy and beam search must both count on from the prompt."""
    import torch
    import transformers
    # No bos/eos: LlamaConfig's default eos (2) would end a row that counts through 2.
    kwargs = dict(TINY, vocab_size=COUNT_VOCAB, hidden_size=COUNT_VOCAB, tie_word_embeddings=False,
                  bos_token_id=None, eos_token_id=None)
    if "num_key_value_heads" not in accepted_keys(transformers.LlamaConfig):
        kwargs.pop("num_key_value_heads")
    cfg = transformers.LlamaConfig(**kwargs)
    seed_everything(0)
    model = transformers.LlamaForCausalLM(cfg)
    eye = torch.eye(COUNT_VOCAB)
    with torch.no_grad():
        model.model.embed_tokens.weight.copy_(eye)
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        model.lm_head.weight.copy_(torch.roll(eye, shifts=1, dims=0))   # row t+1 reads direction t
    model.config.use_cache = True
    if getattr(model, "generation_config", None) is not None:
        model.generation_config.eos_token_id = None
        model.generation_config.bos_token_id = None
    return model.to(device).eval()


def counting_prompts(batch, prompt_len, vocab=COUNT_VOCAB, seed=1):
    """Counting sequences from different starts (the first rows wrap around the vocabulary)."""
    import random
    rng = random.Random(seed)
    starts = [vocab - prompt_len // 2] + [rng.randrange(vocab) for _ in range(batch - 1)]
    return [[(s + k) % vocab for k in range(prompt_len)] for s in starts[:batch]]


def continuation_problems(prompts, outputs, max_new, vocab=COUNT_VOCAB) -> list:
    """Why generated rows are not their prompts counted on by exactly max_new tokens (empty: they are)."""
    out = []
    if len(outputs) != len(prompts):
        return [f"{len(outputs)} output rows for {len(prompts)} prompts"]
    for i, (prompt, row) in enumerate(zip(prompts, outputs)):
        new = list(row[len(prompt):])
        if list(row[:len(prompt)]) != list(prompt):
            out.append(f"row {i}: the output does not start with its prompt")
        elif len(new) != max_new:
            out.append(f"row {i}: {len(new)} new tokens, want exactly max_new_tokens={max_new}")
        else:
            want = [(prompt[-1] + 1 + k) % vocab for k in range(max_new)]
            if new != want:
                at = next(k for k in range(max_new) if new[k] != want[k])
                out.append(f"row {i}: new token {at} is {new[at]}, the count says {want[at]} "
                           f"(got {new[:at + 2]}..., want {want[:at + 2]}...)")
    return out


def check_inference(env, report):
    torch = env.torch
    cfg = load_yaml(env.path("config.yaml")) if env.exists("config.yaml") else None
    eng = (cfg or {}).get("engine") or {}
    prompt_len = 8
    positions = TINY["max_position_embeddings"]
    batch = int(eng.get("max_batch_size", 1))
    if batch > 8:
        report.override(f"engine.max_batch_size={batch} -> 8 (tiny model)")
        batch = 8
    beams = int(eng.get("beam_width", 1))
    max_new = 16
    seq = int(eng.get("max_seq_length", positions))
    if seq > positions:
        report.override(f"engine.max_seq_length={seq} -> {positions} (tiny model's positions); "
                        f"max_new_tokens={max_new}")
    max_new = max(1, min(max_new, min(seq, positions) - prompt_len))
    model = counting_model(env.device)
    prompts = counting_prompts(batch, prompt_len)
    ids = torch.tensor(prompts, dtype=torch.long, device=env.device)
    mask = torch.ones_like(ids)
    # eos None: nothing may end a row early, so every row must get exactly max_new_tokens
    kw = dict(max_new_tokens=max_new, num_beams=beams, do_sample=False, pad_token_id=0, eos_token_id=None)
    if beams > 1:
        kw["early_stopping"] = True
    outs, ms = [], []
    for _ in range(2):
        t0 = time.time()
        with torch.no_grad():
            out = model.generate(input_ids=ids, attention_mask=mask, **kw)
        if env.gpu:
            torch.cuda.synchronize()
        ms.append(round((time.time() - t0) * 1000, 1))
        outs.append(getattr(out, "sequences", out).cpu())
    mode = f"beam search ({beams} beams)" if beams > 1 else "greedy"
    src = "config.yaml" if cfg is not None else "no config.yaml: greedy defaults"
    figures = {"batch": batch, "num_beams": beams, "max_new_tokens": max_new,
               "generated": int(outs[0].shape[1]) - prompt_len if outs[0].dim() == 2 else None,
               "ms_per_generate": ms, "settings": src, "model": f"counting LLaMA (vocab {COUNT_VOCAB}, fixed weights)",
               "first_row": outs[0][0].tolist() if outs[0].dim() == 2 else None}
    problems = continuation_problems(prompts, outs[0].tolist(), max_new)
    if problems:
        return report.add("inference", FAILED, f"{mode}, batch {batch}: generate() did not count on from the "
                          f"prompt: " + "; ".join(problems[:3]), figures)
    if not bool(torch.equal(outs[0], outs[1])):
        diff = int((outs[0] != outs[1]).sum()) if outs[0].shape == outs[1].shape else "shape"
        return report.add("inference", FAILED, f"{mode} twice gave different tokens ({diff} differ)", figures)
    gpu_note(env, report, "inference", PASSED, f"{mode}, batch {batch}: exactly {max_new} new tokens per row, each "
             f"the count's next, identical twice on {env.device_desc} ({src})", figures)


