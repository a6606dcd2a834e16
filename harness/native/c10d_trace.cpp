// The collective trace's kernel in C++: the same records harness/collectives.py's Python kernel
// makes, without boxing every argument into Python objects and back (about 40 us of cold CPU per
// collective inside a DDP step on the 2-core machine, most of the trace's cost).
//
// One boxed kernel per c10d operator at the BackendSelect key. Per call it describes the tensor
// arguments, reads the caller's Python frames (the GIL is taken for that alone: a few frames, each
// code object classified once, by Python, then looked up by pointer), appends the ``enter`` record
// to a buffer, redispatches, and keeps the returned Work. ``sweep()`` notes the completion of the
// works still open (no GIL); ``drain()`` hands the records to Python, whose flusher thread signs and
// writes them. Built by harness/native_build.py; harness/native_trace.py is its Python side.
#include <Python.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <pthread.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <time.h>
#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/library.h>

#include <atomic>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace py = pybind11;

namespace {

// Operators this file can trace; Python registers those its torch has (``install(names)``).
constexpr const char* kOps[] = {
    "allreduce_", "allreduce_coalesced_", "broadcast_", "reduce_", "allgather_",
    "_allgather_base_", "allgather_coalesced_", "allgather_into_tensor_coalesced_",
    "reduce_scatter_", "_reduce_scatter_base_", "reduce_scatter_tensor_coalesced_", "alltoall_",
    "alltoall_base_", "gather_", "scatter_", "barrier", "monitored_barrier_", "send", "recv_",
    "recv_any_source_"};
constexpr size_t kNumOps = sizeof(kOps) / sizeof(kOps[0]);
constexpr size_t kMaxBuffered = 1 << 20;  // records no drain has taken: past this, counted and dropped

struct OpInfo {  // from the schema, once per operator
  std::vector<int> data_at;  // positions of the tensor arguments (Tensor, Tensor?, Tensor[], Tensor[][])
  int bytes_at = 0;          // the argument whose tensors are this rank's input data
  int async_at = -1;         // position of ``async_op``, if the operator has one
};
OpInfo g_info[kNumOps];

struct Record {
  uint64_t seq = 0;
  int64_t step = 0;
  int32_t op = 0;
  int8_t async_op = -1;  // -1: the operator has no async_op argument
  bool main = false;
  PyObject* site_code = nullptr;  // a code object kept alive by the classification cache
  int32_t site_line = 0;
  int32_t api = -1;  // index into Python's api names, -1: none
  int32_t labels = 0;  // bit mask of the parts of torch between the script and the call
  int64_t t_issue = 0, t_done = 0;  // CLOCK_REALTIME ns; t_done 0: not seen complete
  int64_t nbytes = -1;
  int8_t dtype = -1;
  // Shapes as _describe gives them: per described argument, a tensor's shape or a list's first
  // shapes. Encoded flat: kind (0 tensor, 1 list), then for a tensor ndim and dims, for a list
  // its count and each tensor's ndim and dims.
  std::vector<int64_t> shapes;
  std::string err;  // "Type: message" when the call or its work failed
};

struct Pending {
  uint64_t gen;  // the drain generation whose buffer holds the record
  size_t idx;
  uint64_t seq;
  c10::intrusive_ptr<c10d::Work> work;
  int64_t t_done = 0;
  std::string err;
};

struct Late {  // a completion of a record already drained
  uint64_t seq;
  int64_t t_done;
  std::string err;
};

struct State {
  std::mutex mu;  // never held while taking the GIL
  std::vector<Record> buf;
  uint64_t gen = 0, next_seq = 1, dropped = 0;
  std::vector<Pending> pending;
  std::vector<Late> late;
  std::mutex sweep_mu;  // one sweep at a time
  std::atomic<int64_t> step{0};  // written by the step hook, read by the kernel on any thread
  unsigned long main_ident = 0;  // set before the kernels are registered
};
// Never freed: a collective can still be issued from a backend thread while statics are destroyed.
State* g_state = new State();
torch::Library* g_lib = nullptr;

// Guarded by the GIL: code object -> what Python's classifier said (user frame, api, labels).
struct CodeInfo {
  bool user;
  int32_t api;
  int32_t labels;
};
std::unordered_map<PyObject*, CodeInfo>* g_codes = new std::unordered_map<PyObject*, CodeInfo>();
PyObject* g_classify = nullptr;  // Python callable: code -> (user, api index, label mask)

int64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

std::string describe_error(const std::exception& e) {
  std::string msg = e.what();
  if (msg.size() > 300) msg = msg.substr(msg.size() - 300);
  const char* type = dynamic_cast<const c10::DistBackendError*>(&e) ? "DistBackendError"
                     : dynamic_cast<const c10::DistError*>(&e)      ? "DistError"
                                                                    : "RuntimeError";
  return std::string(type) + ": " + msg;
}

// --- the arguments ---------------------------------------------------------------------------
bool is_tensor(const c10::IValue& v) { return v.isTensor() && v.toTensor().defined(); }

void put_shape(const at::Tensor& t, std::vector<int64_t>& out) {
  out.push_back(t.dim());
  for (int64_t d : t.sizes()) out.push_back(d);
}

int64_t bytes_of(const c10::IValue& v) {
  if (is_tensor(v)) {
    const at::Tensor& t = v.toTensor();
    return t.numel() * int64_t(t.element_size());
  }
  int64_t n = 0;
  if (v.isList())
    for (const c10::IValue& e : v.toListRef()) n += bytes_of(e);
  return n;
}

// Python's _describe: up to two tensor arguments; of a list, the tensors among its first four
// elements (each a tensor or a list of them), the first four of those.
void describe(const OpInfo& info, const torch::jit::Stack& stack, size_t first, Record& r) {
  int described = 0;
  for (int at : info.data_at) {
    const c10::IValue& a = stack[first + at];
    if (is_tensor(a)) {
      const at::Tensor& t = a.toTensor();
      r.shapes.push_back(0);
      put_shape(t, r.shapes);
      if (r.dtype < 0) r.dtype = int8_t(t.scalar_type());
      ++described;
    } else if (a.isList()) {
      std::vector<const at::Tensor*> ts;
      size_t i = 0;
      for (const c10::IValue& x : a.toListRef()) {
        if (i++ == 4) break;
        if (is_tensor(x)) {
          ts.push_back(&x.toTensor());
        } else if (x.isList()) {
          for (const c10::IValue& y : x.toListRef())
            if (is_tensor(y)) ts.push_back(&y.toTensor());
        }
      }
      if (!ts.empty()) {
        const size_t n = std::min<size_t>(ts.size(), 4);
        r.shapes.push_back(1);
        r.shapes.push_back(int64_t(n));
        for (size_t k = 0; k < n; ++k) put_shape(*ts[k], r.shapes);
        if (r.dtype < 0) r.dtype = int8_t(ts[0]->scalar_type());
        ++described;
      }
    }
    if (described >= 2) break;
  }
}

// --- the caller --------------------------------------------------------------------------------
const CodeInfo* code_info(PyObject* code) {  // GIL held
  auto it = g_codes->find(code);
  if (it != g_codes->end()) return &it->second;
  CodeInfo ci{false, -1, 0};
  PyObject* res = g_classify ? PyObject_CallOneArg(g_classify, code) : nullptr;
  if (res && PyTuple_Check(res) && PyTuple_GET_SIZE(res) == 3) {
    ci.user = PyObject_IsTrue(PyTuple_GET_ITEM(res, 0)) == 1;
    ci.api = int32_t(PyLong_AsLong(PyTuple_GET_ITEM(res, 1)));
    ci.labels = int32_t(PyLong_AsLong(PyTuple_GET_ITEM(res, 2)));
  }
  Py_XDECREF(res);
  if (PyErr_Occurred()) PyErr_Clear();  // an unclassifiable frame counts as the library's
  Py_INCREF(code);  // kept for good: the pointer is the key, and records point at it
  return &g_codes->emplace(code, ci).first->second;
}

// Walks from ``f`` (a new reference, consumed) outwards to the first frame of the script.
void walk(PyFrameObject* f, Record& r, bool site_only) {
  while (f) {
    PyObject* code = reinterpret_cast<PyObject*>(PyFrame_GetCode(f));
    const CodeInfo* ci = code_info(code);
    if (ci->user) {
      r.site_code = code;
      r.site_line = PyFrame_GetLineNumber(f);
      Py_DECREF(code);
      Py_DECREF(f);
      return;
    }
    if (!site_only) {
      if (ci->api >= 0) r.api = ci->api;  // keep walking: the outermost public one
      r.labels |= ci->labels;
    }
    Py_DECREF(code);
    PyFrameObject* back = PyFrame_GetBack(f);
    Py_DECREF(f);
    f = back;
  }
}

bool finalizing() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing();
#else
  return _Py_IsFinalizing();
#endif
}

void caller(Record& r) {
  if (!Py_IsInitialized() || finalizing()) return;  // a collective from a C++ thread at exit
  PyGILState_STATE g = PyGILState_Ensure();
  PyFrameObject* f = PyEval_GetFrame();
  Py_XINCREF(f);
  walk(f, r, false);
  if (!r.site_code && !r.main) {  // an autograd device thread: the script is on the main thread
    for (PyThreadState* t = PyInterpreterState_ThreadHead(PyInterpreterState_Get()); t;
         t = PyThreadState_Next(t)) {
      if (t->thread_id == g_state->main_ident) {
        walk(PyThreadState_GetFrame(t), r, true);
        break;
      }
    }
  }
  PyGILState_Release(g);
}

// --- the kernel --------------------------------------------------------------------------------
void sweep_if_free();

// Returns the record's seq; ``gen`` and ``idx`` say where it is until a drain takes it.
uint64_t add(Record&& r, uint64_t& gen, size_t& idx) {
  State& s = *g_state;
  std::lock_guard<std::mutex> lock(s.mu);
  const uint64_t seq = r.seq = s.next_seq++;
  gen = s.gen;
  if (s.buf.size() >= kMaxBuffered) {
    ++s.dropped;
    idx = SIZE_MAX;
  } else {
    idx = s.buf.size();
    s.buf.push_back(std::move(r));
  }
  return seq;
}

// With ``mu`` held: the record's completion, in the buffer while no drain has taken it, else as
// a late completion.
void done_locked(State& s, uint64_t gen, size_t idx, uint64_t seq, int64_t t, std::string err) {
  if (idx == SIZE_MAX) return;  // dropped
  if (gen == s.gen) {
    s.buf[idx].t_done = t;
    s.buf[idx].err = std::move(err);
  } else {
    s.late.push_back({seq, t, std::move(err)});
  }
}

void finish(uint64_t gen, size_t idx, uint64_t seq, int64_t t, std::string err) {
  State& s = *g_state;
  std::lock_guard<std::mutex> lock(s.mu);
  done_locked(s, gen, idx, seq, t, std::move(err));
}

template <size_t I>
void kernel(const c10::OperatorHandle& op, c10::DispatchKeySet ks, torch::jit::Stack* stack) {
  const c10::DispatchKeySet after =
      ks & c10::DispatchKeySet(c10::DispatchKeySet::FULL_AFTER, c10::DispatchKey::BackendSelect);
  if (ks.has(c10::DispatchKey::Meta)) {  // shape propagation, not a collective
    op.redispatchBoxed(after, stack);
    return;
  }
  const OpInfo& info = g_info[I];
  const size_t nargs = op.schema().arguments().size();
  const size_t first = stack->size() - nargs;
  Record r;
  r.op = int32_t(I);
  r.step = g_state->step.load(std::memory_order_relaxed);
  r.main = PyThread_get_thread_ident() == g_state->main_ident;
  describe(info, *stack, first, r);
  if (size_t(info.bytes_at) < nargs)
    r.nbytes = bytes_of((*stack)[first + info.bytes_at]);
  if (info.async_at >= 0) {
    const c10::IValue& a = (*stack)[first + info.async_at];
    r.async_op = a.isBool() ? int8_t(a.toBool()) : int8_t(1);
  }
  caller(r);
  sweep_if_free();
  // The enter record is in the buffer before the backend is called: a call that blocks (NCCL's
  // first collective, monitored_barrier) is seen pending.
  r.t_issue = now_ns();
  uint64_t gen;
  size_t idx;
  const uint64_t seq = add(std::move(r), gen, idx);
  try {
    op.redispatchBoxed(after, stack);
  } catch (const std::exception& e) {
    finish(gen, idx, seq, now_ns(), describe_error(e));
    throw;
  }
  c10::intrusive_ptr<c10d::Work> work;
  try {  // the collective is issued by now: whatever this finds, the caller gets its result
    if (!stack->empty() && stack->back().isObject())
      work = stack->back().toCustomClass<c10d::Work>();
  } catch (const std::exception&) {
    work.reset();
  }
  if (!work) {  // an operator that returns nothing (monitored_barrier_) is done when it returns
    finish(gen, idx, seq, now_ns(), "");
    return;
  }
  State& s = *g_state;
  std::lock_guard<std::mutex> lock(s.mu);
  if (idx != SIZE_MAX) s.pending.push_back({gen, idx, seq, std::move(work)});
}

template <size_t... I>
void register_ops(const std::vector<std::string>& names, std::index_sequence<I...>) {
  auto one = [&](auto i) {
    constexpr size_t k = decltype(i)::value;
    for (const std::string& n : names)
      if (n == kOps[k]) g_lib->impl(kOps[k], torch::CppFunction::makeFromBoxedFunction<&kernel<k>>());
  };
  (one(std::integral_constant<size_t, I>{}), ...);
}

// --- Python's side -----------------------------------------------------------------------------
// ``ops``: {name: (data_at, bytes_at, async_at)} for the operators this torch has.
void install(py::dict ops, py::object classify, unsigned long main_ident, int64_t step) {
  if (g_lib) throw std::runtime_error("the native collective trace is installed already");
  std::vector<std::string> names;
  for (auto item : ops) {
    const std::string name = py::cast<std::string>(item.first);
    for (size_t k = 0; k < kNumOps; ++k) {
      if (name != kOps[k]) continue;
      py::tuple t = py::cast<py::tuple>(item.second);
      g_info[k].data_at = py::cast<std::vector<int>>(t[0]);
      g_info[k].bytes_at = py::cast<int>(t[1]);
      g_info[k].async_at = py::cast<int>(t[2]);
      names.push_back(name);
    }
  }
  Py_XDECREF(g_classify);
  g_classify = classify.release().ptr();
  g_state->main_ident = main_ident;
  g_state->step.store(step);
  g_lib = new torch::Library(torch::Library::IMPL, "c10d", c10::DispatchKey::BackendSelect,
                             __FILE__, __LINE__);
  register_ops(names, std::make_index_sequence<kNumOps>{});
}

void uninstall() {  // benchmarks switch the trace off and on; a run never does
  delete g_lib;
  g_lib = nullptr;
}

// Notes the completion of the works seen complete since the last look; returns how many are open.
// A complete work's own wait() returns at once, or throws its error: that tells the two apart.
size_t sweep_locked(State& s);

size_t sweep() {
  State& s = *g_state;
  std::lock_guard<std::mutex> one(s.sweep_mu);
  return sweep_locked(s);
}

// At each new collective, as the Python kernel does: the works of the last ones are usually done.
// Skipped while another thread sweeps (the flusher): it does the same work.
void sweep_if_free() {
  State& s = *g_state;
  std::unique_lock<std::mutex> one(s.sweep_mu, std::try_to_lock);
  if (one.owns_lock()) sweep_locked(s);
}

size_t sweep_locked(State& s) {
  std::vector<Pending> open;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (s.pending.empty()) return 0;
    open.swap(s.pending);
  }
  for (Pending& p : open) {
    try {
      if (!p.work->isCompleted()) continue;
    } catch (const std::exception&) {  // a backend that cannot say: look again next time
      continue;
    }
    try {
      p.work->wait();
    } catch (const std::exception& e) {
      p.err = describe_error(e);
    }
    p.t_done = now_ns();
  }
  std::vector<Pending> done;
  size_t left;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    for (Pending& p : open) {
      if (!p.t_done) {
        s.pending.push_back(std::move(p));
      } else {
        done_locked(s, p.gen, p.idx, p.seq, p.t_done, std::move(p.err));
        done.push_back(std::move(p));
      }
    }
    left = s.pending.size();
  }
  return left;  // ``done`` frees the finished works (and their tensors) outside the lock
}

// A work whose wait() returned or raised in Python: its exit, or its error, now.
void finished(py::object work, py::object error) {
  c10d::Work* w = py::cast<c10d::Work*>(work);
  std::string err = error.is_none() ? "" : py::cast<std::string>(error);
  py::gil_scoped_release nogil;
  State& s = *g_state;
  c10::intrusive_ptr<c10d::Work> found;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    for (size_t i = 0; i < s.pending.size(); ++i) {
      if (s.pending[i].work.get() != w) continue;
      Pending p = std::move(s.pending[i]);
      s.pending.erase(s.pending.begin() + i);
      done_locked(s, p.gen, p.idx, p.seq, now_ns(), std::move(err));
      found = std::move(p.work);
      break;
    }
  }
}

py::object site_of(const Record& r) {
  if (!r.site_code) return py::none();
  return py::make_tuple(py::reinterpret_borrow<py::object>(r.site_code), r.site_line);
}

py::list shapes_of(const Record& r) {
  py::list out;
  size_t i = 0;
  auto one = [&]() {
    const int64_t nd = r.shapes[i++];
    py::list s;
    for (int64_t d = 0; d < nd; ++d) s.append(r.shapes[i++]);
    return s;
  };
  while (i < r.shapes.size()) {
    if (r.shapes[i++] == 0) {
      out.append(one());
    } else {
      const int64_t n = r.shapes[i++];
      py::list l;
      for (int64_t k = 0; k < n; ++k) l.append(one());
      out.append(l);
    }
  }
  return out;
}

py::object dtype_of(int8_t dtype) {
  if (dtype < 0) return py::none();
  return py::reinterpret_borrow<py::object>(
      reinterpret_cast<PyObject*>(torch::getTHPDtype(c10::ScalarType(dtype))));
}

// (records, completions of records drained earlier, records dropped), taken out of the buffer.
// A record: (seq, step, op index, async (-1: no such argument), main, site ((code, line) or None),
// api index, label mask, t_issue ns, t_done ns (0: open), bytes (-1: unknown), dtype, shapes, err).
py::tuple drain() {
  State& s = *g_state;
  std::vector<Record> recs;
  std::vector<Late> late;
  uint64_t dropped;
  {
    py::gil_scoped_release nogil;  // the kernel holds the GIL only before it takes the lock
    std::lock_guard<std::mutex> lock(s.mu);
    recs.swap(s.buf);
    late.swap(s.late);
    dropped = s.dropped;
    s.dropped = 0;
    ++s.gen;
  }
  py::list out;
  for (const Record& r : recs) {
    out.append(py::make_tuple(r.seq, r.step, r.op, r.async_op, r.main, site_of(r), r.api,
                              r.labels, r.t_issue, r.t_done, r.nbytes, dtype_of(r.dtype),
                              shapes_of(r), r.err));
  }
  py::list lout;
  for (const Late& l : late) lout.append(py::make_tuple(l.seq, l.t_done, l.err));
  return py::make_tuple(out, lout, dropped);
}

void set_step(int64_t step) { g_state->step.store(step, std::memory_order_relaxed); }

// A forked child (a DataLoader worker) starts empty: the parent's records are the parent's, and a
// lock may have been held by a thread the child does not have.
void after_fork_child() {
  State* fresh = new State();
  fresh->main_ident = g_state->main_ident;
  fresh->step.store(g_state->step.load());
  g_state = fresh;  // the old one is left as it is
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  pthread_atfork(nullptr, nullptr, &after_fork_child);
  m.def("install", &install);
  m.def("uninstall", &uninstall);
  m.def("sweep", &sweep, py::call_guard<py::gil_scoped_release>());
  m.def("finished", &finished);
  m.def("drain", &drain);
  m.def("set_step", &set_step);
  m.def("op_names", [] {
    std::vector<std::string> names(kOps, kOps + kNumOps);
    return names;
  });
}
