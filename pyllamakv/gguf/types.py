"""The GGUF format's two type tables: metadata value types and ggml tensor types.

Facts of the format (ggml's gguf.h and ggml.h), written out once so that the
reader in gguf_file.py needs no other package. Tensor types the core cannot
run are listed too: the reader must know every type's size to check where a
tensor's bytes lie, and the core refuses the type by name later.
"""
from __future__ import annotations

# ---------------------------------------------------------------- metadata value types

UINT8, INT8, UINT16, INT16, UINT32, INT32, FLOAT32, BOOL, STRING, ARRAY, UINT64, INT64, \
    FLOAT64 = range(13)

VALUE_TYPE_NAMES = {
    UINT8: "uint8", INT8: "int8", UINT16: "uint16", INT16: "int16", UINT32: "uint32",
    INT32: "int32", FLOAT32: "float32", BOOL: "bool", STRING: "string", ARRAY: "array",
    UINT64: "uint64", INT64: "int64", FLOAT64: "float64",
}

# fixed-size value types: their little-endian numpy dtype
SCALAR_DTYPES = {
    UINT8: "<u1", INT8: "<i1", UINT16: "<u2", INT16: "<i2", UINT32: "<u4", INT32: "<i4",
    FLOAT32: "<f4", BOOL: "<u1", UINT64: "<u8", INT64: "<i8", FLOAT64: "<f8",
}
INT_TYPES = frozenset((UINT8, INT8, UINT16, INT16, UINT32, INT32, UINT64, INT64))
FLOAT_TYPES = frozenset((FLOAT32, FLOAT64))

# ---------------------------------------------------------------- ggml tensor types

# id -> (name, elements per block, bytes per block); ids 4, 5, 31-33 and 36-38 were
# removed from ggml (old and repacked formats) and are refused
TENSOR_TYPES: dict[int, tuple[str, int, int]] = {
    0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20),
    6: ("Q5_0", 32, 22), 7: ("Q5_1", 32, 24), 8: ("Q8_0", 32, 34), 9: ("Q8_1", 32, 40),
    10: ("Q2_K", 256, 84), 11: ("Q3_K", 256, 110), 12: ("Q4_K", 256, 144),
    13: ("Q5_K", 256, 176), 14: ("Q6_K", 256, 210), 15: ("Q8_K", 256, 292),
    16: ("IQ2_XXS", 256, 66), 17: ("IQ2_XS", 256, 74), 18: ("IQ3_XXS", 256, 98),
    19: ("IQ1_S", 256, 50), 20: ("IQ4_NL", 32, 18), 21: ("IQ3_S", 256, 110),
    22: ("IQ2_S", 256, 82), 23: ("IQ4_XS", 256, 136), 24: ("I8", 1, 1), 25: ("I16", 1, 2),
    26: ("I32", 1, 4), 27: ("I64", 1, 8), 28: ("F64", 1, 8), 29: ("IQ1_M", 256, 56),
    30: ("BF16", 1, 2), 34: ("TQ1_0", 256, 54), 35: ("TQ2_0", 256, 66),
    39: ("MXFP4", 32, 17), 40: ("NVFP4", 64, 36), 41: ("Q1_0", 128, 18),
}
F32, F16, BF16 = 0, 1, 30

# byte offsets of the f16 scales inside one block, for the formats whose
# scales are plain f16 fields (what the finite-weights check reads)
F16_SCALE_FIELDS: dict[int, tuple[int, ...]] = {
    2: (0,), 3: (0, 2), 6: (0,), 7: (0, 2), 8: (0,), 10: (80, 82), 11: (108,),
    12: (0, 2), 13: (0, 2), 14: (208,), 16: (0,), 17: (0,), 18: (0,), 19: (0,), 20: (0,),
    21: (0,), 22: (0,), 23: (0,), 34: (52,), 35: (64,),
}
