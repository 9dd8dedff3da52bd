// torch.save(state_dict) zip archives: <archive>/data.pkl (a pickle, run by torch_pickle.cc) plus
// one record per storage, <archive>/data/<key>. This file gives the pickle its torch meaning:
// storages, _rebuild_tensor_v2, _rebuild_parameter, OrderedDict; then collects the tensors.
#include <ATen/ATen.h>
#include <caffe2/serialize/inline_container.h>

#include <cstring>
#include <memory>
#include <optional>
#include <tuple>
#include <unordered_map>

#include "load/memory_adapter.h"
#include "load/torch_pickle.h"
#include "mha/loader.h"

namespace mha {
namespace {

using internal::MakePy;
using internal::PickleError;
using internal::PyObject;
using internal::PyRef;

at::ScalarType StorageDType(std::string name) {
  if (name.rfind("torch.cuda.", 0) == 0) name = "torch." + name.substr(11);
  static const std::pair<const char*, at::ScalarType> kTypes[] = {
      {"torch.FloatStorage", at::kFloat},       {"torch.HalfStorage", at::kHalf},
      {"torch.BFloat16Storage", at::kBFloat16}, {"torch.DoubleStorage", at::kDouble},
      {"torch.LongStorage", at::kLong},         {"torch.IntStorage", at::kInt},
      {"torch.ShortStorage", at::kShort},       {"torch.CharStorage", at::kChar},
      {"torch.ByteStorage", at::kByte},         {"torch.BoolStorage", at::kBool}};
  for (const auto& [type_name, type] : kTypes) {
    if (name == type_name) return type;
  }
  return at::ScalarType::Undefined;
}

// Calls that rebuild tensors in ways this reader does not implement must fail loudly rather
// than leave a tensor out; other unknown classes (argparse.Namespace in a checkpoint's "args")
// become opaque kOther values, which are never executed, only skipped.
bool IsTensorMachinery(const std::string& name) {
  for (const char* prefix : {"torch._utils.", "torch.storage.", "torch._tensor.", "torch._C."}) {
    if (name.rfind(prefix, 0) == 0) return true;
  }
  return false;
}

int64_t Mul(int64_t a, int64_t b) {
  int64_t out = 0;
  if (__builtin_mul_overflow(a, b, &out)) throw PickleError("tensor size overflows");
  return out;
}

std::vector<int64_t> Ints(const PyObject& tuple, const char* what) {
  if (tuple.kind != PyObject::kTuple) throw PickleError(std::string(what) + " is not a tuple");
  std::vector<int64_t> out;
  for (const auto& item : tuple.items) {
    if (item->kind != PyObject::kInt || item->int_value < 0) {
      throw PickleError(std::string(what) + " holds a value that is not a non-negative int");
    }
    out.push_back(item->int_value);
  }
  return out;
}

// The archive's objects: storages by key, read once each (several tensors may share one), and
// the tensors rebuilt over them.
class ArchiveObjects {
 public:
  explicit ArchiveObjects(internal::RecordSource records) : records_(std::move(records)) {}

  // ('storage', storage_type, key, location, numel) -> a 1-D tensor over data/<key>.
  PyRef Load(const PyRef& pid) {
    const auto& t = pid->items;
    if (pid->kind != PyObject::kTuple || t.size() < 5 || t[0]->str != "storage" ||
        t[1]->kind != PyObject::kGlobal || t[2]->kind != PyObject::kString ||
        t[4]->kind != PyObject::kInt) {
      throw PickleError("persistent id is not ('storage', type, key, location, numel)");
    }
    auto cached = storages_.find(t[2]->str);
    if (cached != storages_.end()) return cached->second;
    const at::ScalarType dtype = StorageDType(t[1]->str);
    if (dtype == at::ScalarType::Undefined) {
      throw PickleError("unsupported storage type '" + t[1]->str + "'");
    }
    const std::string record = "data/" + t[2]->str;
    auto found = records_(record);
    if (!found) throw PickleError("storage record '" + record + "' missing");
    auto& [data, record_size] = *found;
    const int64_t numel = t[4]->int_value;
    if (numel < 0 || static_cast<uint64_t>(Mul(numel, c10::elementSize(dtype))) > record_size) {
      throw PickleError("storage '" + record + "' holds " + std::to_string(record_size) +
                        " bytes, fewer than " + std::to_string(numel) + " elements of " +
                        c10::toString(dtype));
    }
    auto obj = MakePy(PyObject::kStorage);
    obj->tensor = at::empty({numel}, at::TensorOptions().dtype(dtype));
    if (numel > 0) {
      std::memcpy(obj->tensor.data_ptr(), data.get(), numel * obj->tensor.element_size());
    }
    storages_[t[2]->str] = obj;
    budget_ += 2 * record_size;
    return obj;
  }

  PyRef Call(const PyObject& callable, const PyObject& args) {
    const std::string& name = callable.str;
    if ((callable.kind != PyObject::kGlobal && callable.kind != PyObject::kOther) ||
        args.kind != PyObject::kTuple) {
      throw PickleError("REDUCE with a non-callable or without an argument tuple");
    }
    if (name == "collections.OrderedDict" && args.items.empty()) return MakePy(PyObject::kDict);
    if (name == "torch._utils._rebuild_tensor_v2") return RebuildTensor(args.items);
    if (name == "torch._utils._rebuild_parameter" ||
        name == "torch._utils._rebuild_parameter_with_state") {
      if (args.items.empty() || args.items[0]->kind != PyObject::kTensor) {
        throw PickleError(name + ": unexpected arguments");
      }
      return args.items[0];
    }
    if (IsTensorMachinery(name)) {
      throw PickleError("unsupported tensor reconstruction '" + name + "'");
    }
    auto obj = MakePy(PyObject::kOther);  // an object of a class we do not model: opaque
    obj->str = name;
    return obj;
  }

 private:
  // _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad, hooks[, metadata]).
  PyRef RebuildTensor(const std::vector<PyRef>& a) {
    if (a.size() < 4 || a[0]->kind != PyObject::kStorage || a[1]->kind != PyObject::kInt) {
      throw PickleError("_rebuild_tensor_v2: unexpected arguments");
    }
    const at::Tensor& storage = a[0]->tensor;
    const int64_t offset = a[1]->int_value;
    const std::vector<int64_t> sizes = Ints(*a[2], "tensor size");
    const std::vector<int64_t> strides = Ints(*a[3], "tensor stride");
    if (sizes.size() != strides.size() || offset < 0) throw PickleError("bad tensor geometry");
    int64_t numel = 1, last = offset;
    for (size_t i = 0; i < sizes.size(); ++i) {
      numel = Mul(numel, sizes[i]);
      if (sizes[i] > 0 && __builtin_add_overflow(last, Mul(sizes[i] - 1, strides[i]), &last)) {
        throw PickleError("tensor extent overflows");
      }
    }
    if (numel > 0 && last >= storage.numel()) {
      throw PickleError("tensor reaches element " + std::to_string(last) + " of a storage of " +
                        std::to_string(storage.numel()));
    }
    auto obj = MakePy(PyObject::kTensor);
    at::Tensor view = storage.as_strided(sizes, strides, numel > 0 ? offset : 0);
    // Share the storage only when the tensor is all of it; otherwise own a compact copy.
    const bool whole = offset == 0 && numel == storage.numel() && view.is_contiguous();
    if (!whole) {
      const auto bytes = static_cast<uint64_t>(Mul(numel, storage.element_size()));
      if (bytes > budget_) throw PickleError("tensor views copy more bytes than the archive holds");
      budget_ -= bytes;
    }
    obj->tensor = whole ? view : view.clone(at::MemoryFormat::Contiguous);
    return obj;
  }

  internal::RecordSource records_;
  std::unordered_map<std::string, PyRef> storages_;
  // Bytes that copies of storage views may take: twice the storages plus some slack, so that a
  // hostile pickle cannot clone one storage many times over.
  uint64_t budget_ = 256ull << 20;
};

// Tensors of a (possibly nested) dict as dotted keys; other values (ints, strings...) are skipped.
// `visits` bounds the work on dicts that refer to themselves or each other many times.
void Flatten(const PyObject& dict, const std::string& prefix, int depth, int64_t* visits,
             TensorMap* out) {
  if (depth > 8) throw PickleError("dicts nested too deeply");
  for (const auto& [key, value] : dict.entries) {
    if (++*visits > 10'000'000) throw PickleError("dicts refer to each other too often");
    if (key->kind != PyObject::kString) continue;
    if (value->kind == PyObject::kTensor) {
      (*out)[prefix + key->str] = value->tensor;
    } else if (value->kind == PyObject::kDict) {
      Flatten(*value, prefix + key->str + ".", depth + 1, visits, out);
    }
  }
}

// {"state_dict": {...}} and {"model": {...}} wrap the real state dict in some checkpoints.
const PyObject* Unwrap(const PyObject* dict) {
  for (int depth = 0; depth < 4; ++depth) {
    const PyObject* inner = nullptr;
    for (const auto& [key, value] : dict->entries) {
      if (value->kind == PyObject::kTensor) return dict;
      if (key->kind == PyObject::kString && value->kind == PyObject::kDict &&
          (key->str == "state_dict" || key->str == "model")) {
        inner = value.get();
      }
    }
    if (inner == nullptr) return dict;
    dict = inner;
  }
  return dict;
}

}  // namespace

namespace internal {

TensorMap TensorsFromPickle(const char* pickle, size_t size, RecordSource records) {
  PyArena arena;  // declared first: outlives every object below (see PyArena)
  ArchiveObjects objects(std::move(records));
  PickleHooks hooks;
  hooks.persistent_load = [&objects](const PyRef& pid) { return objects.Load(pid); };
  hooks.call = [&objects](const PyObject& callable, const PyObject& args) {
    return objects.Call(callable, args);
  };
  PyRef root = Unpickle(pickle, size, hooks, &arena);
  if (root->kind != PyObject::kDict) {
    const std::string what = root->kind == PyObject::kOther ? "a " + root->str : "not a dict";
    throw PickleError("torch.save object is " + what + "; save module.state_dict() instead");
  }
  TensorMap tensors;
  int64_t visits = 0;
  Flatten(*Unwrap(root.get()), "", 0, &visits, &tensors);
  if (tensors.empty()) throw PickleError("torch.save dict holds no tensors");
  return tensors;
}

}  // namespace internal

namespace {

template <typename OpenZip>
StatusOr<TensorMap> ReadTorchSaveArchive(const std::string& path, OpenZip open_zip) {
  try {
    caffe2::serialize::PyTorchStreamReader reader = open_zip();
    if (!reader.hasRecord("data.pkl")) {
      return InvalidArgument(path + ": not a torch.save archive (no data.pkl record)");
    }
    if (reader.hasRecord("byteorder")) {
      auto [order, order_size] = reader.getRecord("byteorder");
      if (std::string(static_cast<const char*>(order.get()), order_size) != "little") {
        return InvalidArgument(path + ": big-endian torch.save archives are not supported");
      }
    }
    auto [pickle, pickle_size] = reader.getRecord("data.pkl");
    return internal::TensorsFromPickle(
        static_cast<const char*>(pickle.get()), pickle_size,
        [&reader](const std::string& record) -> std::optional<std::tuple<at::DataPtr, size_t>> {
          if (!reader.hasRecord(record)) return std::nullopt;
          return reader.getRecord(record);
        });
  } catch (const PickleError& e) {
    return InvalidArgument(path + ": data.pkl: " + e.what());
  } catch (const c10::Error& e) {
    return InvalidArgument(path +
                           ": not a readable torch.save archive: " + e.what_without_backtrace());
  } catch (const std::exception& e) {
    return InvalidArgument(path + ": " + e.what());
  }
}

}  // namespace

StatusOr<TensorMap> ReadTorchSave(const std::string& path) {
  return ReadTorchSaveArchive(path, [&] { return caffe2::serialize::PyTorchStreamReader(path); });
}

StatusOr<TensorMap> ReadTorchSaveFromBytes(const void* data, size_t size, const std::string& name) {
  return ReadTorchSaveArchive(name, [&] {
    return caffe2::serialize::PyTorchStreamReader(
        std::make_shared<internal::BoundedMemoryAdapter>(data, size));
  });
}

}  // namespace mha
