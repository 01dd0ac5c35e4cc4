"""The audit child's routes to raw memory (``course_grading/audit/memory.py``): each is a write
anywhere in the child with no audit event, which could rewrite the record's hook or kernels and
forge the record. Each attack here tries one in 03's softmax, which otherwise computes the right
values by hand: the try alone must make the exercise disagree, naming the route and the cell and
line. The child runs in a fork of the test process (``audit_runner``).
"""

from __future__ import annotations

import pytest

from audit_runner import forked
from course_grading.audit import trusted as audit
from course_grading.sandbox import bubblewrap
from harness import ROOT, solution_with

BY_HAND = "    e = (x - x.amax(dim, keepdim=True)).exp()\n    return e / e.sum(dim, keepdim=True)\n"
TARGET = "target = bytearray(8)\nADDRESS = np.frombuffer(target, np.uint8).__array_interface__['data'][0]\n"
FORGED = "{'shape': (8,), 'typestr': '|u1', 'data': (ADDRESS, False), 'version': 3}"


def _softmax(top: str, body: str) -> str:
    """A softmax that first tries ``body`` (its failure swallowed), then computes by hand;
    ``top`` comes first in the cell, after the imports and ``TARGET`` (lines 1-3)."""
    tried = "".join(f"        {line}\n" for line in body.splitlines())
    return (
        f"import numpy as np, torch\n{TARGET}{top}def softmax(x, dim=-1):\n"
        f"    try:\n{tried}    except Exception:\n        pass\n{BY_HAND}"
    )


NUMPY = "memory.numpy.array_interface"
# (cell top, body, what the reason must say): each writes to ADDRESS through an array numpy built on
# it (measured without the seal), but __array_struct__, offered the struct of an array of its own
NUMPY_ROUTES = {
    "instance_attribute": (
        f"class At:\n    def __init__(self):\n        self.__array_interface__ = {FORGED}\n",
        "np.asarray(At())[0] = 1",
        f"{NUMPY} (cell softmax, line 9)",
    ),
    "class_attribute": (
        f"class At:\n    __array_interface__ = {FORGED}\n",
        "np.asarray(At())[0] = 1",
        "line 8",
    ),
    "the_class_itself": (
        f"class At:\n    __array_interface__ = {FORGED}\n",
        "np.asarray(At)[0] = 1",
        "line 8",
    ),
    "computed_name": (
        "class At:\n    pass\n",
        f"a = At()\nsetattr(a, '__array_' + 'interface__', {FORGED})\nnp.array(a, copy=False)[0] = 1",
        "line 10",
    ),
    "property": (
        f"class At:\n    @property\n    def __array_interface__(self):\n        return {FORGED}\n",
        "np.asarray(At())[0] = 1",
        "line 10",
    ),
    "getattr": (
        "class At:\n    def __getattr__(self, name):\n        if name != '__array_interface__':\n"
        f"            raise AttributeError(name)\n        return {FORGED}\n",
        "np.asarray(At())[0] = 1",
        "line 11",
    ),
    "getattribute": (
        "class At:\n    def __getattribute__(self, name):\n        if name != '__array_interface__':\n"
        f"            return object.__getattribute__(self, name)\n        return {FORGED}\n",
        "np.asarray(At())[0] = 1",
        "line 11",
    ),
    "a_dict_subclass": (
        f"class D(dict):\n    pass\nclass At:\n    __array_interface__ = D({FORGED})\n",
        "np.asarray(At())[0] = 1",
        "line 10",
    ),
    "a_module": (
        f"import types\nAt = types.ModuleType('at')\nAt.__array_interface__ = {FORGED}\n",
        "np.asarray(At)[0] = 1",
        "line 9",
    ),
    "as_strided": (
        "",
        "b = np.zeros(1, np.uint8)\nstep = ADDRESS - b.__array_interface__['data'][0]\n"
        "np.lib.stride_tricks.as_strided(b, shape=(2,), strides=(step,))[1] = 1",
        f"{NUMPY} (cell softmax, line 8)",
    ),
    "an_ndarray_subclass": (
        f"class Sub(np.ndarray):\n    @property\n    def __array_interface__(self):\n        return {FORGED}\n",
        "np.lib.stride_tricks.as_strided(np.zeros(1, np.uint8).view(Sub), subok=True)[0] = 1",
        "line 10",
    ),
    "the_seal_silenced": (  # the course's own functions are reachable: their defaults replaced
        "import sys\nfrom course_grading.audit import memory\nfor f in list(vars(memory).values()):\n"
        "    if sys.audit in (getattr(f, '__defaults__', None) or ()):\n"
        "        f.__defaults__ = tuple(id if v is sys.audit else v for v in f.__defaults__)\n"
        f"class At:\n    __array_interface__ = {FORGED}\n",
        "np.asarray(At())[0] = 1",
        f"{NUMPY} (cell softmax, line 13)",
    ),
    "array_struct": (
        "class At:\n    pass\n",
        "a = At()\na.__array_struct__ = np.zeros(8, np.uint8).__array_struct__\nnp.asarray(a)",
        f"{NUMPY} (cell softmax, line 10)",
    ),
}
TORCH = "memory.torch._C"
# torch 2.13 (CPU): each measured to write out of bounds or to read a raw address as an object
TORCH_ROUTES = {
    "storage_on_an_address": (
        "s = torch._C._construct_storage_from_data_pointer(ADDRESS, torch.device('cpu'), 8)\n"
        "torch.empty(0, dtype=torch.uint8).set_(s)[0] = 1",
        f"{TORCH}._construct_storage_from_data_pointer (cell softmax, line 6)",
    ),
    "storage_from_a_pointer": (
        "torch.UntypedStorage(8)._set_cdata(ADDRESS)",
        f"{TORCH}.StorageBase._set_cdata (cell softmax, line 6)",
    ),
    "storage_from_a_weak_pointer": (
        "torch.UntypedStorage._new_with_weak_ptr(ADDRESS)",
        f"{TORCH}.StorageBase._new_with_weak_ptr (cell softmax, line 6)",
    ),
    "free_any_pointer": (
        "torch.UntypedStorage._free_weak_ref(ADDRESS)",
        f"{TORCH}.StorageBase._free_weak_ref (cell softmax, line 6)",
    ),
    "a_wrapper_on_an_address": (  # no storage: its offset is the address, and a kernel writes there
        "class W(torch.Tensor):\n    @classmethod\n    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):\n"
        "        with torch._C._ExcludeDispatchKeyGuard(torch._C.DispatchKeySet(torch._C.DispatchKey.Python)):\n"
        "            return func(*args, **(kwargs or {}))\n"
        "t = torch.Tensor._make_wrapper_subclass(W, (8,), strides=(1,), storage_offset=ADDRESS, dtype=torch.uint8)\n"
        "t.fill_(1)",
        f"{TORCH}.TensorBase._make_wrapper_subclass (cell softmax, line 11)",
    ),
    "storage_shrunk_under_its_tensor": (
        "t = torch.zeros(1 << 16)\nt.untyped_storage().resize_(8)\nt.fill_(1)",
        f"{TORCH}.StorageBase.resize_ (cell softmax, line 7)",
    ),
    "storage_shrunk_by_an_operator": (
        "t = torch.zeros(1 << 16)\ntorch.ops.inductor.resize_storage_bytes_(t, 8)\nt.fill_(1)",
        "memory.inductor::resize_storage_bytes_ (cell softmax, line 7)",
    ),
    "sparse_index_out_of_range": (
        "s = torch.sparse_coo_tensor(torch.tensor([[1 << 20]]), torch.tensor([1.0]), (4,), check_invariants=False)\n"
        "torch.zeros(4).add_(s)",
        "memory.sparse-tensor (cell softmax, line 6)",
    ),
    "sparse_indices_rewritten": (
        "s = torch.ones(4).to_sparse()\ns._indices().fill_(1 << 20)\ntorch.zeros(4).add_(s)",
        "memory.sparse-tensor (cell softmax, line 6)",
    ),
    "compressed_index_out_of_range": (
        "s = torch.sparse_csr_tensor(torch.tensor([0, 1]), torch.tensor([1 << 20]), torch.tensor([1.0]), (1, 4),\n"
        "                            check_invariants=False)\ntorch.zeros(1, 4).add_(s)",
        "memory.sparse-tensor (cell softmax, line 6)",  # made, before it is used
    ),
    # a compressed layout is made with no kernel of a sparse key run: each is refused as it is made
    "csr_made": (
        "s = torch.sparse_csr_tensor(torch.tensor([0, 1]), torch.tensor([0]), torch.tensor([1.0]), (1, 4))",
        "memory.sparse-tensor (cell softmax, line 6)",
    ),
    "csc_made_from_dense": (
        "s = torch.ones(2, 2).to_sparse_csc()",
        "memory.sparse-tensor (cell softmax, line 6)",
    ),
    "bsr_made_from_dense": (
        "s = torch.ones(2, 2).to_sparse(layout=torch.sparse_bsr, blocksize=(1, 1))",
        "memory.sparse-tensor (cell softmax, line 6)",
    ),
    "bsc_made": (
        "s = torch.sparse_bsc_tensor(torch.tensor([0, 1]), torch.tensor([0]), torch.ones(1, 1, 1), (1, 1))",
        "memory.sparse-tensor (cell softmax, line 6)",
    ),
    "compressed_made_unchecked": (
        "s = torch.ops.aten._sparse_compressed_tensor_unsafe(torch.tensor([0, 1]), torch.tensor([1 << 20]),\n"
        "    torch.tensor([1.0]), [1, 4], layout=torch.sparse_csr)\ntorch.zeros(1, 4).add_(s)",
        "memory.sparse-tensor (cell softmax, line 6)",
    ),
    "coo_made_unchecked": (
        "s = torch.ops.aten._sparse_coo_tensor_unsafe(torch.tensor([[1 << 20]]), torch.tensor([1.0]), [4])\n"
        "torch.zeros(4).add_(s)",
        "memory.sparse-tensor (cell softmax, line 6)",
    ),
    "view_past_its_storage": (
        "v = torch.ops.aten._reshape_alias(torch.zeros(4, dtype=torch.uint8), [2], [1 << 20])\nv.fill_(1)",
        "memory.aten::_reshape_alias (cell softmax, line 6)",
    ),
    "pooling_backward_indices": (
        "g, i = torch.ones(1, 1, 1, 1), torch.full((1, 1, 1, 1), 1 << 20)\n"
        "torch.ops.aten.max_pool2d_with_indices_backward(g, torch.zeros(1, 1, 2, 2), [2, 2], [2, 2], [0, 0], [1, 1],\n"
        "                                                False, i)",
        "memory.aten::max_pool2d_with_indices_backward (cell softmax, line 7)",
    ),
    "adaptive_pooling_backward_indices": (
        "i = torch.full((1, 1, 1, 1), 1 << 20)\n"
        "torch.ops.aten.adaptive_max_pool2d_backward.grad_input(torch.ones(1, 1, 1, 1), torch.zeros(1, 1, 2, 2), i,\n"
        "                                                       grad_input=torch.zeros(1, 1, 2, 2))",
        "memory.aten::adaptive_max_pool2d_backward (cell softmax, line 7)",
    ),
    "embedding_bag_backward_indices": (
        "torch.ops.aten._embedding_bag_dense_backward(torch.ones(1, 1), torch.tensor([1 << 20]), torch.tensor([0]),\n"
        "    torch.tensor([1]), torch.tensor([[0]]), 4, False, 0, None, -1)",
        "memory.aten::_embedding_bag_dense_backward (cell softmax, line 6)",
    ),
    "tensor_expressions": (
        "from torch._C import _te\nA = _te.BufHandle('A', [8], torch.uint8)",
        f"{TORCH}._te (cell softmax, line 7)",
    ),
    "stolen_tensor_handle": (
        "h = torch._C._tensor_impl_raw_handle(torch.zeros(1))\ntorch._C._aoti.alloc_tensor_by_stealing_from_void_ptr(h)",
        f"{TORCH}._aoti.alloc_tensor_by_stealing_from_void_ptr (cell softmax, line 7)",
    ),
    "proc_mem_as_bytes": (
        "f = open(b'/proc/self/mem', 'r+b')\nf.seek(ADDRESS)\nf.write(b'1')",
        "open:/proc/self/mem (cell softmax, line 6)",
    ),
    "proc_mem_through_a_link": (
        "import os, tempfile\nlink = os.path.join(tempfile.mkdtemp(), 'm')\nos.symlink('/proc/self/mem', link)\n"
        "os.pwrite(os.open(link, os.O_RDWR), b'1', ADDRESS)",
        "/m (cell softmax, line 9)",
    ),
    "proc_mem_relative": (
        "import os\nos.chdir('/proc/self')\nos.pwrite(os.open('mem', os.O_RDWR), b'1', ADDRESS)",
        "open-for-writing:mem (cell softmax, line 8)",
    ),
    # a folder's descriptor (``dir_fd``), which the open's audit event leaves out: Landlock refuses
    # the write, and the try is an escape
    "proc_mem_through_a_folders_descriptor": (
        "import os\nfd = os.open('/proc/self', os.O_RDONLY)\nos.pwrite(os.open('mem', os.O_RDWR, dir_fd=fd), b'1', ADDRESS)",
        "open-for-writing:mem (cell softmax, line 8)",
    ),
    "proc_thread_mem_through_a_folders_descriptor": (
        "import os\nfd = os.open('/proc', os.O_RDONLY)\nos.open(b'thread-self/mem', os.O_WRONLY, dir_fd=fd)",
        "open-for-writing:thread-self/mem (cell softmax, line 8)",
    ),
    "proc_task_mem_through_an_opener": (
        "import os, threading\nfd = os.open(f'/proc/self/task/{threading.get_native_id()}', os.O_RDONLY)\n"
        "open('mem', 'r+b', opener=lambda path, flags: os.open(path, flags, dir_fd=fd))",
        "open-for-writing:mem (cell softmax, line 8)",
    ),
}
# bytecode of one's own: an index past a frame's locals or constants reads and writes there
BYTECODE_ROUTES = {
    "code_replaced": (
        "f = lambda: 0\nf.__code__.replace(co_code=f.__code__.co_code)",
        "a code object made (cell softmax, line 7)",
    ),
    "code_unmarshalled": (
        "import marshal\nmarshal.loads(marshal.dumps((lambda: 0).__code__))",
        "marshal.loads (cell softmax, line 7)",
    ),
    "code_in_a_subinterpreter": (  # no audit hook there: marshal.loads, ctypes imported, unseen
        "import _xxsubinterpreters as interpreters\ninterpreters.run_string(interpreters.create(), 'import marshal')",
        "import:_xxsubinterpreters (cell softmax, line 6)",
    ),
    "a_test_module_of_cpython": (
        "import _testcapi\n_testcapi.pymem_buffer_overflow()",
        "import:_testcapi (cell softmax, line 6)",
    ),
    "code_from_a_pyc": (
        "import importlib.machinery, importlib.util, marshal, os, tempfile\n"
        "path = os.path.join(tempfile.mkdtemp(), 'planted.pyc')\n"
        "with open(path, 'wb') as f:\n"
        "    f.write(importlib.util.MAGIC_NUMBER + bytes(12) + marshal.dumps(compile('x = 1', 'p', 'exec')))\n"
        "importlib.machinery.SourcelessFileLoader('planted', path).load_module()",
        "marshal.loads",
    ),
}
ATTACKS = {
    **{f"numpy_{name}": route for name, route in NUMPY_ROUTES.items()},
    **{f"torch_{name}": ("", body, said) for name, (body, said) in TORCH_ROUTES.items()},
    **{f"bytecode_{name}": ("", body, said) for name, (body, said) in BYTECODE_ROUTES.items()},
}


def _verdict(tmp_path, source):
    path = solution_with(tmp_path, "03_attention", softmax=source)
    found = audit.audit(
        path,
        "03_attention",
        seed=7,
        blocks=ROOT / "solutions" / "03_attention" / "building_blocks.py",
        runner=forked,
    )
    return {v.grade_id: v for v in found}["test_softmax"]


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_a_route_to_raw_memory_is_a_disagreement(tmp_path, name):
    top, body, said = ATTACKS[name]
    verdict = _verdict(tmp_path, _softmax(top, body))
    assert not verdict.agrees and "leave Python's reach: " in verdict.reason, verdict.reason
    assert said in verdict.reason, verdict.reason


def test_a_view_within_its_storage_is_no_escape(tmp_path):
    body = "x = torch.ops.aten._reshape_alias(x.contiguous(), [x.numel()], [1]).reshape(x.shape)"
    verdict = _verdict(tmp_path, _softmax("", body))
    assert verdict.agrees, verdict.reason


def test_a_module_imported_after_the_record_is_armed_is_no_escape(tmp_path):
    body = (  # a module of its own, new to the child: compiled from its source, no bytecode read
        "import importlib, os, sys, tempfile\nfolder = tempfile.mkdtemp()\n"
        "with open(os.path.join(folder, 'fresh_module.py'), 'w') as f:\n    f.write('X = 1')\n"
        "sys.path.insert(0, folder)\nassert importlib.import_module('fresh_module').X == 1\nreturn x * 0"
    )
    verdict = _verdict(tmp_path, _softmax("", body.replace("return x * 0", "import tabnanny")))
    assert verdict.agrees, verdict.reason
    verdict = _verdict(tmp_path, _softmax("", body))  # the import did run: its wrong softmax is seen
    assert not verdict.agrees and "leave Python's reach" not in verdict.reason, verdict.reason


def _sealed_here(code: str) -> list[str]:
    """The last lines ``code`` prints in a fresh interpreter, after ``no_new_programs``."""
    import subprocess
    import sys

    setup = "import numpy, torch\nfrom course_grading.audit import hooks, memory\nassert hooks.no_new_programs()\n"
    out = subprocess.run([sys.executable, "-c", setup + code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.strip().splitlines()


def test_each_route_is_closed_on_this_interpreter():
    code = (
        "print([memory.no_proc_writes(), memory.seal_numpy(), memory.seal_torch(), memory.seal_ctypes()])\n"
        "events = []\nsys = __import__('sys')\nsys.addaudithook(lambda e, a: events.append(e))\n"
        "try:\n    torch.ctypes.c_int(1)\nexcept SystemError:\n    pass\nprint(events.count('ctypes.object'))\n"
        "import os\ntry:\n    os.open('mem', os.O_RDWR, dir_fd=os.open('/proc/self', os.O_RDONLY))\n"
        "except PermissionError:\n    print('refused')\n"  # Landlock, with no hook to name the try
    )
    assert _sealed_here(code)[-3:] == ["[True, True, True, True]", "1", "refused"]


def test_what_an_objects_lookup_raises_goes_through_the_numpy_seal():
    # as without the seal: its exception, and an alarm that ends a lookup that never returns
    code = (
        "import signal\n"
        "class Raises:\n    def __getattr__(self, name):\n"
        "        raise (KeyError if name in memory.INTERFACES else AttributeError)(name)\n"
        "for tried in (Raises(), [1.0, Raises()]):\n    try:\n        numpy.asarray(tried)\n"
        "    except KeyError as e:\n        print('raised', e)\n"
        "class Late(BaseException):\n    pass\n"
        "def late(*args):\n    raise Late\n"
        "class Runaway:\n    def __getattr__(self, name):\n        while name in memory.INTERFACES:\n"
        "            pass\n        raise AttributeError(name)\n"
        "signal.signal(signal.SIGALRM, late)\nsignal.setitimer(signal.ITIMER_REAL, 0.2)\n"
        "try:\n    numpy.asarray(Runaway())\nexcept Late:\n    print('ended by the alarm')\n"
    )
    unsealed = _sealed_here(code)
    assert unsealed[-3:] == ["raised '__array_struct__'"] * 2 + ["ended by the alarm"]
    assert _sealed_here("print(memory.seal_numpy())\n" + code)[-4:] == ["True", *unsealed[-3:]]


@pytest.mark.slow
@pytest.mark.skipif(not bubblewrap.available()[0], reason="needs bubblewrap")
def test_in_the_sandbox(tmp_path):
    blocks = ROOT / "solutions" / "03_attention" / "building_blocks.py"
    for name in ("numpy_instance_attribute", "torch_proc_mem_through_a_folders_descriptor"):
        top, body, said = ATTACKS[name]
        path = solution_with(tmp_path, "03_attention", softmax=_softmax(top, body))
        found = {v.grade_id: v for v in audit.audit(path, "03_attention", seed=7, blocks=blocks)}
        assert said in found["test_softmax"].reason, found["test_softmax"].reason
