#include "core/redops.h"

#include <cstring>

#include "core/enqueue.h"

namespace braid {

const char* datatypeName(ncclDataType_t type) {
  switch (type) {
    case ncclInt8: return "ncclInt8";
    case ncclUint8: return "ncclUint8";
    case ncclInt32: return "ncclInt32";
    case ncclUint32: return "ncclUint32";
    case ncclInt64: return "ncclInt64";
    case ncclUint64: return "ncclUint64";
    case ncclFloat16: return "ncclFloat16";
    case ncclFloat32: return "ncclFloat32";
    case ncclFloat64: return "ncclFloat64";
    case ncclBfloat16: return "ncclBfloat16";
    case ncclFloat8e4m3: return "ncclFloat8e4m3";
    case ncclFloat8e5m2: return "ncclFloat8e5m2";
    default: return "an invalid datatype";
  }
}

Status RedOpTable::create(const void* scalar, ncclDataType_t type, ncclScalarResidence_t residence,
                          ncclRedOp_t* out) {
  Entry e;
  e.live = true;
  e.type = type;
  e.residence = residence;
  if (residence == ncclScalarHostImmediate) {
    std::memcpy(e.value.bytes, scalar, datatypeSize(type));
  } else {
    e.pointer = scalar;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  uint32_t slot = 0;
  if (!free_.empty()) {
    slot = free_.back();
    free_.pop_back();
    e.generation = (ops_[slot].generation + 1) % kGenerations;
    ops_[slot] = e;
  } else {
    if (ops_.size() >= kMaxSlots) {
      return invalidUsage("too many reduction operators are live on this communicator (", kMaxSlots,
                          "): destroy those no longer used with ncclRedOpDestroy");
    }
    slot = static_cast<uint32_t>(ops_.size());
    ops_.push_back(e);
  }
  *out = static_cast<ncclRedOp_t>(ncclNumOps + static_cast<int>(e.generation << kSlotBits | slot));
  return okStatus();
}

const RedOpTable::Entry* RedOpTable::find(int op) const {
  if (op < ncclNumOps) return nullptr;
  const uint32_t bits = static_cast<uint32_t>(op - ncclNumOps);
  const uint32_t slot = bits & (kMaxSlots - 1);
  if (slot >= ops_.size()) return nullptr;
  const Entry& e = ops_[slot];
  return e.live && e.generation == bits >> kSlotBits ? &e : nullptr;
}

Status RedOpTable::destroy(ncclRedOp_t op) {
  const int raw = static_cast<int>(op);
  std::lock_guard<std::mutex> lock(mutex_);
  const Entry* e = find(raw);
  if (e == nullptr) {
    return invalidArgument("argument 'op' (", raw,
                           ") is not a live operator of this communicator: it was destroyed ",
                           "already, belongs to another communicator, or is built in");
  }
  const size_t slot = static_cast<size_t>(e - ops_.data());
  ops_[slot].live = false;
  free_.push_back(static_cast<uint32_t>(slot));
  return okStatus();
}

Status RedOpTable::resolveCustom(ncclRedOp_t op, ncclDataType_t type, ScalarBits* scalar, bool leavePointer) const {
  const int raw = static_cast<int>(op);
  std::lock_guard<std::mutex> lock(mutex_);
  const Entry* live = find(raw);
  if (live == nullptr) {
    return invalidArgument("argument 'op' is ", raw,
                           ", which is neither a built-in ncclRedOp_t nor a live operator ",
                           "created by ncclRedOpCreatePreMulSum on this communicator");
  }
  const Entry& e = *live;
  if (e.type != type) {
    return invalidArgument("argument 'op' (", raw, ") was created for ", datatypeName(e.type),
                           " but the call's datatype is ", datatypeName(type));
  }
  if (scalar != nullptr) {
    if (e.residence == ncclScalarHostImmediate) {
      *scalar = e.value;
    } else {
      scalar->pointer = e.pointer;
      if (!leavePointer) loadScalar(scalar, type);
    }
  }
  return okStatus();
}

void loadScalar(ScalarBits* scalar, ncclDataType_t type) {
  if (scalar->pointer == nullptr) return;
  std::memcpy(scalar->bytes, scalar->pointer, datatypeSize(type));
  scalar->pointer = nullptr;
}

}  // namespace braid
