// The pickle interpreter behind ReadTorchSave; see torch_pickle.h. Opcode names and semantics
// follow Python's pickletools. Every read is bounds-checked against the pickle's size.
#include "load/torch_pickle.h"

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <unordered_map>

namespace mha::internal {

PyRef MakePy(PyObject::Kind kind) {
  auto obj = std::make_shared<PyObject>();
  obj->kind = kind;
  return obj;
}

PyArena::~PyArena() {
  for (const PyRef& obj : objects_) {
    obj->items.clear();
    obj->entries.clear();
  }
}

namespace {

class Unpickler {
 public:
  Unpickler(const char* data, size_t size, const PickleHooks& hooks, PyArena* arena)
      : data_(data), size_(size), hooks_(hooks), arena_(arena) {}

  PyRef Run() {
    while (true) {
      const size_t offset = pos_;
      const uint8_t op = U8();
      if (op == '.') break;  // STOP
      Step(op, offset);
    }
    if (stack_.size() != 1 || !marks_.empty()) throw PickleError("pickle ends with a bad stack");
    return stack_.back();
  }

 private:
  const char* Bytes(size_t n) {
    if (n > size_ - pos_) throw PickleError("pickle is truncated");
    const char* p = data_ + pos_;
    pos_ += n;
    return p;
  }
  uint8_t U8() { return static_cast<uint8_t>(Bytes(1)[0]); }
  uint64_t LE(size_t n) {  // unsigned little-endian integer of n <= 8 bytes
    const char* p = Bytes(n);
    uint64_t v = 0;
    for (size_t i = n; i-- > 0;) v = (v << 8) | static_cast<uint8_t>(p[i]);
    return v;
  }
  std::string Line() {  // text argument of the protocol-0 opcodes, without its '\n'
    const void* nl = std::memchr(data_ + pos_, '\n', size_ - pos_);
    if (nl == nullptr) throw PickleError("pickle is truncated");
    const size_t len = static_cast<const char*>(nl) - (data_ + pos_);
    std::string s(Bytes(len + 1), len);
    return s;
  }
  uint64_t LineNumber() {
    const std::string line = Line();
    if (line.empty() || line.find_first_not_of("0123456789") != std::string::npos) {
      throw PickleError("bad memo index '" + line + "'");
    }
    return std::stoull(line);
  }

  PyRef Pop() {
    if (stack_.empty() || (!marks_.empty() && stack_.size() <= marks_.back())) {
      throw PickleError("pickle stack underflow");
    }
    PyRef v = std::move(stack_.back());
    stack_.pop_back();
    return v;
  }
  const PyRef& Top() {
    if (stack_.empty()) throw PickleError("pickle stack underflow");
    return stack_.back();
  }
  std::vector<PyRef> PopToMark() {
    if (marks_.empty()) throw PickleError("pickle MARK missing");
    std::vector<PyRef> items(stack_.begin() + marks_.back(), stack_.end());
    stack_.resize(marks_.back());
    marks_.pop_back();
    return items;
  }
  void Push(PyRef v) {
    arena_->Add(v);  // everything on the stack passes here: the arena owns all we make
    stack_.push_back(std::move(v));
  }
  void PushInt(int64_t v, PyObject::Kind kind = PyObject::kInt) {
    auto obj = MakePy(kind);
    obj->int_value = v;
    Push(obj);
  }
  void PushString(uint64_t len) {
    auto obj = MakePy(PyObject::kString);
    obj->str.assign(Bytes(len), len);
    Push(obj);
  }
  void PushItems(PyObject::Kind kind, std::vector<PyRef> items) {
    auto obj = MakePy(kind);
    obj->items = std::move(items);
    Push(obj);
  }
  void PushNamed(PyObject::Kind kind, std::string name) {
    auto obj = MakePy(kind);
    obj->str = std::move(name);
    Push(obj);
  }
  void Memoize(uint64_t key) { memo_[key] = Top(); }
  PyRef MemoGet(uint64_t key) const {
    auto it = memo_.find(key);
    if (it == memo_.end()) throw PickleError("pickle memo key " + std::to_string(key) + " missing");
    return it->second;
  }
  // Duplicate keys are kept in order; readers keep the last, as Python would.
  void SetItems(const std::vector<PyRef>& kv) {
    PyObject& dict = *Top();
    if (dict.kind != PyObject::kDict || kv.size() % 2 != 0) throw PickleError("bad SETITEM(S)");
    for (size_t i = 0; i < kv.size(); i += 2) dict.entries.emplace_back(kv[i], kv[i + 1]);
  }
  void Append(const std::vector<PyRef>& items) {
    PyObject& list = *Top();
    if (list.kind != PyObject::kList) throw PickleError("APPEND(S) to a non-list");
    list.items.insert(list.items.end(), items.begin(), items.end());
  }

  void Step(uint8_t op, size_t offset) {
    switch (op) {
      case 0x80:  // PROTO
        U8();
        break;
      case 0x95:  // FRAME
        LE(8);
        break;
      case '(':  // MARK
        marks_.push_back(stack_.size());
        break;
      case '0':  // POP
        Pop();
        break;
      case '1':  // POP_MARK
        PopToMark();
        break;
      case '2':  // DUP
        Push(PyRef(Top()));
        break;
      case 'N':  // NONE
        Push(MakePy(PyObject::kNone));
        break;
      case 0x88:  // NEWTRUE
      case 0x89:  // NEWFALSE
        PushInt(op == 0x88, PyObject::kBool);
        break;
      case 'J':  // BININT
        PushInt(static_cast<int32_t>(LE(4)));
        break;
      case 'K':  // BININT1
        PushInt(LE(1));
        break;
      case 'M':  // BININT2
        PushInt(LE(2));
        break;
      case 0x8a: {  // LONG1
        const size_t n = U8();
        if (n > 8) throw PickleError("LONG1 integer wider than 64 bits");
        uint64_t v = n == 0 ? 0 : LE(n);
        if (n > 0 && n < 8 && ((v >> (8 * n - 1)) & 1)) v |= ~uint64_t{0} << (8 * n);
        PushInt(static_cast<int64_t>(v));
        break;
      }
      case 'G': {  // BINFLOAT: big-endian double
        const uint64_t swapped = LE(8);
        uint64_t bits = 0;
        for (int i = 0; i < 8; ++i) bits = (bits << 8) | ((swapped >> (8 * i)) & 0xff);
        auto obj = MakePy(PyObject::kFloat);
        std::memcpy(&obj->float_value, &bits, sizeof(bits));
        Push(obj);
        break;
      }
      case 'X':  // BINUNICODE
      case 'B':  // BINBYTES
      case 'T':  // BINSTRING
        PushString(LE(4));
        break;
      case 0x8c:  // SHORT_BINUNICODE
      case 'C':   // SHORT_BINBYTES
      case 'U':   // SHORT_BINSTRING
        PushString(LE(1));
        break;
      case 0x8d:  // BINUNICODE8
      case 0x8e:  // BINBYTES8
        PushString(LE(8));
        break;
      case ')':  // EMPTY_TUPLE
        PushItems(PyObject::kTuple, {});
        break;
      case 't':  // TUPLE
        PushItems(PyObject::kTuple, PopToMark());
        break;
      case 0x85:    // TUPLE1
      case 0x86:    // TUPLE2
      case 0x87: {  // TUPLE3
        std::vector<PyRef> items(op - 0x84);
        for (size_t i = items.size(); i-- > 0;) items[i] = Pop();
        PushItems(PyObject::kTuple, std::move(items));
        break;
      }
      case ']':   // EMPTY_LIST
      case 0x8f:  // EMPTY_SET (kept as a list)
        PushItems(PyObject::kList, {});
        break;
      case 'l':   // LIST
      case 0x91:  // FROZENSET
        PushItems(PyObject::kList, PopToMark());
        break;
      case 'a':  // APPEND
        Append({Pop()});
        break;
      case 'e':   // APPENDS
      case 0x90:  // ADDITEMS
        Append(PopToMark());
        break;
      case '}':  // EMPTY_DICT
        Push(MakePy(PyObject::kDict));
        break;
      case 'd': {  // DICT
        std::vector<PyRef> kv = PopToMark();
        Push(MakePy(PyObject::kDict));
        SetItems(kv);
        break;
      }
      case 's': {  // SETITEM
        PyRef value = Pop();
        PyRef key = Pop();
        SetItems({key, value});
        break;
      }
      case 'u':  // SETITEMS
        SetItems(PopToMark());
        break;
      case 'c': {  // GLOBAL
        std::string module = Line();
        PushNamed(PyObject::kGlobal, module + "." + Line());
        break;
      }
      case 0x93: {  // STACK_GLOBAL
        PyRef name = Pop();
        PyRef module = Pop();
        if (module->kind != PyObject::kString || name->kind != PyObject::kString) {
          throw PickleError("STACK_GLOBAL needs two strings");
        }
        PushNamed(PyObject::kGlobal, module->str + "." + name->str);
        break;
      }
      case 'q':  // BINPUT
        Memoize(LE(1));
        break;
      case 'r':  // LONG_BINPUT
        Memoize(LE(4));
        break;
      case 0x94:  // MEMOIZE
        Memoize(memo_.size());
        break;
      case 'p':  // PUT
        Memoize(LineNumber());
        break;
      case 'h':  // BINGET
        Push(MemoGet(LE(1)));
        break;
      case 'j':  // LONG_BINGET
        Push(MemoGet(LE(4)));
        break;
      case 'g':  // GET
        Push(MemoGet(LineNumber()));
        break;
      case 'Q':  // BINPERSID
        Push(hooks_.persistent_load(Pop()));
        break;
      case 'R': {  // REDUCE
        PyRef args = Pop();
        PyRef callable = Pop();
        Push(hooks_.call(*callable, *args));
        break;
      }
      case 'b':  // BUILD: the OrderedDict's _metadata, an object's state -- not needed
        Pop();
        Top();
        break;
      case 0x81:  // NEWOBJ (cls, args): an object of a class we do not model
        Pop();
        PushNamed(PyObject::kOther, Pop()->str);
        break;
      case 0x92:  // NEWOBJ_EX (cls, args, kwargs)
        Pop();
        Pop();
        PushNamed(PyObject::kOther, Pop()->str);
        break;
      default: {
        char buf[96];
        std::snprintf(buf, sizeof(buf), "unsupported pickle opcode 0x%02x ('%c') at byte %zu", op,
                      op >= 0x20 && op < 0x7f ? op : '?', offset);
        throw PickleError(buf);
      }
    }
  }

  const char* data_;
  size_t size_;
  size_t pos_ = 0;
  const PickleHooks& hooks_;
  PyArena* arena_;
  std::vector<PyRef> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint64_t, PyRef> memo_;
};

}  // namespace

PyRef Unpickle(const char* data, size_t size, const PickleHooks& hooks, PyArena* arena) {
  return Unpickler(data, size, hooks, arena).Run();
}

}  // namespace mha::internal
