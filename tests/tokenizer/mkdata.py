#!/usr/bin/env python3
"""Writes the compact Qwen3 vocabulary the tokenizer tests load.

    mkdata.py SHARED_DATA/tokenizer/qwen3/tokenizer.json tests/data/tokenizer/qwen3

tokenizer.json is 11 MB; its BPE part is fully given by the merges: ids
0..255 are the byte symbols in GPT-2 bytes_to_unicode order and merge i makes
token 256+i (checked below; the script refuses a file where that fails).
So two files suffice:
  merges.txt        one merge per line, "left right", as tokenizer.json spells it
  added_tokens.tsv  id <TAB> type (3 control = special, 4 user-defined) <TAB> text
"""
import json
import sys


def bytes_to_unicode():
    bs = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [chr(c) for c in cs]   # in id order


def main():
    src, dst = sys.argv[1], sys.argv[2]
    d = json.load(open(src, encoding="utf-8"))
    vocab = d["model"]["vocab"]
    merges = [m if isinstance(m, str) else " ".join(m) for m in d["model"]["merges"]]
    inv = {i: t for t, i in vocab.items()}
    syms = bytes_to_unicode()
    assert all(inv[i] == syms[i] for i in range(256)), "ids 0..255 are not the byte symbols"
    for i, m in enumerate(merges):
        a, b = m.split(" ")
        assert inv[256 + i] == a + b, "merge %d does not make token %d" % (i, 256 + i)
    assert len(vocab) == 256 + len(merges), "vocabulary has tokens no merge makes"
    with open(dst + "/merges.txt", "w", encoding="utf-8", newline="\n") as f:
        for m in merges:
            f.write(m + "\n")
    with open(dst + "/added_tokens.tsv", "w", encoding="utf-8", newline="\n") as f:
        for t in d["added_tokens"]:
            f.write("%d\t%d\t%s\n" % (t["id"], 3 if t["special"] else 4, t["content"]))


if __name__ == "__main__":
    main()
