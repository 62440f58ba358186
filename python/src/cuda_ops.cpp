// Device-memory ops (torch CUDA tensors) through kvevict/cuda/*.h: every call takes the caller's
// stream (torch.cuda.current_stream().cuda_stream, an integer handle) so kvevict's kernels are
// ordered with torch's work and nothing synchronizes the device here. cuda::attention is the one
// exception: it synchronizes its stream (its host offsets/lens/q_pos are uploaded asynchronously).
// Builds without CUDA bind the same names to a function that raises naming the build option.
#include <nanobind/stl/string.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "bindings.h"
#include "kvevict/error.h"

#if defined(KVEVICT_WITH_CUDA)
#include "kvevict/cuda/attention.h"
#include "kvevict/cuda/compact.h"
#include "kvevict/cuda/score.h"
#include "kvevict/cuda/select.h"
// The model runtime's flash-decoding kernel (raw pointers, layer 2): the HF decode fast path.
#include "cuda/model_launchers.h"
#endif

namespace kvevict::python {

#if defined(KVEVICT_WITH_CUDA)
namespace {

cuda::Stream stream_of(uintptr_t handle) {
  return reinterpret_cast<cuda::Stream>(handle);
}

void check_device(const TensorView& t, const char* what) {
  check_on(t, Device::kCuda, what);
}

ScoreProblem device_problem(const nb::handle& q, const Array& k, const Array& v,
                            const nb::handle& wo, float scale) {
  const Device cuda = Device::kCuda;
  return score_problem_of(q, k, v, wo, scale, &cuda);
}

Workspace workspace_of(const nb::handle& ws, size_t need, const char* what) {
  const TensorView t = to_view_opt(ws, what);
  const auto bytes = static_cast<size_t>(t.empty() ? 0 : t.numel() * dtype_size(t.dtype));
  KVEVICT_CHECK(bytes >= need, what, " holds ", bytes, " bytes; expected at least ", need);
  if (!t.empty()) check_device(t, what);
  return Workspace{t.data, bytes};
}

// A contiguous device tensor of `dtype` with `numel` elements (numel < 0: any).
TensorView device_flat(const nb::handle& a, DType dtype, int64_t numel, const char* what) {
  const TensorView t = to_view_opt(a, what);
  KVEVICT_CHECK(!t.empty(), what, " is missing; expected a CUDA tensor");
  check_device(t, what);
  KVEVICT_CHECK(t.dtype == dtype && t.is_contiguous() && (numel < 0 || t.numel() == numel), what,
                " is ", dtype_name(t.dtype), " ", t.shape_str(), "; expected a contiguous ",
                dtype_name(dtype), " tensor of ", numel, " elements");
  return t;
}

}  // namespace

void bind_cuda_ops(nb::module_& m) {
  m.attr("cuda_built") = true;

  // Decode (one query token per sequence) over the per-head segment layout, everything on the
  // device: no host copy, no synchronization. Segment s = b * Hkv + g holds rows seg_off[s] ..
  // seg_off[s] + seg_len[s] of k, v; query heads g G .. g G + G - 1 of batch row b read it. Every
  // row in a segment is visible (decode: all cached positions precede the query).
  m.def(
      "cuda_decode_attention_scratch_bytes",
      [](int B, int Hq, int Hkv, int d, int64_t max_len, int sm_count) {
        return gpu::detail::decode_attention_scratch_bytes(B, Hq, Hkv, d, max_len, sm_count);
      },
      nb::arg("batch"), nb::arg("num_q_heads"), nb::arg("num_kv_heads"), nb::arg("head_dim"),
      nb::arg("max_len"), nb::arg("sm_count"));
  m.def(
      "cuda_decode_attention",
      [](const nb::handle& q, const Array& k, const Array& v, const nb::handle& seg_off,
         const nb::handle& seg_len, int B, int Hq, int Hkv, int64_t max_len, float scale,
         const nb::handle& out, const nb::handle& lse, const nb::handle& scratch, int sm_count,
         uintptr_t stream) {
        KVEVICT_CHECK(B > 0 && Hkv > 0 && Hq > 0 && Hq % Hkv == 0, "decode attention: batch ", B,
                      ", ", Hq, " query heads, ", Hkv,
                      " KV heads; expected positive counts with "
                      "the query heads a multiple of the KV heads");
        const TensorView kt = to_view(k, "cache k"), vt = to_view(v, "cache v");
        check_device(kt, "cache k");
        check_device(vt, "cache v");
        KVEVICT_CHECK(kt.ndim == 2 && kt.dtype == DType::kBF16 && kt.is_contiguous() &&
                          vt.ndim == 2 && vt.dtype == kt.dtype && vt.is_contiguous() &&
                          vt.shape[0] == kt.shape[0] && vt.shape[1] == kt.shape[1],
                      "decode attention: cache k is ", dtype_name(kt.dtype), " ", kt.shape_str(),
                      ", v ", dtype_name(vt.dtype), " ", vt.shape_str(),
                      "; expected contiguous bfloat16 [rows, d], both the same");
        const int d = static_cast<int>(kt.shape[1]);
        KVEVICT_CHECK(d == 64 || d == 128 || d == 256, "decode attention: head dim ", d,
                      "; expected 64, 128 or 256");
        const int64_t nq = static_cast<int64_t>(B) * Hq;
        const TensorView qt = device_flat(q, DType::kBF16, nq * d, "q");
        const TensorView ot = device_flat(seg_off, DType::kI64, int64_t(B) * Hkv + 1, "seg_off");
        const TensorView lt = device_flat(seg_len, DType::kI32, int64_t(B) * Hkv, "seg_len");
        const TensorView out_t = device_flat(out, DType::kBF16, nq * d, "out");
        const TensorView lse_t =
            lse.is_none() ? TensorView() : device_flat(lse, DType::kF32, nq, "lse");
        KVEVICT_CHECK(max_len > 0, "decode attention: max_len is ", max_len,
                      "; expected the longest segment (> 0)");
        const size_t need =
            gpu::detail::decode_attention_scratch_bytes(B, Hq, Hkv, d, max_len, sm_count);
        const Workspace ws = workspace_of(scratch, need, "decode attention scratch");
        gpu::detail::DecodeAttentionArgs a;
        a.q = static_cast<const gpu::detail::bf16*>(qt.data);
        a.k = static_cast<const gpu::detail::bf16*>(kt.data);
        a.v = static_cast<const gpu::detail::bf16*>(vt.data);
        a.seg_off = static_cast<const int64_t*>(ot.data);
        a.seg_len = static_cast<const int32_t*>(lt.data);
        a.B = B;
        a.Hq = Hq;
        a.Hkv = Hkv;
        a.d = d;
        a.max_len = max_len;
        a.scale = scale > 0.f ? scale : 1.0f / std::sqrt(static_cast<float>(d));
        cudaError_t err;
        {
          nb::gil_scoped_release release;
          err = gpu::detail::launch_decode_attention(
              a, static_cast<gpu::detail::bf16*>(out_t.data), static_cast<float*>(lse_t.data),
              nullptr, ws.data, ws.bytes, sm_count, reinterpret_cast<cudaStream_t>(stream));
        }
        KVEVICT_CHECK(err == cudaSuccess,
                      "decode attention launch failed: ", cudaGetErrorString(err));
      },
      nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::arg("seg_off"), nb::arg("seg_len"),
      nb::arg("batch"), nb::arg("num_q_heads"), nb::arg("num_kv_heads"), nb::arg("max_len"),
      nb::arg("scale"), nb::arg("out"), nb::arg("lse").none(), nb::arg("scratch"),
      nb::arg("sm_count"), nb::arg("stream"));
  m.def("cuda_device_available", &cuda::device_available);
  m.def("cuda_score_supported",
        [](const std::string& method) { return cuda::score_supported(method_from_name(method)); });

  m.def(
      "cuda_score_workspace_bytes",
      [](const nb::handle& q, const Array& k, const Array& v, const nb::handle& wo, float scale,
         const ScoreOptions& opt) {
        const ScoreProblem p = device_problem(q, k, v, wo, scale);
        p.validate(opt, /*check_values=*/false);
        return cuda::score_workspace_bytes(p, opt);
      },
      nb::arg("q").none(), nb::arg("k"), nb::arg("v"), nb::arg("wo").none(), nb::arg("scale"),
      nb::arg("options"));
  m.def(
      "cuda_score",
      [](const nb::handle& q, const Array& k, const Array& v, const nb::handle& wo, float scale,
         const ScoreOptions& opt, MutArray scores, const nb::handle& aux,
         const nb::handle& workspace, uintptr_t stream) {
        const ScoreProblem p = device_problem(q, k, v, wo, scale);
        p.validate(opt, /*check_values=*/false);
        const ScoreOutput out{to_view(scores, "scores"), to_view_opt(aux, "aux")};
        const Workspace ws =
            workspace_of(workspace, cuda::score_workspace_bytes(p, opt), "score workspace");
        nb::gil_scoped_release release;
        cuda::score(p, opt, out, ws, stream_of(stream));
      },
      nb::arg("q").none(), nb::arg("k"), nb::arg("v"), nb::arg("wo").none(), nb::arg("scale"),
      nb::arg("options"), nb::arg("scores"), nb::arg("aux").none(), nb::arg("workspace").none(),
      nb::arg("stream"));

  m.def("cuda_protected_count", &cuda::protected_count, nb::arg("n"), nb::arg("sink"),
        nb::arg("window"));
  m.def("cuda_select_workspace_bytes", &cuda::select_workspace_bytes, nb::arg("num_kv_heads"),
        nb::arg("n"), nb::arg("n_keep"), nb::arg("two_stage"));
  m.def(
      "cuda_select",
      [](const Array& scores, const nb::handle& aux, int64_t n_keep, const SelectOptions& opt,
         MutArray kept, MutArray offsets, const nb::handle& workspace, uintptr_t stream) {
        const TensorView s = to_view(scores, "scores"), a = to_view_opt(aux, "aux");
        check_device(s, "scores");
        check_device(a, "aux");
        KVEVICT_CHECK(s.ndim == 2, "scores has shape ", s.shape_str(), "; expected [Hkv, n]");
        const TensorView kt = to_view(kept, "kept"), ot = to_view(offsets, "offsets");
        check_device(kt, "kept");
        check_device(ot, "offsets");
        const size_t need = cuda::select_workspace_bytes(static_cast<int>(s.shape[0]), s.shape[1],
                                                         n_keep, !a.empty());
        const Workspace ws = workspace_of(workspace, need, "select workspace");
        nb::gil_scoped_release release;
        cuda::select(s, a, n_keep, opt.sink, opt.window, opt.policy, opt.alpha, kt, ot, ws,
                     stream_of(stream));
      },
      nb::arg("scores"), nb::arg("aux").none(), nb::arg("n_keep"), nb::arg("options"),
      nb::arg("kept"), nb::arg("offsets"), nb::arg("workspace").none(), nb::arg("stream"));

  m.def(
      "cuda_compact_varlen",
      [](const Array& k, const Array& v, const nb::handle& pos, const Array& kept,
         const Array& offsets, MutArray out_k, MutArray out_v, MutArray out_pos, uintptr_t stream) {
        const TensorView kv = to_view(k, "k"), vv = to_view(v, "v"), pv = to_view_opt(pos, "pos");
        const TensorView keep = to_view(kept, "kept"), off = to_view(offsets, "offsets");
        const TensorView ok = to_view(out_k, "out_k"), ov = to_view(out_v, "out_v");
        const TensorView op = to_view(out_pos, "out_pos");
        for (const TensorView* t : {&kv, &vv, &pv, &keep, &off, &ok, &ov, &op})
          check_device(*t, "compaction tensor");
        nb::gil_scoped_release release;
        cuda::compact_varlen(kv, vv, pv, keep, off, ok, ov, op, stream_of(stream));
      },
      nb::arg("k"), nb::arg("v"), nb::arg("pos").none(), nb::arg("kept"), nb::arg("offsets"),
      nb::arg("out_k"), nb::arg("out_v"), nb::arg("out_pos"), nb::arg("stream"));

  m.def(
      "cuda_attention_workspace_bytes",
      [](const Array& q, const Array& q_pos, const Array& k, const Array& v, const Array& pos,
         const Array& offsets, MutArray lens) {
        return cuda::attention_workspace_bytes(
            attention_problem_of(q, q_pos, k, v, pos, offsets, lens, 0.f, 0, 0.f, Device::kCuda));
      },
      nb::arg("q"), nb::arg("q_pos"), nb::arg("k"), nb::arg("v"), nb::arg("pos"),
      nb::arg("offsets"), nb::arg("lens"));
  m.def(
      "cuda_attention",
      [](const Array& q, const Array& q_pos, const Array& k, const Array& v, const Array& pos,
         const Array& offsets, MutArray lens, float scale, int sliding_window, float softcap,
         MutArray out, const nb::handle& lse, const nb::handle& workspace, uintptr_t stream) {
        const AttentionProblem p = attention_problem_of(q, q_pos, k, v, pos, offsets, lens, scale,
                                                        sliding_window, softcap, Device::kCuda);
        const AttentionOutput o{to_view(out, "out"), to_view_opt(lse, "lse")};
        const Workspace ws =
            workspace_of(workspace, cuda::attention_workspace_bytes(p), "attention workspace");
        nb::gil_scoped_release release;
        cuda::attention(p, o, ws, stream_of(stream));
      },
      nb::arg("q"), nb::arg("q_pos"), nb::arg("k"), nb::arg("v"), nb::arg("pos"),
      nb::arg("offsets"), nb::arg("lens"), nb::arg("scale"), nb::arg("sliding_window"),
      nb::arg("softcap"), nb::arg("out"), nb::arg("lse").none(), nb::arg("workspace").none(),
      nb::arg("stream"));
}

#else  // no CUDA in this build

void bind_cuda_ops(nb::module_& m) {
  m.attr("cuda_built") = false;
  m.def("cuda_device_available", [] { return false; });
}

#endif

}  // namespace kvevict::python
