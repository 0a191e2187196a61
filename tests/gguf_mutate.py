"""Structure-aware GGUF mutations for the validation tests: a file is read into its metadata and tensors,
changed as a GGUF (retyped, dropped and added keys, tensor types and shapes), and written back as a well-formed
container, so what is tested is the meaning of the file, not the byte parser (tests/test_gguf_reader.py)."""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFValueType

from gguf_mtp.ggufio.format import KV
from gguf_mtp.ggufio.reader import GGUFFile
from gguf_mtp.ggufio.writer import OutTensor, write_all, write_gguf

V = GGUFValueType
T = GGMLQuantizationType


@dataclass
class RawTensor:
    name: str
    shape: tuple[int, ...]
    ggml_type: int
    data: bytes


@dataclass
class RawGGUF:
    kvs: list[KV]
    tensors: list[RawTensor]
    alignment: int = 32

    @classmethod
    def read(cls, path: Path) -> "RawGGUF":
        f = GGUFFile(path)
        ts = [RawTensor(t.name, t.shape, t.ggml_type, f.read_tensor_bytes(t.name)) for t in f.tensors.values()]
        return cls(list(f.kv.values()), ts, f.alignment)

    def copy(self) -> "RawGGUF":
        return RawGGUF(list(self.kvs), [RawTensor(t.name, t.shape, t.ggml_type, t.data) for t in self.tensors],
                       self.alignment)

    def write(self, path: Path) -> Path:
        def writer(data: bytes):  # type: ignore[no-untyped-def]
            return lambda fh, progress: write_all(fh, data)

        write_gguf(path, self.kvs, [OutTensor(t.name, t.shape, t.ggml_type, writer(t.data)) for t in self.tensors],
                   alignment=self.alignment)
        return path

    # -- edits ------------------------------------------------------------------------------
    @property
    def arch(self) -> str:
        return next(str(kv.value) for kv in self.kvs if kv.key == "general.architecture")

    def key(self, suffix: str) -> str:
        return f"{self.arch}.{suffix}"

    def set(self, kv: KV) -> "RawGGUF":
        self.kvs = [k for k in self.kvs if k.key != kv.key] + [kv]
        return self

    def drop(self, key: str) -> "RawGGUF":
        self.kvs = [k for k in self.kvs if k.key != key]
        return self

    def retype(self, name: str, ggml_type: int, shape: tuple[int, ...] | None = None, seed: int = 0) -> "RawGGUF":
        """Give tensor ``name`` another type (and shape), with random bytes of the right size."""
        for t in self.tensors:
            if t.name == name:
                t.ggml_type, t.shape = ggml_type, shape or t.shape
                t.data = random_bytes(t.shape, ggml_type, seed)
        return self


def nbytes(shape: tuple[int, ...], ggml_type: int) -> int:
    block, size = GGML_QUANT_SIZES[T(ggml_type)]
    n = int(np.prod(shape))
    return n // block * size


def random_bytes(shape: tuple[int, ...], ggml_type: int, seed: int = 0) -> bytes:
    """Bytes for a tensor: finite float32 / float16 values, else random bytes with sane block scales."""
    rng = np.random.default_rng(seed)
    n = int(np.prod(shape))
    if ggml_type == T.F32:
        return rng.normal(0, 0.02, n).astype(np.float32).tobytes()
    if ggml_type in (T.F16, T.BF16):
        return (rng.normal(0, 0.02, n).astype(np.float16).view(np.uint16).tobytes() if ggml_type == T.F16
                else (rng.normal(0, 0.02, n).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16).tobytes())
    raw = bytearray(rng.integers(0, 256, nbytes(shape, ggml_type), dtype=np.uint8).tobytes())
    if ggml_type in (T.Q8_0, T.Q4_0):  # an fp16 scale of 0.01 at the start of every block
        block = GGML_QUANT_SIZES[T(ggml_type)][1]
        for off in range(0, len(raw), block):
            raw[off:off + 2] = np.float16(0.01).tobytes()
    return bytes(raw)


# -- random mutations (the fuzzer) --------------------------------------------------------------
ODD_NUMBERS = [0, 1, 2, 3, 7, 255, 511, 512, 513, 1025, 2**31 - 1, 2**32 - 1, 10**9]


def _odd_value(rng: random.Random, key: str) -> KV:
    kind = rng.choice(["u32", "i32", "u64", "f32", "f32nan", "str", "bool", "arr_u32", "arr_str", "arr_long"])
    n = rng.choice(ODD_NUMBERS)
    if kind == "u32":
        return KV.u32(key, n)
    if kind == "i32":
        return KV.i32(key, rng.choice([-1, 0, 1, 2**31 - 1, -(2**31)]))
    if kind == "u64":
        return KV(key, V.UINT64, n)
    if kind == "f32":
        return KV.f32(key, rng.choice([0.0, -1.0, 1e-6, 1e30, float(n)]))
    if kind == "f32nan":
        return KV.f32(key, rng.choice([float("nan"), float("inf"), -float("inf")]))
    if kind == "str":
        return KV.string(key, rng.choice(["", "12", "yarn", "x" * 100]))
    if kind == "bool":
        return KV.boolean(key, rng.random() < 0.5)
    if kind == "arr_u32":
        return KV.array(key, V.UINT32, [rng.choice(ODD_NUMBERS[:8]) for _ in range(rng.choice([0, 1, 3, 9, 10, 11]))])
    if kind == "arr_str":
        return KV.array(key, V.STRING, ["a", "b"])
    return KV.array(key, V.INT32, [1] * 600)


#: keys worth mutating beside the ones a file has (added keys)
EXTRA_KEYS = ("nextn_predict_layers", "block_count", "expert_count", "expert_used_count", "expert_group_count",
              "rope.scaling.type", "attention.head_count_kv", "nextn_shared_target_tensors", "feed_forward_length")


def mutate(g: RawGGUF, rng: random.Random) -> tuple[RawGGUF, str]:
    """One random structure-aware mutation of ``g``; returns the mutant and a short description."""
    m = g.copy()
    op = rng.choice(["retype_key", "retype_key", "drop_key", "add_key", "tensor_type", "tensor_shape",
                     "drop_tensor", "rename_tensor", "value", "value"])
    arch_keys = [kv.key for kv in m.kvs if kv.key.startswith(m.arch + ".") or kv.key.startswith("tokenizer.")]
    if op in ("retype_key", "value") and arch_keys:
        key = rng.choice(arch_keys)
        if op == "value":
            old = next(kv for kv in m.kvs if kv.key == key)
            if old.vtype in (V.UINT32, V.INT32, V.UINT64):
                new = KV(key, old.vtype, rng.choice([v for v in ODD_NUMBERS if old.vtype != V.INT32 or v < 2**31]))
            elif old.vtype == V.FLOAT32:
                new = KV.f32(key, rng.choice([0.0, -1.0, float("nan"), 1e38]))
            elif old.vtype == V.ARRAY and old.item_type not in (V.STRING,) and len(old.value):
                vals = list(old.scalar())
                cut = rng.choice([len(vals) - 1, len(vals) + 1, 1])
                new = KV.array(key, old.item_type, (vals * 2)[:cut])  # type: ignore[arg-type]
            else:
                new = _odd_value(rng, key)
            return m.set(new), f"value {key}={new.value!r:.40}"
        new = _odd_value(rng, key)
        return m.set(new), f"retype {key} -> {new.vtype.name}"
    if op == "drop_key" and arch_keys:
        key = rng.choice(arch_keys)
        return m.drop(key), f"drop {key}"
    if op == "add_key":
        key = m.key(rng.choice(EXTRA_KEYS))
        new = _odd_value(rng, key) if rng.random() < 0.5 else KV.u32(key, rng.choice(ODD_NUMBERS))
        return m.set(new), f"add {key}={new.value!r:.40}"
    t = rng.choice(m.tensors)
    if op == "tensor_type":
        gt = rng.choice([T.F32, T.F16, T.BF16, T.Q8_0, T.Q4_0, T.Q4_K, T.Q6_K, T.I32, T.I8])
        if t.shape[0] % GGML_QUANT_SIZES[gt][0]:
            gt = rng.choice([T.F16, T.BF16, T.I32])
        return m.retype(t.name, int(gt), seed=rng.randrange(1 << 30)), f"type {t.name} -> {gt.name}"
    if op == "tensor_shape":
        shape = list(t.shape)
        how = rng.choice(["swap", "grow", "shrink", "add_dim", "drop_dim"])
        if how == "swap" and len(shape) > 1:
            shape[0], shape[1] = shape[1], shape[0]
        elif how == "grow":
            shape[-1] += 1
        elif how == "shrink" and shape[-1] > 1:
            shape[-1] -= 1
        elif how == "add_dim" and len(shape) < 4:
            shape.append(2)
        elif how == "drop_dim" and len(shape) > 1:
            last = shape.pop()
            shape[-1] *= last
        if shape[0] % GGML_QUANT_SIZES[T(t.ggml_type)][0]:
            return m, "no-op"
        return m.retype(t.name, t.ggml_type, tuple(shape), seed=rng.randrange(1 << 30)), f"shape {t.name} {how}"
    if op == "drop_tensor":
        m.tensors = [x for x in m.tensors if x.name != t.name]
        return m, f"drop tensor {t.name}"
    # rename: a block beyond block_count, or another block's slot
    parts = t.name.split(".")
    if parts[0] == "blk":
        parts[1] = str(rng.choice([0, 1, int(parts[1]) + 1, 99]))
    else:
        parts[0] = parts[0] + "_x"
    new_name = ".".join(parts)
    if any(x.name == new_name for x in m.tensors):
        return m, "no-op"
    t.name = new_name
    return m, f"rename tensor -> {new_name}"
