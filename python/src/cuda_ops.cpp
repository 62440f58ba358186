// Device-memory ops (torch CUDA tensors) through kvevict/cuda/*.h: every call takes the caller's
// stream (torch.cuda.current_stream().cuda_stream, an integer handle) so kvevict's kernels are
// ordered with torch's work and nothing synchronizes the device here. cuda::attention is the one
// exception: it synchronizes its stream (its host offsets/lens/q_pos are uploaded asynchronously).
// Builds without CUDA bind the same names to a function that raises naming the build option.
#include <nanobind/stl/string.h>

#include <cstdint>
#include <string>

#include "bindings.h"
#include "kvevict/error.h"

#if defined(KVEVICT_WITH_CUDA)
#include "kvevict/cuda/attention.h"
#include "kvevict/cuda/compact.h"
#include "kvevict/cuda/score.h"
#include "kvevict/cuda/select.h"
#endif

namespace kvevict::python {

#if defined(KVEVICT_WITH_CUDA)
namespace {

cuda::Stream stream_of(uintptr_t handle) { return reinterpret_cast<cuda::Stream>(handle); }

void check_device(const TensorView& t, const char* what) { check_on(t, Device::kCuda, what); }

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

}  // namespace

void bind_cuda_ops(nb::module_& m) {
  m.attr("cuda_built") = true;
  m.def("cuda_device_available", &cuda::device_available);
  m.def("cuda_score_supported", [](const std::string& method) {
    return cuda::score_supported(method_from_name(method));
  });

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
         const Array& offsets, MutArray out_k, MutArray out_v, MutArray out_pos,
         uintptr_t stream) {
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
