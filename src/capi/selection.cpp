// Selections of the C API: read access to the kept rows and the sizing of a compacted cache.
#include <algorithm>
#include <vector>

#include "capi/capi_internal.h"

using kvevict::capi::guarded;
using kvevict::capi::require;

extern "C" {

void kvevict_selection_destroy(kvevict_selection* selection) {
  delete selection;
}

int32_t kvevict_selection_num_kv_heads(const kvevict_selection* selection) {
  return selection ? selection->impl.num_kv_heads : -1;
}

int64_t kvevict_selection_total(const kvevict_selection* selection) {
  return selection ? selection->impl.total() : -1;
}

kvevict_status kvevict_selection_host_arrays(const kvevict_selection* selection,
                                             const int64_t** offsets, const int32_t** index) {
  return guarded(__func__, [&] {
    const kvevict::Selection& s = require(selection, "selection")->impl;
    require(offsets, "offsets");
    require(index, "index");
    KVEVICT_CHECK(s.has_host_index(), "the selection stayed on the device; expected a host ",
                  "selection (plan with KVEVICT_RESIDENCY_HOST, or use ",
                  "kvevict_selection_device_arrays)");
    *offsets = s.offsets.data();
    *index = s.index.data();
  });
}

kvevict_status kvevict_selection_device_arrays(const kvevict_selection* selection,
                                               const int64_t** offsets, const int32_t** index) {
  return guarded(__func__, [&] {
    const kvevict::Selection& s = require(selection, "selection")->impl;
    require(offsets, "offsets");
    require(index, "index");
    KVEVICT_CHECK(s.on_device(), "the selection is in host memory; expected one planned with ",
                  "KVEVICT_RESIDENCY_DEVICE on a device backend (use ",
                  "kvevict_selection_host_arrays)");
    *offsets = s.device.offsets;
    *index = s.device.index;
  });
}

const char* kvevict_selection_warning(const kvevict_selection* selection) {
  return selection ? selection->impl.warning.c_str() : "";
}

kvevict_status kvevict_selection_plan_offsets(const kvevict_selection* selection, int64_t slack,
                                              int64_t* offsets, size_t capacity) {
  return guarded(__func__, [&] {
    const kvevict::Selection& s = require(selection, "selection")->impl;
    require(offsets, "offsets");
    KVEVICT_CHECK(slack >= 0, "slack ", slack, " is negative; expected >= 0");
    KVEVICT_CHECK(s.has_host_offsets(), "the selection's counts stayed on the device; expected ",
                  "a host selection (or size the cache with kvevict_backend_plan_segments)");
    const size_t need = static_cast<size_t>(s.num_kv_heads) + 1;
    KVEVICT_CHECK(capacity >= need, "offsets holds ", capacity, " elements; expected at least ",
                  need, " (num_kv_heads + 1)");
    const std::vector<int64_t> o = kvevict::cache_plan_offsets(s, slack);
    std::copy(o.begin(), o.end(), offsets);
  });
}

}  // extern "C"
