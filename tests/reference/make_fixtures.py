#!/usr/bin/env python3
"""Make the Hugging Face reference fixtures for sparkinfer's converter and
model plugins (tests/convert/check_fixtures.c).

For each fixture below this script builds a tiny random Qwen3.5
(Qwen3_5ForCausalLM) or Qwen3.5-MoE (Qwen3_5MoeForCausalLM) model with
transformers, re-initialises every parameter with non-degenerate random values,
trains a tiny byte-level BPE tokenizer of its own, saves the checkpoint with
save_pretrained, RELOADS it from disk in float32 and records transformers'
logits for a fixed token sequence:

  <out>/<name>/hf/               config.json, model.safetensors, tokenizer.json,
                                 tokenizer_config.json (what `sparkinfer
                                 convert` reads)
  <out>/<name>/ids.txt           the token ids (prompt, then seeded random ids)
  <out>/<name>/logits_full.f32   logits of one full forward (use_cache=False)
  <out>/<name>/logits_step.f32   logits of token-by-token decode with the cache
  <out>/<name>/meta.json         shapes, versions, seeds, checks, formats seen

A .f32 file is a 64-byte ASCII header "SILOGITS f32le n_pos=N n_vocab=V"
(padded with spaces, ending in a newline) followed by N x V little-endian
float32 values.

Weights are rounded to the storage dtype (float32 for one fixture, bfloat16
for the others, to keep the committed files small) BEFORE the reference is
computed, and the reference runs in float32 on the reloaded checkpoint, so the
logits are exactly those of the stored weights.  Everything runs on the CPU
(deterministic, a few seconds per fixture); no network, no gguf package.

The script fails loudly (exit 1, "FATAL: ...") on anything unexpected.  A
fixture is only written when every check passes:
  * the reloaded checkpoint equals the in-memory weights bit for bit;
  * full forward and cached decode agree (max relative error < 1e-3);
  * top-1 margins: at every position the gap between the two largest logits
    exceeds 1.5e-4 x ||logits||_2, so any implementation within the 1e-4
    relative-error gate of check_fixtures must agree on the top-1 token;
  * MoE: at every token of every layer the router's k-th and (k+1)-th logits
    differ by >= 1e-3, so routing cannot flip on rounding noise.
When a random draw misses a margin the next weight seed is tried (seeds are
recorded in meta.json).

Run from the repository root on a machine with torch and transformers 5.x:
    python3 tests/reference/make_fixtures.py --out tests/data/fixtures
"""

import argparse
import importlib
import json
import math
import os
import platform
import shutil
import struct
import sys
import time


def die(msg):
    print("make_fixtures: FATAL: " + msg, file=sys.stderr, flush=True)
    sys.exit(1)


def say(msg):
    print("make_fixtures: " + msg, flush=True)


try:
    import numpy as np
    import torch
    import transformers
    import tokenizers
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
except ImportError as e:  # pragma: no cover - environment problem
    die("missing Python package: %s (needs torch, transformers 5.x, tokenizers, numpy)" % e)

try:
    import safetensors
    from safetensors import safe_open
except ImportError as e:  # pragma: no cover
    die("missing Python package: %s" % e)


# --------------------------------------------------------------------------
# The fixtures.  All hidden 64; n_pos positions each.
#   dense_a  f32 storage, 8 layers (full every 4th), GQA 2, Hk 2 < Hv 4 (R 2)
#   dense_b  bf16, 4 layers (full every 2nd), GQA 4, R 3, tied embeddings
#            (embedding std 0.3: with 1.0 every position predicts its own
#            input token, with 0.1 Q8_0 noise is amplified ~8x more),
#            intermediate 256 (so Q4_K_M uses K-quants on ffn_down)
#   moe_a    bf16, 8 layers (full every 4th), 8 experts top-2, GQA 4 (1 KV head)
#   moe_b    bf16, 6 layers with an irregular layer_types pattern, 12 experts
#            top-3, GQA 4, R 3, head_dim 16 with partial_rotary_factor 0.5
# --------------------------------------------------------------------------
FIXTURES = [
    dict(name="dense_a", moe=False, storage="float32", seed=11, layers=8,
         layer_types=None, interval=4, heads=4, kv_heads=2, head_dim=32, prf=0.25,
         mrope=[2, 1, 1], intermediate=32, lin_k_heads=2, lin_v_heads=4, lin_dim=16,
         vocab=512, tok_target=470, tie=False),
    dict(name="dense_b", moe=False, storage="bfloat16", seed=23, layers=4,
         layer_types=None, interval=2, heads=8, kv_heads=2, head_dim=32, prf=0.25,
         mrope=[2, 1, 1], intermediate=256, lin_k_heads=2, lin_v_heads=6, lin_dim=16,
         vocab=512, tok_target=440, tie=True, embed_std=0.3),
    dict(name="moe_a", moe=True, storage="bfloat16", seed=37, layers=8,
         layer_types=None, interval=4, heads=4, kv_heads=1, head_dim=32, prf=0.25,
         mrope=[2, 1, 1], experts=8, top_k=2, moe_inter=16, shared_inter=32,
         lin_k_heads=2, lin_v_heads=4, lin_dim=16, vocab=512, tok_target=480, tie=False),
    dict(name="moe_b", moe=True, storage="bfloat16", seed=53, layers=6,
         layer_types=["linear_attention", "full_attention", "linear_attention",
                      "linear_attention", "full_attention", "full_attention"],
         interval=None, heads=8, kv_heads=2, head_dim=16, prf=0.5, mrope=[2, 1, 1],
         experts=12, top_k=3, moe_inter=16, shared_inter=32, lin_k_heads=2,
         lin_v_heads=6, lin_dim=16, vocab=512, tok_target=450, tie=False),
]

HIDDEN = 64
ROPE_THETA = 10000000.0
RMS_EPS = 1e-6
MAX_POS = 4096
N_POS = 48
SEED_TRIES = 25
MARGIN_REL = 1.5e-4      # top-1 gap / ||logits||_2, see the docstring
ROUTER_MARGIN = 1e-3     # router logit gap between the k-th and (k+1)-th expert
FULL_STEP_TOL = 1e-3     # transformers' own full-vs-decode agreement
SIZE_WARN = 1.6e6        # bytes per fixture

PROMPT = ("<|im_start|>user\nWhat does the quick brown fox do when the lazy dog "
          "sleeps? Think it through.<|im_end|>\n<|im_start|>assistant\n<think>\n")

# Text the tokenizers are trained on (written for this purpose).
CORPUS = """\
The quick brown fox jumps over the lazy dog while the farmer counts his sheep.
A small model can still learn which letters like to stand next to each other.
When the river rises in spring, the old mill turns faster and the bread is cheaper.
She opened the window, listened to the rain, and wrote three lines about the sea.
Numbers such as 12, 345 and 6789 are split into single digits by this tokenizer.
Every morning the baker walks to the market with a basket of warm rolls.
The engineer checked the bridge twice before she let the first truck cross it.
In the evening the children read stories about dragons, castles and brave cats.
A careful reader notices when a sentence repeats itself, and so does a tokenizer.
The weather report promised sunshine, but the hikers carried umbrellas anyway.
Think step by step: first the question, then the evidence, then the answer.
The library keeps maps of the coast that are older than the town itself.
He fixed the bicycle with a spoon, a piece of wire and a great deal of patience.
Winter evenings are long, so the family plays cards and drinks hot tea.
The robot said hello, asked for coffee, and then forgot why it had come.
Good software is tested on small examples before it meets large ones.
The cat sat on the mat, the dog sat on the rug, and the bird sat on the fence.
Questions are easier to answer when they are short, clear and specific.
A gentle wind carried the smell of pine trees across the quiet valley.
The teacher asked the class to count the stars and write the number down.
Train, test, measure, and then repeat: that is how the work gets done.
Apples, pears and plums were stacked in wooden crates along the wall.
The ship left the harbour at dawn and reached the island before noon.
Reading the manual first saves time, although few people ever do it.
The museum closes at six, but the garden stays open until the sun sets.
"""

QWEN35_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}|"
                r" ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n<think>\\n' }}{%- endif %}")


# --------------------------------------------------------------------------
# transformers classes
# --------------------------------------------------------------------------

def find_class(names, modules):
    """First attribute found among `names` in transformers or in `modules`."""
    for n in names:
        c = getattr(transformers, n, None)
        if c is not None:
            return c, "transformers." + n
    for m in modules:
        try:
            mod = importlib.import_module(m)
        except ImportError as e:
            say("  (cannot import %s: %s)" % (m, e))
            continue
        for n in names:
            c = getattr(mod, n, None)
            if c is not None:
                return c, m + "." + n
    return None, None


def find_classes():
    dense_mods = ["transformers.models.qwen3_5.modeling_qwen3_5",
                  "transformers.models.qwen3_5.configuration_qwen3_5"]
    moe_mods = ["transformers.models.qwen3_5_moe.modeling_qwen3_5_moe",
                "transformers.models.qwen3_5_moe.configuration_qwen3_5_moe"]
    found = {}
    for key, names, mods in [
            ("dense_model", ["Qwen3_5ForCausalLM"], dense_mods),
            ("dense_config", ["Qwen3_5TextConfig"], dense_mods),
            ("moe_model", ["Qwen3_5MoeForCausalLM"], moe_mods),
            ("moe_config", ["Qwen3_5MoeTextConfig"], moe_mods)]:
        c, where = find_class(names, mods)
        if c is None:
            die("transformers %s has no %s (looked in transformers and %s)"
                % (transformers.__version__, " / ".join(names), ", ".join(mods)))
        say("found %-12s %s" % (key, where))
        found[key] = c
    return found


# --------------------------------------------------------------------------
# tokenizer
# --------------------------------------------------------------------------

def train_tokenizer(target):
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN35_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=target, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=[])
    lines = [l for l in CORPUS.splitlines() if l.strip()]
    tok.train_from_iterator(lines * 3, trainer=trainer)
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t in ("<|endoftext|>", "<|im_start|>", "<|im_end|>")])
    tok.add_tokens([AddedToken(t, special=False, normalized=False)
                    for t in ("<think>", "</think>")])
    n = tok.get_vocab_size(with_added_tokens=True)
    ids = {t: tok.token_to_id(t) for t in
           ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>")}
    if any(v is None for v in ids.values()):
        die("tokenizer: added tokens missing: %r" % ids)
    if max(ids.values()) != n - 1:
        die("tokenizer: added tokens are not the last ids (%r, size %d)" % (ids, n))
    return tok, n, ids


def tokenizer_config():
    return {
        "add_bos_token": False,
        "add_prefix_space": False,
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "errors": "replace",
        "clean_up_tokenization_spaces": False,
        "model_max_length": MAX_POS,
        "tokenizer_class": "PreTrainedTokenizerFast",
        "chat_template": CHAT_TEMPLATE,
    }


# --------------------------------------------------------------------------
# model
# --------------------------------------------------------------------------

def make_config(cls, fx):
    layer_types = fx["layer_types"]
    if layer_types is None:
        layer_types = ["full_attention" if (i + 1) % fx["interval"] == 0 else "linear_attention"
                       for i in range(fx["layers"])]
    rope = {"rope_type": "default", "rope_theta": ROPE_THETA,
            "partial_rotary_factor": fx["prf"], "mrope_section": list(fx["mrope"]),
            "mrope_interleaved": True}
    kw = dict(vocab_size=fx["vocab"], hidden_size=HIDDEN, num_hidden_layers=fx["layers"],
              num_attention_heads=fx["heads"], num_key_value_heads=fx["kv_heads"],
              head_dim=fx["head_dim"], rms_norm_eps=RMS_EPS,
              max_position_embeddings=MAX_POS, tie_word_embeddings=fx["tie"],
              rope_parameters=rope, layer_types=layer_types,
              linear_conv_kernel_dim=4, linear_key_head_dim=fx["lin_dim"],
              linear_value_head_dim=fx["lin_dim"], linear_num_key_heads=fx["lin_k_heads"],
              linear_num_value_heads=fx["lin_v_heads"], attention_bias=False,
              hidden_act="silu", pad_token_id=None, bos_token_id=None, eos_token_id=None,
              partial_rotary_factor=fx["prf"])
    if fx["moe"]:
        kw.update(num_experts=fx["experts"], num_experts_per_tok=fx["top_k"],
                  moe_intermediate_size=fx["moe_inter"],
                  shared_expert_intermediate_size=fx["shared_inter"])
    else:
        kw.update(intermediate_size=fx["intermediate"])
    try:
        cfg = cls(**kw)
    except TypeError as e:
        say("  config rejected partial_rotary_factor as a keyword (%s); "
            "passing it in rope_parameters only" % e)
        kw.pop("partial_rotary_factor")
        cfg = cls(**kw)
    # transformers must have taken every value as given.
    for k in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
              "num_key_value_heads", "head_dim", "linear_num_key_heads",
              "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim",
              "tie_word_embeddings"):
        if getattr(cfg, k) != kw[k]:
            die("%s: config.%s = %r, asked for %r" % (fx["name"], k, getattr(cfg, k), kw[k]))
    if list(cfg.layer_types) != layer_types:
        die("%s: config.layer_types = %r, asked for %r" % (fx["name"], cfg.layer_types,
                                                            layer_types))
    rp = getattr(cfg, "rope_parameters", None) or {}
    say("  rope_parameters = %r" % (rp,))
    if abs(float(rp.get("rope_theta", -1)) - ROPE_THETA) > 1e-3:
        die("%s: rope_theta not taken: %r" % (fx["name"], rp))
    if abs(float(rp.get("partial_rotary_factor", getattr(cfg, "partial_rotary_factor", -1)))
           - fx["prf"]) > 1e-9:
        die("%s: partial_rotary_factor not taken: %r" % (fx["name"], rp))
    return cfg, layer_types


def init_weights(model, fx, gen):
    """Every parameter gets a fresh, non-degenerate random value.  Fails on a
    parameter this function does not know, so a new one cannot slip through
    with transformers' default (often zero or one) initialisation."""
    H = HIDDEN
    seen = 0
    for name, p in model.named_parameters():
        shape = tuple(p.shape)

        def normal(std, mean=0.0):
            return torch.randn(shape, generator=gen, dtype=torch.float32) * std + mean

        if name.endswith("A_log"):
            v = torch.rand(shape, generator=gen, dtype=torch.float32) * 2.0 - 1.0
        elif name.endswith("dt_bias"):
            v = normal(0.5)
        elif name.endswith("conv1d.weight"):
            v = normal(0.3)
        elif name.endswith("linear_attn.norm.weight"):
            v = normal(0.1, 1.0)      # used as is (no 1 +)
        elif name.endswith("norm.weight") or name.endswith("layernorm.weight"):
            v = normal(0.1)           # HF computes (1 + w)
        elif name.endswith("embed_tokens.weight"):
            # With tied embeddings the LM head is this matrix: a large scale
            # makes positions predict their own input token (logit ~||e||^2
            # against ~||e|| for the others), a tiny one leaves the residual
            # stream to the layers alone and the model chaotic (quantisation
            # noise amplified many times).  embed_std picks the middle.
            v = normal(fx.get("embed_std", 1.0))
        elif name.endswith("lm_head.weight"):
            v = normal(2.5 / math.sqrt(H))
        elif name.endswith("mlp.gate.weight"):
            v = normal(3.0 / math.sqrt(H))   # router: decisive routing
        elif name.endswith("shared_expert_gate.weight"):
            v = normal(1.0 / math.sqrt(H))
        elif len(shape) >= 2 and any(s in name for s in ("o_proj", "out_proj", "down_proj")):
            v = normal(0.5 / math.sqrt(shape[-1]))
        elif len(shape) >= 2 and name.endswith(("weight", "gate_up_proj", "gate_proj",
                                                 "up_proj")):
            v = normal(1.0 / math.sqrt(shape[-1]))
        else:
            die("%s: unexpected parameter %s %s; teach init_weights about it"
                % (fx["name"], name, shape))
        with torch.no_grad():
            p.copy_(v)
        seen += 1
    return seen


def round_to(model, dtype):
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.to(dtype).to(torch.float32))


def router_margin(model, ids, k):
    """Smallest gap between the k-th and (k+1)-th router logit over every
    token and MoE layer of a full forward, or None without a router."""
    gaps = []
    hooks = []

    def pre_hook(mod, args):
        x = args[0].detach().float().reshape(-1, args[0].shape[-1])
        logits = x @ mod.weight.detach().float().t()
        top = torch.topk(logits, k + 1, dim=-1).values
        gaps.append(float((top[:, k - 1] - top[:, k]).min()))

    for name, mod in model.named_modules():
        if name.endswith("mlp.gate") and hasattr(mod, "weight"):
            hooks.append(mod.register_forward_pre_hook(pre_hook))
    if not hooks:
        return None
    try:
        with torch.no_grad():
            model(input_ids=ids, use_cache=False)
    finally:
        for h in hooks:
            h.remove()
    return min(gaps) if gaps else None


def load_f32(cls, path):
    kw = dict(attn_implementation="eager")
    try:
        return cls.from_pretrained(path, dtype=torch.float32, **kw)
    except TypeError:
        return cls.from_pretrained(path, torch_dtype=torch.float32, **kw)


def logits_full(model, ids):
    with torch.no_grad():
        out = model(input_ids=ids, use_cache=False)
    return out.logits[0].float().cpu().numpy()


def logits_step(model, ids):
    rows = []
    past = None
    with torch.no_grad():
        for i in range(ids.shape[1]):
            out = model(input_ids=ids[:, i:i + 1], past_key_values=past, use_cache=True)
            past = out.past_key_values
            rows.append(out.logits[0, -1].float().cpu().numpy())
    return np.stack(rows)


def fake_q8_0(model):
    """Rounds the weights a Q8_0 GGUF would quantise as ggml does (blocks of
    32 along rows, scale amax/127 stored as f16); others to f16 when their
    rows are not a multiple of 32.  Norms, conv taps and routers stay."""
    keep = ("norm.weight", "layernorm.weight", "conv1d.weight", "mlp.gate.weight",
            "shared_expert_gate.weight", "A_log", "dt_bias")
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() < 2 or name.endswith(keep):
                continue
            if p.shape[-1] % 32 != 0:
                p.copy_(p.half().float())
                continue
            b = p.reshape(-1, 32)
            d = (b.abs().amax(dim=1, keepdim=True) / 127.0).half().float()
            q = torch.where(d > 0, torch.round(b / torch.where(d > 0, d, torch.ones_like(d))),
                            torch.zeros_like(b)).clamp(-127, 127)
            p.copy_((q * d).reshape(p.shape))


def decisive_agreement(got, ref, threshold=0.1):
    """Top-1 agreement over positions whose reference top-2 gap is at least
    `threshold` standard deviations of the reference logits (the metric of
    check_fixtures.c)."""
    top = np.sort(ref, axis=-1)
    gap = (top[:, -1] - top[:, -2]) / ref.std(axis=-1)
    dec = gap >= threshold
    same = got.argmax(-1) == ref.argmax(-1)
    return int((same & dec).sum()), int(dec.sum()), int(same.sum())


def quant_probe(mcls, hf_dir, ids, full):
    """How sensitive the fixture is to Q8_0 rounding (reported, not gated)."""
    m = load_f32(mcls, hf_dir).eval()
    fake_q8_0(m)
    q = logits_full(m, ids)
    ds, dn, same = decisive_agreement(q, full)
    p = np.exp(full - full.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    lq = q - q.max(-1, keepdims=True)
    lq -= np.log(np.exp(lq).sum(-1, keepdims=True))
    lp = np.log(p)
    kl = float((p * (lp - lq)).sum(-1).mean())
    copy = float((full.argmax(-1) == ids[0].numpy()).mean())
    return {"rel_err": rel_err(q, full), "top1_decisive": [ds, dn], "top1_all": same,
            "kl": kl, "predicts_own_input": copy}


def min_margin(logits):
    top2 = np.sort(logits, axis=-1)[:, -2:]
    gap = top2[:, 1] - top2[:, 0]
    norm = np.linalg.norm(logits.astype(np.float64), axis=-1)
    return float((gap / norm).min())


def rel_err(a, b):
    d = np.linalg.norm((a - b).astype(np.float64), axis=-1)
    n = np.linalg.norm(b.astype(np.float64), axis=-1)
    return float((d / n).max())


# --------------------------------------------------------------------------
# files
# --------------------------------------------------------------------------

def write_logits(path, logits):
    n_pos, n_vocab = logits.shape
    head = ("SILOGITS f32le n_pos=%d n_vocab=%d" % (n_pos, n_vocab)).ljust(63) + "\n"
    assert len(head) == 64
    with open(path, "wb") as f:
        f.write(head.encode("ascii"))
        f.write(np.ascontiguousarray(logits, dtype="<f4").tobytes())


def safetensors_summary(hf_dir):
    keys, dtypes = [], {}
    for fn in sorted(os.listdir(hf_dir)):
        if not fn.endswith(".safetensors"):
            continue
        with safe_open(os.path.join(hf_dir, fn), framework="pt") as f:
            for k in f.keys():
                keys.append(k)
                dt = str(f.get_slice(k).get_dtype())
                dtypes[dt] = dtypes.get(dt, 0) + 1
    return keys, dtypes


def dir_size(d):
    total = 0
    for root, _, files in os.walk(d):
        for fn in files:
            total += os.path.getsize(os.path.join(root, fn))
    return total


# --------------------------------------------------------------------------
# one fixture
# --------------------------------------------------------------------------

def make_fixture(fx, classes, out_root):
    name = fx["name"]
    say("=== %s ===" % name)
    tok, n_tok, special = train_tokenizer(fx["tok_target"])
    say("  tokenizer: %d tokens (%d padding rows up to vocab_size %d); special ids %r"
        % (n_tok, fx["vocab"] - n_tok, fx["vocab"], special))
    if not 300 <= n_tok <= fx["vocab"] - 8:
        die("%s: tokenizer size %d outside [300, vocab_size - 8]" % (name, n_tok))
    prompt_ids = tok.encode(PROMPT).ids
    if tok.decode(prompt_ids, skip_special_tokens=False) != PROMPT:
        die("%s: the tokenizer does not round-trip the prompt" % name)
    for t in ("<|im_start|>", "<|im_end|>", "<think>"):
        if special[t] not in prompt_ids:
            die("%s: special token %s not matched in the prompt" % (name, t))
    prompt_ids = prompt_ids[:N_POS - 8]

    mcls = classes["moe_model" if fx["moe"] else "dense_model"]
    ccls = classes["moe_config" if fx["moe"] else "dense_config"]
    storage = getattr(torch, fx["storage"])
    fdir = os.path.join(out_root, name)
    hf_dir = os.path.join(fdir, "hf")

    for attempt in range(SEED_TRIES):
        seed = fx["seed"] + 1000 * attempt
        torch.manual_seed(seed)
        gen = torch.Generator().manual_seed(seed)
        cfg, layer_types = make_config(ccls, fx)
        model = mcls(cfg).float().eval()
        n_params = init_weights(model, fx, gen)
        round_to(model, storage)
        tail = torch.randint(0, fx["vocab"], (N_POS - len(prompt_ids),), generator=gen).tolist()
        ids_list = prompt_ids + tail
        ids = torch.tensor([ids_list], dtype=torch.long)

        # Save, then work only with what was saved.
        if os.path.isdir(fdir):
            shutil.rmtree(fdir)
        os.makedirs(hf_dir)
        expected = {k: v.detach().clone().float() for k, v in model.state_dict().items()}
        model.to(storage).save_pretrained(hf_dir)
        del model
        tok.save(os.path.join(hf_dir, "tokenizer.json"))
        with open(os.path.join(hf_dir, "tokenizer_config.json"), "w") as f:
            json.dump(tokenizer_config(), f, indent=2)
            f.write("\n")

        ref = load_f32(mcls, hf_dir).eval()
        got = ref.state_dict()
        if set(got) != set(expected):
            die("%s: reloaded state_dict keys differ: only saved %s, only loaded %s"
                % (name, sorted(set(expected) - set(got))[:5], sorted(set(got) - set(expected))[:5]))
        for k, v in expected.items():
            if not torch.equal(got[k].float(), v):
                die("%s: parameter %s changed through save/load (max diff %g)"
                    % (name, k, float((got[k].float() - v).abs().max())))
        inv = getattr(getattr(ref.model, "rotary_emb", None), "inv_freq", None)
        n_rot = int(round(fx["head_dim"] * fx["prf"]))
        if inv is not None and inv.numel() != n_rot // 2:
            die("%s: transformers rotates %d dims, expected %d" % (name, 2 * inv.numel(), n_rot))

        full = logits_full(ref, ids)
        step = logits_step(ref, ids)
        fs_err = rel_err(step, full)
        m_full, m_step = min_margin(full), min_margin(step)
        r_gap = router_margin(ref, ids, fx["top_k"]) if fx["moe"] else None
        say("  seed %d: %d parameter tensors, |full - step| rel %.3g, "
            "top-1 margin full %.3g step %.3g%s"
            % (seed, n_params, fs_err, m_full, m_step,
               "" if r_gap is None else ", router gap %.3g" % r_gap))
        if not np.isfinite(full).all() or not np.isfinite(step).all():
            die("%s: non-finite logits" % name)
        if fs_err > FULL_STEP_TOL:
            die("%s: transformers' full forward and cached decode disagree (%.3g)" % (name, fs_err))
        if fx["moe"] and r_gap is None:
            die("%s: no router (mlp.gate with a weight) found to check" % name)
        if min(m_full, m_step) >= MARGIN_REL and (r_gap is None or r_gap >= ROUTER_MARGIN):
            break
        say("  margins too small for an unambiguous reference; next seed")
    else:
        die("%s: no seed in %d tries gave the required margins" % (name, SEED_TRIES))

    probe = quant_probe(mcls, hf_dir, ids, full)
    say("  fake q8_0 probe: rel err %.3g, top-1 %d/%d decisive (%d/%d all), KL %.3g, "
        "argmax = own input token at %.0f%% of positions"
        % (probe["rel_err"], probe["top1_decisive"][0], probe["top1_decisive"][1],
           probe["top1_all"], N_POS, probe["kl"], 100 * probe["predicts_own_input"]))

    keys, dtypes = safetensors_summary(hf_dir)
    fused = any(k.endswith("mlp.experts.gate_up_proj") for k in keys)
    per_expert = any(".mlp.experts.0." in k for k in keys)
    experts_format = ("fused gate_up_proj/down_proj" if fused else
                      "per-expert tensors" if per_expert else
                      "n/a" if not fx["moe"] else "UNKNOWN")
    if fx["moe"] and experts_format == "UNKNOWN":
        die("%s: saved experts in a form the converter does not know: %s"
            % (name, [k for k in keys if "experts" in k][:6]))
    say("  saved %d tensors (%s), experts: %s" % (len(keys), dtypes, experts_format))

    with open(os.path.join(fdir, "ids.txt"), "w") as f:
        f.write("# %s: %d token ids: %d prompt tokens, then random ids in [0, %d) (seed %d)\n"
                % (name, N_POS, len(prompt_ids), fx["vocab"], seed))
        f.write(" ".join(str(i) for i in ids_list) + "\n")
    write_logits(os.path.join(fdir, "logits_full.f32"), full)
    write_logits(os.path.join(fdir, "logits_step.f32"), step)
    meta = {
        "name": name,
        "model_class": mcls.__name__,
        "config_class": ccls.__name__,
        "storage_dtype": fx["storage"],
        "seed": seed,
        "n_pos": N_POS,
        "n_vocab": fx["vocab"],
        "tokenizer_tokens": n_tok,
        "prompt": PROMPT,
        "prompt_tokens": len(prompt_ids),
        "layer_types": layer_types,
        "fixture": {k: v for k, v in fx.items() if k != "name"},
        "parameter_tensors": n_params,
        "safetensors_tensors": len(keys),
        "safetensors_dtypes": dtypes,
        "experts_format": experts_format,
        "checks": {
            "max_rel_full_vs_step": fs_err,
            "min_top1_margin_rel_full": m_full,
            "min_top1_margin_rel_step": m_step,
            "min_router_gap": r_gap,
            "fake_q8_0_probe": probe,
        },
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "tokenizers": tokenizers.__version__,
            "safetensors": safetensors.__version__,
            "numpy": np.__version__,
        },
        "device": "cpu",
        "torch_threads": torch.get_num_threads(),
        "made": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    with open(os.path.join(fdir, "meta.json"), "w") as f:
        json.dump(meta, f, indent=2)
        f.write("\n")
    size = dir_size(fdir)
    say("  wrote %s: %.0f KB" % (fdir, size / 1024))
    if size > SIZE_WARN:
        say("  WARNING: %s is %.0f KB, above the %.0f KB target" % (name, size / 1024,
                                                                   SIZE_WARN / 1024))
    return size, experts_format


README = """\
# Hugging Face reference fixtures

Made by `tests/reference/make_fixtures.py` (see its docstring) with
torch {torch} and transformers {transformers} on the CPU.  Each folder holds a
tiny random Qwen3.5 / Qwen3.5-MoE checkpoint (`hf/`), token ids (`ids.txt`)
and transformers' float32 logits for a full forward (`logits_full.f32`) and
for token-by-token cached decode (`logits_step.f32`), plus `meta.json`.
`tests/convert/check_fixtures` converts each checkpoint with `sparkinfer
convert` and compares the model plugins' logits on the CPU backend with these.

Do not edit by hand: re-run the script instead.
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="tests/data/fixtures", help="output folder")
    ap.add_argument("--only", action="append", help="make only this fixture (repeatable)")
    args = ap.parse_args()

    say("python %s, torch %s, transformers %s, tokenizers %s, safetensors %s, numpy %s"
        % (platform.python_version(), torch.__version__, transformers.__version__,
           tokenizers.__version__, safetensors.__version__, np.__version__))
    if not transformers.__version__.split(".")[0].isdigit() or \
            int(transformers.__version__.split(".")[0]) < 5:
        die("transformers %s: need 5.x (Qwen3.5 support)" % transformers.__version__)
    for opt in ("fla", "causal_conv1d", "kernels"):
        try:
            importlib.import_module(opt)
            say("note: optional package '%s' is installed; the reference runs on the CPU, "
                "where transformers uses its torch code paths" % opt)
        except ImportError:
            pass
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    classes = find_classes()

    todo = [fx for fx in FIXTURES if not args.only or fx["name"] in args.only]
    if args.only and len(todo) != len(args.only):
        die("unknown fixture in --only %r (have %s)" % (args.only, [f["name"] for f in FIXTURES]))
    os.makedirs(args.out, exist_ok=True)
    total = 0
    formats = {}
    for fx in todo:
        size, fmt = make_fixture(fx, classes, args.out)
        total += size
        formats[fx["name"]] = fmt
    with open(os.path.join(args.out, "README.md"), "w") as f:
        f.write(README.format(torch=torch.__version__, transformers=transformers.__version__))
    say("done: %d fixtures, %.0f KB in %s; MoE experts saved as %r"
        % (len(todo), total / 1024, args.out, formats))


if __name__ == "__main__":
    main()
