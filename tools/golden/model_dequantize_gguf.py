#!/usr/bin/env python3
"""Writes a copy of a GGUF file with every tensor dequantized to F32 (gguf-py's numpy
dequantization), metadata unchanged. llama.cpp then runs plain f32 matmuls on the very weights
kvevict dequantizes at load, instead of quantizing activations to 8 bits for quantized
matmuls, so the golden logits can be compared at float-rounding tolerance.

  pip install gguf
  python3 tools/golden/model_dequantize_gguf.py in.gguf out-f32.gguf
"""
import sys

import numpy as np
import gguf


def main(src, dst):
    reader = gguf.GGUFReader(src)
    arch = reader.get_field("general.architecture").contents()
    writer = gguf.GGUFWriter(dst, arch)
    for name, field in reader.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        vtype = field.types[0]
        sub = field.types[1] if vtype == gguf.GGUFValueType.ARRAY and len(field.types) > 1 else None
        writer.add_key_value(name, field.contents(), vtype, sub)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    for t in reader.tensors:
        data = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        # Row-major numpy shape (the reverse of GGUF's ne order).
        shape = tuple(int(x) for x in reversed(t.shape))
        writer.add_tensor(t.name, data.reshape(shape), raw_dtype=gguf.GGMLQuantizationType.F32)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
