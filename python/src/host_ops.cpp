// Host-memory ops (numpy arrays, torch CPU tensors): the multithreaded float path (kvevict::cpu)
// and the double-precision reference (kvevict::ref), through the public headers score.h,
// select.h, cache.h and attention.h. Outputs and workspaces come from Python; the GIL is released
// around every computation so torch / numpy threads keep running.
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <string>
#include <vector>

#include "bindings.h"
#include "kvevict/attention.h"
#include "kvevict/backend.h"
#include "kvevict/error.h"
#include "kvevict/score.h"

namespace kvevict::python {
namespace {

enum class HostPath { kCpu, kReference };

HostPath host_path(const std::string& backend) {
  if (backend == "cpu") return HostPath::kCpu;
  if (backend == "reference") return HostPath::kReference;
  KVEVICT_FAIL("backend '", backend, "' is not a host backend; expected cpu or reference");
}

void check_host(const TensorView& t, const char* what) {
  check_on(t, Device::kCpu, what);
}

ScoreProblem host_problem(const nb::handle& q, const nb::handle& k, const nb::handle& v,
                          const nb::handle& wo, float scale) {
  const Device cpu = Device::kCpu;
  return score_problem_of(q, k, v, wo, scale, &cpu);
}

}  // namespace

void bind_selection(nb::module_& m) {
  nb::class_<Selection>(m, "Selection",
                        "Host selection: head h keeps rows index[offsets[h]:offsets[h+1]] of its "
                        "own segment, ascending.")
      .def_ro("num_kv_heads", &Selection::num_kv_heads)
      .def_ro("warning", &Selection::warning)
      .def_prop_ro("total", &Selection::total)
      .def_prop_ro("offsets", [](const Selection& s) { return s.offsets; })
      .def(
          "copy_into",
          [](const Selection& s, MutArray index, MutArray offsets) {
            int32_t* idx = i32_data_mut(index, "selection index", s.total());
            int64_t* off = i64_data_mut(offsets, "selection offsets", s.num_kv_heads + 1);
            std::copy(s.index.begin(), s.index.end(), idx);
            std::copy(s.offsets.begin(), s.offsets.end(), off);
          },
          nb::arg("index"), nb::arg("offsets"),
          "Copies the kept indices (int32 [total]) and offsets (int64 [Hkv + 1]) into host arrays.")
      .def_static(
          "from_arrays",
          [](const Array& index, const Array& offsets) {
            const TensorView ot = to_view(offsets, "selection offsets");
            KVEVICT_CHECK(ot.ndim == 1 && ot.shape[0] >= 2, "selection offsets has shape ",
                          ot.shape_str(), "; expected [Hkv + 1]");
            check_indexable(ot, "selection offsets");
            Selection s;
            s.num_kv_heads = static_cast<int>(ot.shape[0] - 1);
            const int64_t* off = i64_data(offsets, "selection offsets", ot.shape[0]);
            s.offsets.assign(off, off + ot.shape[0]);
            const TensorView it = to_view(index, "selection index");
            KVEVICT_CHECK(it.ndim == 1 && it.dtype == DType::kI32 && it.is_contiguous() &&
                              it.device == Device::kCpu && it.shape[0] == s.offsets.back(),
                          "selection index is ", dtype_name(it.dtype), " ", it.shape_str(),
                          "; expected host int32 [", s.offsets.back(), "]");
            const int32_t* idx = it.ptr<int32_t>();
            s.index.assign(idx, idx + it.shape[0]);
            return s;
          },
          nb::arg("index"), nb::arg("offsets"));
}

void bind_host_ops(nb::module_& m) {
  m.def(
      "score_workspace_bytes",
      [](const nb::handle& q, const nb::handle& k, const nb::handle& v, const nb::handle& wo,
         float scale, const ScoreOptions& opt) {
        const ScoreProblem p = host_problem(q, k, v, wo, scale);
        return cpu::score_workspace_bytes(p, opt);
      },
      nb::arg("q").none(), nb::arg("k"), nb::arg("v"), nb::arg("wo").none(), nb::arg("scale"),
      nb::arg("options"));

  m.def(
      "score",
      [](const std::string& backend, const nb::handle& q, const nb::handle& k, const nb::handle& v,
         const nb::handle& wo, float scale, const ScoreOptions& opt, const nb::handle& scores,
         const nb::handle& aux, const nb::handle& workspace) {
        const HostPath path = host_path(backend);
        const ScoreProblem p = host_problem(q, k, v, wo, scale);
        ScoreOutput out{to_view(scores, "scores", true), to_view_opt(aux, "aux", true)};
        const TensorView ws = to_view_opt(workspace, "workspace", true);
        nb::gil_scoped_release release;
        if (path == HostPath::kCpu) {
          const size_t need = cpu::score_workspace_bytes(p, opt);
          KVEVICT_CHECK(
              ws.numel() * static_cast<int64_t>(dtype_size(ws.dtype)) >= static_cast<int64_t>(need),
              "score workspace holds ", ws.numel(), " elements; expected ", need, " bytes");
          cpu::score(p, opt, out, Workspace{ws.data, need});
          return;
        }
        // The reference backend's own score: the double ground truth rounded into the outputs,
        // shapes and the float32 overflow checked there.
        make_reference_backend()->score(p, opt, out, Workspace{});
      },
      nb::arg("backend"), nb::arg("q").none(), nb::arg("k"), nb::arg("v"), nb::arg("wo").none(),
      nb::arg("scale"), nb::arg("options"), nb::arg("scores"), nb::arg("aux").none(),
      nb::arg("workspace").none());

  m.def(
      "select",
      [](const std::string& backend, const Array& scores, const nb::handle& aux,
         const SelectOptions& opt) {
        const HostPath path = host_path(backend);
        const TensorView s = to_view(scores, "scores"), a = to_view_opt(aux, "aux");
        check_host(s, "scores");
        check_host(a, "aux");
        nb::gil_scoped_release release;
        std::vector<int64_t> starts, lens;
        const SelectProblem p = SelectProblem::dense(s, a, starts, lens);
        return path == HostPath::kCpu ? select(p, opt) : ref::select(p, opt);
      },
      nb::arg("backend"), nb::arg("scores"), nb::arg("aux").none(), nb::arg("options"));

  m.def(
      "compact",
      [](const Array& k, const Array& v, const Array& pos, const nb::handle& acc,
         const Array& offsets, MutArray lens, const Selection& sel, MutArray out_k, MutArray out_v,
         MutArray out_pos, const nb::handle& out_acc, const Array& out_offsets, MutArray out_lens) {
        const KVLayerView in = layer_view(k, v, pos, acc, offsets, lens, "compaction input");
        const KVLayerView out =
            layer_view(out_k, out_v, out_pos, out_acc, out_offsets, out_lens, "compaction output");
        KVEVICT_CHECK(in.device == Device::kCpu && out.device == Device::kCpu,
                      "host compaction got a CUDA cache; expected CPU memory");
        nb::gil_scoped_release release;
        cache_compact(in, sel, out);
      },
      nb::arg("k"), nb::arg("v"), nb::arg("pos"), nb::arg("score_acc").none(), nb::arg("offsets"),
      nb::arg("lens"), nb::arg("selection"), nb::arg("out_k"), nb::arg("out_v"), nb::arg("out_pos"),
      nb::arg("out_score_acc").none(), nb::arg("out_offsets"), nb::arg("out_lens"));

  m.def(
      "attention",
      [](const std::string& backend, const Array& q, const Array& q_pos, const Array& k,
         const Array& v, const Array& pos, const Array& offsets, MutArray lens, float scale,
         int sliding_window, float softcap, MutArray out, const nb::handle& lse) {
        const HostPath path = host_path(backend);
        AttentionProblem p = attention_problem_of(q, q_pos, k, v, pos, offsets, lens, scale,
                                                  sliding_window, softcap, Device::kCpu);
        AttentionOutput o{to_view(out, "out"), to_view_opt(lse, "lse")};
        nb::gil_scoped_release release;
        p.validate();
        if (path == HostPath::kCpu)
          cpu::attention(p, o);
        else
          make_reference_backend()->attention(p, o, Workspace{});
      },
      nb::arg("backend"), nb::arg("q"), nb::arg("q_pos"), nb::arg("k"), nb::arg("v"),
      nb::arg("pos"), nb::arg("offsets"), nb::arg("lens"), nb::arg("scale"),
      nb::arg("sliding_window"), nb::arg("softcap"), nb::arg("out"), nb::arg("lse").none());
}

}  // namespace kvevict::python
