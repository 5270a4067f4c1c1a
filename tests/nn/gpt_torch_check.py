"""Loads a volt GPT saved with nn::save into a PyTorch model of nanoGPT's
layout, by name, and compares its logits with the ones volt computed.

    python3 gpt_torch_check.py MODEL.safetensors IO.safetensors N_LAYER N_HEAD N_EMBD BLOCK VOCAB

IO.safetensors holds `idx` (B, T) and volt's `logits` (B, T, V). Prints the
largest absolute difference; exits 0 when it is within 1e-5, 1 otherwise.
The files are read with safetensors.torch where that package exists, else by
the few lines below (an 8-byte header length, a JSON header, raw data)."""
import json
import math
import struct
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

DTYPES = {"F32": torch.float32, "F64": torch.float64, "I64": torch.int64, "I32": torch.int32}


def read_safetensors(path):
    try:
        from safetensors.torch import load_file
        return load_file(path)
    except ImportError:
        pass
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        raw = bytearray(data[8 + n + begin:8 + n + end])
        t = torch.frombuffer(raw, dtype=DTYPES[info["dtype"]]) if raw else torch.empty(0, dtype=DTYPES[info["dtype"]])
        out[name] = t.reshape(info["shape"]).clone()
    return out


class Attention(nn.Module):
    def __init__(self, c, heads):
        super().__init__()
        self.heads = heads
        self.c_attn = nn.Linear(c, 3 * c)
        self.c_proj = nn.Linear(c, c)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        scores = q @ k.transpose(-2, -1) / math.sqrt(c // self.heads)
        mask = torch.ones(t, t, dtype=torch.bool).tril()
        scores = scores.masked_fill(~mask, float("-inf"))
        y = F.softmax(scores, dim=-1) @ v
        return self.c_proj(y.transpose(1, 2).reshape(b, t, c))


class Mlp(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c_fc = nn.Linear(c, 4 * c)
        self.c_proj = nn.Linear(4 * c, c)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, c, heads):
        super().__init__()
        self.ln_1 = nn.LayerNorm(c)
        self.attn = Attention(c, heads)
        self.ln_2 = nn.LayerNorm(c)
        self.mlp = Mlp(c)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class Gpt(nn.Module):
    def __init__(self, layers, heads, c, block, vocab):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab, c), wpe=nn.Embedding(block, c),
            h=nn.ModuleList(Block(c, heads) for _ in range(layers)), ln_f=nn.LayerNorm(c)))
        self.lm_head = nn.Linear(c, vocab, bias=False)
        self.lm_head.weight = self.transformer.wte.weight  # tied, as in nanoGPT

    def forward(self, idx):
        t = idx.shape[1]
        x = self.transformer.wte(idx) + self.transformer.wpe(torch.arange(t))
        for block in self.transformer.h:
            x = block(x)
        return self.lm_head(self.transformer.ln_f(x))


def main():
    model_path, io_path = sys.argv[1], sys.argv[2]
    layers, heads, c, block, vocab = (int(a) for a in sys.argv[3:8])
    model = Gpt(layers, heads, c, block, vocab)
    model.load_state_dict(read_safetensors(model_path), strict=True)
    io = read_safetensors(io_path)
    with torch.no_grad():
        logits = model(io["idx"])
    diff = (logits - io["logits"]).abs().max().item()
    print(f"torch {torch.__version__}: {sum(p.numel() for p in model.parameters())} parameters loaded by name, "
          f"logits {tuple(logits.shape)}, max abs diff {diff:.3g}")
    sys.exit(0 if diff <= 1e-5 else 1)


if __name__ == "__main__":
    main()
