// Private to mha_core: the small pickle interpreter behind ReadTorchSave (torch_save.cc).
// LibTorch 1.13's torch::pickle_load turns the collections.OrderedDict a state_dict() is into
// None, so torch.save files are read with this instead. It runs the opcodes torch.save emits
// (protocol 2, plus the protocol 3/4 ones that may appear) and never executes anything: globals
// are names, calls go to the caller's hooks.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "mha/weights.h"

namespace mha::internal {

// Thrown by the interpreter and its hooks; ReadTorchSave turns it into INVALID_ARGUMENT.
struct PickleError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct PyObject;
using PyRef = std::shared_ptr<PyObject>;

// The Python values a state-dict pickle holds. Lists and dicts are shared (memo references).
struct PyObject {
  enum Kind {
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kTuple,
    kList,
    kDict,
    kGlobal,   // a module.name reference (str)
    kStorage,  // a storage from BINPERSID (tensor: 1-D, its dtype)
    kTensor,
    kOther,  // an instance of a class this reader does not model (str: the class)
  };
  Kind kind = kNone;
  int64_t int_value = 0;  // int, bool
  double float_value = 0;
  std::string str;                               // string or bytes; a global's name
  std::vector<PyRef> items;                      // tuple, list, set
  std::vector<std::pair<PyRef, PyRef>> entries;  // dict, in insertion order
  at::Tensor tensor;                             // storage or tensor
};

PyRef MakePy(PyObject::Kind kind);

struct PickleHooks {
  // BINPERSID: the persistent id (a tuple) -> the object it names.
  std::function<PyRef(const PyRef& pid)> persistent_load;
  // REDUCE: callable (a kGlobal or kOther) applied to args (a tuple).
  std::function<PyRef(const PyObject& callable, const PyObject& args)> call;
};

// Owns every object an Unpickle made. A pickle can build reference cycles (a list appended to
// itself through the memo) and nesting one byte per level deep (TUPLE1 over TUPLE1...), which
// plain shared_ptr ownership would leak, or free by a recursion deep enough to overflow the stack.
// The destructor unlinks every object's children first, then frees the objects one by one.
// Keep the arena alive as long as the returned objects are in use.
class PyArena {
 public:
  PyArena() = default;
  PyArena(const PyArena&) = delete;
  PyArena& operator=(const PyArena&) = delete;
  ~PyArena();
  void Add(const PyRef& obj) { objects_.push_back(obj); }

 private:
  std::vector<PyRef> objects_;
};

// Runs the pickle and returns the object STOP leaves; every object it makes goes into `arena`.
// Throws PickleError on anything malformed or unsupported (naming the opcode and its byte offset).
PyRef Unpickle(const char* data, size_t size, const PickleHooks& hooks, PyArena* arena);

// A torch.save archive's records by name ("data/0"): the bytes and their size, or nullopt.
using RecordSource =
    std::function<std::optional<std::tuple<at::DataPtr, size_t>>(const std::string& record)>;

// torch_save.cc: runs a torch.save data.pkl over `records` and returns its state dict's tensors
// (dotted keys). Throws PickleError on anything malformed; ReadTorchSave catches it.
TensorMap TensorsFromPickle(const char* pickle, size_t size, RecordSource records);

}  // namespace mha::internal
