// LayerEvictor (score -> select -> compact over a Backend, kvevict/evict.h) and DecodeEvictor
// (kvevict/decode_evict.h). This is the only file of the binding that touches Backend: when the
// Backend interface changes (a stream per backend, selections that stay on the device), adapt
// make_backend() and the two LayerEvictor calls below.
//
// Today's cuda Backend runs on the legacy default stream and synchronizes inside select() and
// compact(); the Python wrapper (python/kvevict/evictors.py) synchronizes torch's current stream
// before calling in, so tensors torch produced asynchronously are complete.
#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>

#include <memory>
#include <mutex>
#include <string>

#include "bindings.h"
#include "kvevict/backend.h"
#include "kvevict/decode_evict.h"
#include "kvevict/error.h"
#include "kvevict/evict.h"

#if defined(KVEVICT_WITH_CUDA)
#include "kvevict/cuda/backend.h"
#endif

namespace kvevict::python {
namespace {

std::unique_ptr<Backend> make_backend(const std::string& name) {
  if (name == "cpu") return make_cpu_backend();
  if (name == "reference") return make_reference_backend();
#if defined(KVEVICT_WITH_CUDA)
  if (name == "cuda") return make_cuda_backend();
#else
  KVEVICT_CHECK(name != "cuda",
                "this kvevict build has no CUDA backend; reinstall with a CUDA toolkit present "
                "(and without -C cmake.define.KVEVICT_CUDA=OFF)");
#endif
  KVEVICT_FAIL("unknown backend '", name, "'; expected cpu, reference or cuda");
}

// Owns the backend the LayerEvictor refers to (declared first, so it outlives the evictor).
// LayerEvictor reuses its score buffers and workspace across calls, and the calls run without
// the GIL, so Python threads sharing one evictor take turns through mutex_ (taken after the GIL
// is released: a thread waiting for it never blocks the interpreter).
class PyLayerEvictor {
 public:
  PyLayerEvictor(const std::string& backend, const ScoreOptions& score, const SelectOptions& select)
      : backend_(make_backend(backend)), evictor_(*backend_, score, select) {}

  Selection plan(const nb::handle& q, const nb::handle& k, const nb::handle& v,
                 const nb::handle& wo, float scale) {
    // LayerEvictor::plan checks that every tensor is on the backend's device.
    const ScoreProblem p = score_problem_of(q, k, v, wo, scale);
    nb::gil_scoped_release release;
    const std::lock_guard<std::mutex> lock(mutex_);
    return evictor_.plan(p);
  }

  void apply(const KVLayerView& in, const Selection& selection, const KVLayerView& out) {
    nb::gil_scoped_release release;
    const std::lock_guard<std::mutex> lock(mutex_);
    evictor_.apply(in, selection, out);
  }

  std::string backend_name() const { return backend_->name(); }
  std::string describe() const { return evictor_.describe(); }

 private:
  std::unique_ptr<Backend> backend_;
  LayerEvictor evictor_;
  std::mutex mutex_;  // held by plan() and apply(): evictor_'s buffers serve one call at a time
};

DecodeStep decode_step(const Array& q, const Array& a, const Array& lse) {
  DecodeStep s{to_view(q, "q"), to_view(a, "a"), to_view(lse, "lse")};
  for (const TensorView* t : {&s.q, &s.a, &s.lse})
    KVEVICT_CHECK(t->device == Device::kCpu && t->dtype == DType::kF32, "decode step tensors ",
                  "must be host float32 (q [Hq, d], a [Hq, d], lse [Hq]); got ",
                  dtype_name(t->dtype), " ", t->shape_str());
  return s;
}

}  // namespace

void bind_evictors(nb::module_& m) {
  nb::class_<PyLayerEvictor>(m, "LayerEvictor")
      .def(nb::init<const std::string&, const ScoreOptions&, const SelectOptions&>(),
           nb::arg("backend"), nb::arg("score"), nb::arg("select"))
      .def("plan", &PyLayerEvictor::plan, nb::arg("q").none(), nb::arg("k"), nb::arg("v"),
           nb::arg("wo").none(), nb::arg("scale"))
      .def(
          "apply",
          [](PyLayerEvictor& self, const Array& k, const Array& v, const Array& pos,
             const Array& offsets, MutArray lens, const Selection& sel, MutArray out_k,
             MutArray out_v, MutArray out_pos, const Array& out_offsets, MutArray out_lens) {
            const KVLayerView in = layer_view(k, v, pos, nb::none(), offsets, lens, "full cache");
            const KVLayerView out = layer_view(out_k, out_v, out_pos, nb::none(), out_offsets,
                                               out_lens, "compacted cache");
            self.apply(in, sel, out);
          },
          nb::arg("k"), nb::arg("v"), nb::arg("pos"), nb::arg("offsets"), nb::arg("lens"),
          nb::arg("selection"), nb::arg("out_k"), nb::arg("out_v"), nb::arg("out_pos"),
          nb::arg("out_offsets"), nb::arg("out_lens"))
      .def_prop_ro("backend", &PyLayerEvictor::backend_name)
      .def("describe", &PyLayerEvictor::describe);

  nb::class_<DecodeEvictOptions>(m, "DecodeEvictOptions")
      .def(
          "__init__",
          [](DecodeEvictOptions* o, const std::string& score, int64_t budget, int64_t slack,
             int recent, int sink, float scale, float softcap) {
            new (o) DecodeEvictOptions();
            o->score = decode_score_parse(score);
            o->budget = budget;
            o->slack = slack;
            o->recent = recent;
            o->sink = sink;
            o->scale = scale;
            o->softcap = softcap;
            o->validate();
          },
          nb::arg("score"), nb::arg("budget"), nb::arg("slack"), nb::arg("recent"), nb::arg("sink"),
          nb::arg("scale"), nb::arg("softcap"))
      .def_ro("budget", &DecodeEvictOptions::budget)
      .def_ro("slack", &DecodeEvictOptions::slack)
      .def_ro("recent", &DecodeEvictOptions::recent)
      .def_ro("sink", &DecodeEvictOptions::sink)
      .def_prop_ro("capacity_per_head", &DecodeEvictOptions::capacity_per_head)
      .def_prop_ro(
          "score",
          [](const DecodeEvictOptions& o) { return std::string(decode_score_name(o.score)); })
      .def("describe", &DecodeEvictOptions::describe);

  nb::class_<DecodeEvictor>(m, "DecodeEvictor")
      .def(nb::init<DecodeEvictOptions>(), nb::arg("options"))
      .def_prop_ro("options", &DecodeEvictor::options)
      .def(
          "accumulate",
          [](const DecodeEvictor& self, MutArray k, MutArray v, MutArray pos, const nb::object& acc,
             const Array& offsets, MutArray lens, const Array& q, const Array& a,
             const Array& lse) {
            const KVLayerView c = layer_view(k, v, pos, acc, offsets, lens, "decode cache");
            const DecodeStep s = decode_step(q, a, lse);
            nb::gil_scoped_release release;
            self.accumulate(c, s);
          },
          nb::arg("k"), nb::arg("v"), nb::arg("pos"), nb::arg("score_acc"), nb::arg("offsets"),
          nb::arg("lens"), nb::arg("q"), nb::arg("a"), nb::arg("lse"))
      .def(
          "evict",
          [](const DecodeEvictor& self, MutArray k, MutArray v, MutArray pos, const nb::object& acc,
             const Array& offsets, MutArray lens) {
            const KVLayerView c = layer_view(k, v, pos, acc, offsets, lens, "decode cache");
            nb::gil_scoped_release release;
            return self.evict(c);
          },
          nb::arg("k"), nb::arg("v"), nb::arg("pos"), nb::arg("score_acc"), nb::arg("offsets"),
          nb::arg("lens"));
}

}  // namespace kvevict::python
