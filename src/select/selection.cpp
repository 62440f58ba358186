// The Selection and SelectProblem containers: construction and validation.
#include <cmath>

#include "kvevict/error.h"
#include "kvevict/select.h"

namespace kvevict {

Selection Selection::keep_all(int num_kv_heads, const int64_t* lens) {
  Selection s;
  s.num_kv_heads = num_kv_heads;
  s.offsets.assign(num_kv_heads + 1, 0);
  for (int h = 0; h < num_kv_heads; ++h) s.offsets[h + 1] = s.offsets[h] + lens[h];
  s.index.resize(s.offsets.back());
  for (int h = 0; h < num_kv_heads; ++h)
    for (int64_t i = 0; i < lens[h]; ++i) s.index[s.offsets[h] + i] = static_cast<int32_t>(i);
  return s;
}

void Selection::validate(const int64_t* lens) const {
  KVEVICT_CHECK(num_kv_heads >= 0 && static_cast<int>(offsets.size()) == num_kv_heads + 1,
                "selection has ", offsets.size(), " offsets for ", num_kv_heads,
                " heads; expected heads + 1");
  KVEVICT_CHECK(offsets[0] == 0 && offsets.back() == static_cast<int64_t>(index.size()),
                "selection offsets span [", offsets[0], ", ", offsets.back(), "] but index holds ",
                index.size(), " rows; expected [0, ", index.size(), "]");
  for (int h = 0; h < num_kv_heads; ++h) {
    KVEVICT_CHECK(count(h) >= 0 && count(h) <= lens[h], "selection keeps ", count(h),
                  " rows of head ", h, " which has ", lens[h], "; expected 0..", lens[h]);
    int64_t prev = -1;
    for (int64_t i = offsets[h]; i < offsets[h + 1]; ++i) {
      KVEVICT_CHECK(index[i] > prev && index[i] < lens[h], "selection row ", index[i], " of head ",
                    h, " is out of order or range; expected ascending rows in [0, ", lens[h], ")");
      prev = index[i];
    }
  }
}

SelectProblem SelectProblem::dense(const TensorView& scores, const TensorView& aux,
                                   std::vector<int64_t>& starts_storage,
                                   std::vector<int64_t>& lens_storage) {
  check_shape(scores, "scores", {-1, -1});
  check_indexable(scores, "scores");
  KVEVICT_CHECK(
      scores.dtype == DType::kF32 && scores.is_contiguous() && scores.device == Device::kCpu,
      "scores ", scores.shape_str(), " must be contiguous host f32; got ",
      dtype_name(scores.dtype));
  const int hkv = static_cast<int>(scores.shape[0]);
  const int64_t n = scores.shape[1];
  if (!aux.empty()) {
    check_shape(aux, "aux scores", {hkv, n});
    KVEVICT_CHECK(aux.dtype == DType::kF32 && aux.is_contiguous() && aux.device == Device::kCpu,
                  "aux scores must be contiguous host f32; got ", dtype_name(aux.dtype));
  }
  starts_storage.resize(hkv);
  lens_storage.assign(hkv, n);
  for (int h = 0; h < hkv; ++h) starts_storage[h] = h * n;
  SelectProblem p;
  p.num_kv_heads = hkv;
  p.scores = scores.ptr<float>();
  p.aux = aux.empty() ? nullptr : aux.ptr<float>();
  p.starts = starts_storage.data();
  p.lens = lens_storage.data();
  return p;
}

void SelectProblem::validate() const {
  KVEVICT_CHECK(num_kv_heads > 0, "selection over ", num_kv_heads, " KV heads; expected > 0");
  KVEVICT_CHECK(starts != nullptr && lens != nullptr, "selection problem lacks starts or lens");
  for (int h = 0; h < num_kv_heads; ++h) {
    KVEVICT_CHECK(lens[h] >= 0 && lens[h] <= INT32_MAX, "head ", h, " has ", lens[h],
                  " scores; expected 0..", INT32_MAX);
    KVEVICT_CHECK(lens[h] == 0 || scores != nullptr, "selection problem lacks scores");
    for (int64_t i = 0; i < lens[h]; ++i) {
      KVEVICT_CHECK(!std::isnan(scores[starts[h] + i]), "score of head ", h, " row ", i,
                    " is NaN; expected a number");
      if (aux)
        KVEVICT_CHECK(!std::isnan(aux[starts[h] + i]), "aux score of head ", h, " row ", i,
                      " is NaN; expected a number");
    }
  }
}

}  // namespace kvevict
