// Caller-provided scratch memory. Kernels and fast paths never allocate: they ask for
// *_workspace_bytes() and carve what they need from a Workspace.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kvevict/error.h"

namespace kvevict {

struct Workspace {
  void* data = nullptr;
  size_t bytes = 0;
};

// Hands out aligned slices of a Workspace in order; throws when it runs out (a sizing bug).
class WorkspaceCarver {
 public:
  explicit WorkspaceCarver(Workspace ws) : base_(static_cast<char*>(ws.data)), cap_(ws.bytes) {}
  template <class T>
  T* take(size_t count, size_t align = 256) {
    size_t start = (used_ + align - 1) / align * align;
    size_t end = start + count * sizeof(T);
    KVEVICT_CHECK(end <= cap_, "workspace of ", cap_, " bytes is too small; need at least ", end);
    used_ = end;
    return reinterpret_cast<T*>(base_ + start);
  }
  size_t used() const { return used_; }

 private:
  char* base_;
  size_t cap_;
  size_t used_ = 0;
};

// Bytes a sequence of take<T>(count) calls needs, for the *_workspace_bytes() functions.
class WorkspaceSizer {
 public:
  template <class T>
  WorkspaceSizer& add(size_t count, size_t align = 256) {
    bytes_ = (bytes_ + align - 1) / align * align + count * sizeof(T);
    return *this;
  }
  size_t bytes() const { return bytes_; }

 private:
  size_t bytes_ = 0;
};

}  // namespace kvevict
