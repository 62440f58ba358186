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
// The row gather behind every compaction and the NaN scan (src/cuda/launchers.h, layer 2):
// compaction with decode slack and the NaN check that reads nothing back.
#include "cuda/launchers.h"
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

ScoreProblem device_problem(const nb::handle& q, const nb::handle& k, const nb::handle& v,
                            const nb::handle& wo, float scale) {
  const Device cuda = Device::kCuda;
  return score_problem_of(q, k, v, wo, scale, &cuda);
}

// A caller's workspace (a device byte tensor or None) and its size in bytes.
Workspace workspace_view(const nb::handle& ws, const char* what) {
  const TensorView t = to_view_opt(ws, what, true);
  if (t.empty()) return Workspace{nullptr, 0};
  check_device(t, what);
  return Workspace{t.data, static_cast<size_t>(t.numel() * dtype_size(t.dtype))};
}

Workspace workspace_of(const nb::handle& ws, size_t need, const char* what) {
  const Workspace w = workspace_view(ws, what);
  KVEVICT_CHECK(w.bytes >= need, what, " holds ", w.bytes, " bytes; expected at least ", need);
  return w;
}

// A contiguous device tensor of `dtype` with `numel` elements (numel < 0: any).
TensorView device_flat(const nb::handle& a, DType dtype, int64_t numel, const char* what,
                       bool writable = false) {
  const TensorView t = to_view_opt(a, what, writable);
  KVEVICT_CHECK(!t.empty(), what, " is missing; expected a CUDA tensor");
  check_device(t, what);
  KVEVICT_CHECK(t.dtype == dtype && t.is_contiguous() && (numel < 0 || t.numel() == numel), what,
                " is ", dtype_name(t.dtype), " ", t.shape_str(), "; expected a contiguous ",
                dtype_name(dtype), " tensor of ", numel, " elements");
  return t;
}

// Compaction into the packed layout with `slack` spare rows after every head (SPEC section 4):
// head h's kept rows kept[offsets[h] .. offsets[h + 1]) of k[h], v[h] ([Hkv, n, d], any head and
// row strides, unit inner stride) land in rows offsets[h] + h * slack .. of out_k / out_v
// ([rows + Hkv * slack, d]) with their positions (pos [Hkv, n] i32, or None for 0..n-1) in
// out_pos. One launch of the library's row gather (launchers.h GatherArgs); the public
// cuda::compact_varlen is the slack = 0 case and has no slack argument.
void compact_packed(const nb::handle& k, const nb::handle& v, const nb::handle& pos,
                    const nb::handle& kept, const nb::handle& offsets, int64_t slack,
                    const nb::handle& out_k, const nb::handle& out_v, const nb::handle& out_pos,
                    uintptr_t stream) {
  const TensorView kv = to_view(k, "k", false), vv = to_view(v, "v", false);
  check_device(kv, "k");
  check_device(vv, "v");
  KVEVICT_CHECK(
      kv.ndim == 3 &&
          (kv.dtype == DType::kBF16 || kv.dtype == DType::kF16 || kv.dtype == DType::kF32) &&
          kv.stride[2] == 1,
      "k is ", dtype_name(kv.dtype), " ", kv.shape_str(),
      "; expected [Hkv, n, d] bf16, f16 or f32 with a unit inner stride");
  KVEVICT_CHECK(
      vv.dtype == kv.dtype && vv.ndim == 3 && vv.shape == kv.shape && vv.stride == kv.stride,
      "v is ", dtype_name(vv.dtype), " ", vv.shape_str(), "; expected the layout of k ",
      dtype_name(kv.dtype), " ", kv.shape_str(), " (same strides)");
  KVEVICT_CHECK(slack >= 0, "slack is ", slack, "; expected >= 0");
  const int64_t hkv = kv.shape[0], n = kv.shape[1], d = kv.shape[2];
  const int eb = static_cast<int>(dtype_size(kv.dtype));
  KVEVICT_CHECK(hkv >= 1 && hkv <= (int64_t{1} << 30) && (d * eb) % 16 == 0, "k has ", hkv,
                " heads of ", d, " ", dtype_name(kv.dtype),
                "; expected >= 1 head and rows of a multiple of 16 bytes");
  const TensorView pv = to_view_opt(pos, "pos");
  if (!pv.empty()) {
    check_device(pv, "pos");
    KVEVICT_CHECK(pv.dtype == DType::kI32 && pv.ndim == 2 && pv.shape[0] == hkv &&
                      pv.shape[1] == n && pv.stride[1] == 1,
                  "pos is ", dtype_name(pv.dtype), " ", pv.shape_str(), "; expected int32 [", hkv,
                  ", ", n, "] with a unit inner stride");
  }
  const TensorView keep = device_flat(kept, DType::kI32, -1, "kept");
  KVEVICT_CHECK(keep.ndim == 1, "kept has shape ", keep.shape_str(), "; expected [rows]");
  const int64_t rows = keep.numel();
  const TensorView off = device_flat(offsets, DType::kI64, hkv + 1, "offsets");
  const int64_t out_rows = rows + hkv * slack;
  const TensorView ok = to_view(out_k, "out_k", true), ov = to_view(out_v, "out_v", true);
  for (const TensorView* t : {&ok, &ov}) {
    check_device(*t, t == &ok ? "out_k" : "out_v");
    KVEVICT_CHECK(t->dtype == kv.dtype && t->ndim == 2 && t->shape[0] == out_rows &&
                      t->shape[1] == d && t->is_contiguous(),
                  t == &ok ? "out_k" : "out_v", " is ", dtype_name(t->dtype), " ", t->shape_str(),
                  "; expected contiguous ", dtype_name(kv.dtype), " [", out_rows, ", ", d,
                  "] (kept rows + Hkv * slack)");
  }
  const TensorView op = device_flat(out_pos, DType::kI32, out_rows, "out_pos", true);
  cuda::detail::GatherArgs a;
  a.k = static_cast<const char*>(kv.data);
  a.v = static_cast<const char*>(vv.data);
  a.head_stride_b = kv.stride[0] * eb;
  a.row_stride_b = kv.stride[1] * eb;
  a.row_bytes = static_cast<int>(d * eb);
  a.src_limit = n;
  a.pos = pv.empty() ? nullptr : pv.ptr<int32_t>();
  a.pos_head_stride = pv.empty() ? 0 : pv.stride[0];
  a.kept = keep.ptr<int32_t>();
  a.kept_offsets = off.ptr<int64_t>();
  a.dst_slack = slack;
  a.dst_rows = out_rows;
  a.out_k = static_cast<char*>(ok.data);
  a.out_v = static_cast<char*>(ov.data);
  a.out_pos = op.ptr<int32_t>();
  a.num_heads = static_cast<int>(hkv);
  a.rows = rows;
  cudaError_t err;
  {
    nb::gil_scoped_release release;
    err = cuda::detail::launch_gather_rows(a, reinterpret_cast<cudaStream_t>(stream));
  }
  KVEVICT_CHECK(err == cudaSuccess, "compaction launch failed: ", cudaGetErrorString(err));
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
      [](const nb::handle& q, const nb::handle& k, const nb::handle& v, const nb::handle& seg_off,
         const nb::handle& seg_len, int B, int Hq, int Hkv, int64_t max_len, float scale,
         const nb::handle& out, const nb::handle& lse, const nb::handle& scratch, int sm_count,
         uintptr_t stream) {
        KVEVICT_CHECK(B > 0 && Hkv > 0 && Hq > 0 && Hq % Hkv == 0, "decode attention: batch ", B,
                      ", ", Hq, " query heads, ", Hkv,
                      " KV heads; expected positive counts with "
                      "the query heads a multiple of the KV heads");
        const TensorView kt = to_view(k, "cache k", false), vt = to_view(v, "cache v", false);
        check_device(kt, "cache k");
        check_device(vt, "cache v");
        KVEVICT_CHECK(kt.ndim == 2 && kt.dtype == DType::kBF16 && kt.is_contiguous() &&
                          vt.ndim == 2 && vt.dtype == kt.dtype && vt.is_contiguous() &&
                          vt.shape[0] == kt.shape[0] && vt.shape[1] == kt.shape[1],
                      "decode attention: cache k is ", dtype_name(kt.dtype), " ", kt.shape_str(),
                      ", v ", dtype_name(vt.dtype), " ", vt.shape_str(),
                      "; expected contiguous bfloat16 [rows, d], both the same");
        check_indexable(kt, "decode attention: cache k");
        const int d = static_cast<int>(kt.shape[1]);
        KVEVICT_CHECK(d == 64 || d == 128 || d == 256, "decode attention: head dim ", d,
                      "; expected 64, 128 or 256");
        const int64_t nq = static_cast<int64_t>(B) * Hq;
        const TensorView qt = device_flat(q, DType::kBF16, nq * d, "q");
        const TensorView ot = device_flat(seg_off, DType::kI64, int64_t(B) * Hkv + 1, "seg_off");
        const TensorView lt = device_flat(seg_len, DType::kI32, int64_t(B) * Hkv, "seg_len");
        const TensorView out_t = device_flat(out, DType::kBF16, nq * d, "out", true);
        const TensorView lse_t =
            lse.is_none() ? TensorView() : device_flat(lse, DType::kF32, nq, "lse", true);
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

  // One call per score: the workspace size follows from the shapes, so a workspace that is too
  // small (or None) launches nothing and returns the bytes needed; the caller grows its cached
  // workspace and calls again. Returns 0 once the kernels are queued on `stream`.
  m.def(
      "cuda_score",
      [](const nb::handle& q, const nb::handle& k, const nb::handle& v, const nb::handle& wo,
         float scale, const ScoreOptions& opt, const nb::handle& scores, const nb::handle& aux,
         const nb::handle& workspace, uintptr_t stream) -> size_t {
        const ScoreProblem p = device_problem(q, k, v, wo, scale);
        p.validate(opt, /*check_values=*/false);
        const size_t need = cuda::score_workspace_bytes(p, opt);
        const Workspace ws = workspace_view(workspace, "score workspace");
        if (ws.bytes < need) return need;
        const ScoreOutput out{to_view(scores, "scores", true), to_view_opt(aux, "aux", true)};
        check_device(out.scores, "scores");
        check_device(out.aux, "aux");
        nb::gil_scoped_release release;
        cuda::score(p, opt, out, ws, stream_of(stream));
        return 0;
      },
      nb::arg("q").none(), nb::arg("k"), nb::arg("v"), nb::arg("wo").none(), nb::arg("scale"),
      nb::arg("options"), nb::arg("scores"), nb::arg("aux").none(), nb::arg("workspace").none(),
      nb::arg("stream"));

  m.def("cuda_protected_count", &cuda::protected_count, nb::arg("n"), nb::arg("sink"),
        nb::arg("window"));
  // Like cuda_score: returns the workspace bytes needed (nothing launched) when `workspace` is
  // smaller, else 0 after queueing the selection.
  m.def(
      "cuda_select",
      [](const nb::handle& scores, const nb::handle& aux, int64_t n_keep, const SelectOptions& opt,
         const nb::handle& kept, const nb::handle& offsets, const nb::handle& workspace,
         uintptr_t stream) -> size_t {
        const TensorView s = to_view(scores, "scores", false), a = to_view_opt(aux, "aux");
        check_device(s, "scores");
        check_device(a, "aux");
        KVEVICT_CHECK(s.ndim == 2, "scores has shape ", s.shape_str(), "; expected [Hkv, n]");
        check_indexable(s, "scores");
        const size_t need = cuda::select_workspace_bytes(static_cast<int>(s.shape[0]), s.shape[1],
                                                         n_keep, !a.empty());
        const Workspace ws = workspace_view(workspace, "select workspace");
        if (ws.bytes < need) return need;
        const TensorView kt = to_view(kept, "kept", true), ot = to_view(offsets, "offsets", true);
        check_device(kt, "kept");
        check_device(ot, "offsets");
        nb::gil_scoped_release release;
        cuda::select(s, a, n_keep, opt.sink, opt.window, opt.policy, opt.alpha, kt, ot, ws,
                     stream_of(stream));
        return 0;
      },
      nb::arg("scores"), nb::arg("aux").none(), nb::arg("n_keep"), nb::arg("options"),
      nb::arg("kept"), nb::arg("offsets"), nb::arg("workspace").none(), nb::arg("stream"));

  m.def("cuda_compact", &compact_packed, nb::arg("k"), nb::arg("v"), nb::arg("pos").none(),
        nb::arg("kept"), nb::arg("offsets"), nb::arg("slack"), nb::arg("out_k"), nb::arg("out_v"),
        nb::arg("out_pos"), nb::arg("stream"));

  // status[slot] = min(status[slot], first NaN element of x) (as unsigned; the caller sets -1
  // first): a NaN check that queues one kernel and reads nothing back, for callers that raise at
  // their next synchronization (kvevict.hf reads the word once per forward pass).
  m.def(
      "cuda_find_nan",
      [](const nb::handle& x, const nb::handle& status, int64_t slot, uintptr_t stream) {
        const TensorView xt = device_flat(x, DType::kF32, -1, "x");
        const TensorView st = device_flat(status, DType::kI64, -1, "status", true);
        KVEVICT_CHECK(slot >= 0 && slot < st.numel(), "slot ", slot, " is outside the ", st.numel(),
                      " status words");
        cudaError_t err;
        {
          nb::gil_scoped_release release;
          err = cuda::detail::launch_find_nan(
              xt.ptr<float>(), xt.numel(),
              reinterpret_cast<unsigned long long*>(st.ptr<int64_t>() + slot),
              reinterpret_cast<cudaStream_t>(stream));
        }
        KVEVICT_CHECK(err == cudaSuccess, "NaN check launch failed: ", cudaGetErrorString(err));
      },
      nb::arg("x"), nb::arg("status"), nb::arg("slot"), nb::arg("stream"));

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
