"""popxl-addons user program: trees, modules, aux, var_grad, call_module, factories."""
import collections.abc
import importlib

import numpy as np
import popxl
import popxl.ops as ops
import popxl_addons as addons
from checks import check, done, raises
from popxl_addons import NamedTensors
from popxl_addons.dot_tree import DotTree, sanitise
from popxl_addons.utils import OrderedDict, WeightsDict, duplicate_items, suffix_graph_name

# 1 top level
for n in ["layers", "optimizers"]:
    check("1 module attr " + n, hasattr(addons, n))
for n in ["NamedRemoteBuffers", "tensor_parallel_output", "DotTree",
          "reduce_replica_sharded_graph"]:
    check("1 not top " + n, not hasattr(addons, n))
# 2 GIT_COMMIT
check("2", addons.GIT_COMMIT is None or len(addons.GIT_COMMIT) == 7)
# 3/4 DotTree insert
t = DotTree()
t.insert("a.b", 1)
raises("4 insert existing first segment", ValueError, lambda: t.insert("a.c", 2))
t.insert("a.c", 2, overwrite=True)
check("4 merge", t.to_dict() == {"a.b": 1, "a.c": 2})
t.insert(3, "x")
check("3 int key string", "3" in t.keys())
raises("3 negative insert", Exception, lambda: t.insert(-1, "y"))
raises("3 bad segment", Exception, lambda: t.insert("a-b", 1))
# 5 lookup
u = DotTree.from_dict({"0": "z", "2": "two", "10": "ten", "x.y": 5})
check("5 attr", u.x.y == 5 and u["x"]["y"] == 5 and u.get("x.y") == 5)
check("5 int", u[0] == "z" and u["0"] == "z")
check("5 neg", u[-1] == "ten")
raises("5 missing []", KeyError, lambda: u["nope"])
raises("5 missing get", KeyError, lambda: u.get("nope"))
raises("5 missing attr", AttributeError, lambda: u.nope)
raises("3 get through leaf", KeyError, lambda: u.get("x.y.z"))
raises("3 neg no numeric", ValueError, lambda: DotTree(a=1)[-1])
# 6
raises("6 len", TypeError, lambda: len(u))
check("6 truthy empty", bool(DotTree()))
check("6 in", "x.y" in u)
v = DotTree.from_dict({"0": 1, "1": 2})
got = []
try:
    for item in v:
        got.append(item)
except KeyError:
    got.append("KeyError")
check("6 iter", got == [1, 2, "KeyError"])
w = DotTree(a=1)
w.b = 2
check("6 attr not in to_dict", w.to_dict() == {"a": 1})
# 7
check("7 unpack sorted", list(u.unpack()[0]) == sorted(u.to_dict()))
check("7 to_dict order", list(DotTree.from_dict({"b": 1, "a": 2}).to_dict()) == ["b", "a"])
check("3 len", u.len() == 4 and u.len_flat() == 4)
check("3 repr", repr(DotTree(a=1)) == "DotTree({'a': 1})")
check("3 empty unpack", tuple(map(list, DotTree().unpack())) == ([], []))
# 9 copy shares leaves
leaf = [1]
c = DotTree(a=leaf).copy()
check("9 copy shares", c.a is leaf)
# filter_keys dup
raises("3 filter dup", ValueError, lambda: u.filter_keys(["x.y", "x.y"]))
check("3 filter", u.filter_keys(["x.y"]).to_dict() == {"x.y": 5})
check("3 pop dotted", DotTree.from_dict({"a.b": 1, "a.c": 2}).pop("a.b") == 1)
m = DotTree(a=1, b=2).map(lambda x: x * 10)
check("3 map", m.to_dict() == {"a": 10, "b": 20})
check("3 pack", DotTree.pack(["a.b", "c"], [1, 2]).to_dict() == {"a.b": 1, "c": 2})
check("3 sanitise", sanitise("a.b/1") == "a_b_1")

class Lin(addons.Module):
    def __init__(self, out):
        super().__init__()
        self.out = out
    def build(self, x):
        w = self.add_variable_input("weight", lambda: np.ones((x.shape[-1], self.out), np.float32))
        b = self.add_variable_input("bias", lambda: np.zeros((self.out,), np.float32))
        return x @ w + b

class Net(addons.Module):
    def __init__(self):
        super().__init__()
        self.ffn = Lin(3)
        self.zfc = Lin(2)
    def build(self, x):
        return self.zfc(self.ffn(x))

ir = popxl.Ir()
with ir.main_graph:
    facts, g = Net().create_graph(popxl.TensorSpec((1, 4), popxl.float32))
    check("15 names", g.args.keys_flat() == ["ffn.weight", "ffn.bias", "zfc.weight", "zfc.bias"])
    v = facts.init()
    # 18 alphabetical creation order
    names = [t.name for t in v.tensors]
    check("8 tensors sorted by name", names == sorted(names))
    check("8/18 named_tensors order (init alphabetical)",
          list(v.named_tensors) == ["ffn.bias", "ffn.weight", "zfc.bias", "zfc.weight"])
    # 17 bind ignores extra
    extra = NamedTensors.from_dict({**v.to_dict(), "unused": v.ffn.weight})
    bound = g.bind(extra)
    x = popxl.constant(np.ones((1, 4), np.float32))
    (y,) = bound.call(x)
    d2h = popxl.d2h_stream(y.shape, y.dtype, "y")
    ops.host_store(d2h, y)
    bwd = g.autodiff()
    raises("17 second autodiff", Exception, lambda: g.autodiff())
    # 16 call_module
    class Outer(addons.Module):
        def build(self, x):
            return self.call_module(Lin(2), name="inner")(x)[0]
    f2, g2 = Outer().create_graph(popxl.TensorSpec((1, 4), popxl.float32))
    check("16 call_module names", g2.args.keys_flat() == ["inner.weight", "inner.bias"])
with popxl.Session(ir, "ipu_model") as s:
    out = s.run()
check("run value", np.allclose(out[d2h], 12.0))
# 20 WeightsDict
check("20 mutable mapping", isinstance(WeightsDict(), collections.abc.MutableMapping)
      and not isinstance(WeightsDict(), dict))
od = OrderedDict(a=1, b=2)
check("5u idx", od.idx(1) == 2)
check("5u suffix", suffix_graph_name("fwd_subgraph(3)", "grad") == "fwd_grad")
check("5u dup", list(duplicate_items([1, 2, 1, 3, 2])) == [1, 2])
# 2: every module path of the library, the native ops' sub-packages and their modules
NATIVE = {"cross_entropy_sharded_loss": ["cross_entropy_sharded_loss"],
          "cross_entropy_sharded_wr_loss": ["cross_entropy_sharded_wr_loss"],
          "fp8_mse_scale": ["fp8_mse_scale"], "grad_reduce_square_add": ["grad_reduce_square_add"],
          "group_quantize_decompress": ["group_quantize_decompress",
                                        "group_quantize_decompress_numpy",
                                        "group_quantize_compress_numpy"],
          "layer_norm_distributed": ["layer_norm_distributed"], "linear_layout": ["linear_layout"],
          "replicated_all_reduce_TP": ["replicated_all_reduce",
                                       "replicated_all_reduce_identical_inputs",
                                       "replicated_all_reduce_identical_grad_inputs"],
          "replicated_strided_collectives": ["replicated_all_reduce_strided",
                                             "replicated_all_gather_strided",
                                             "replicated_reduce_scatter_strided"],
          "rotary_pos_embed": ["rotary_pos_embed", "trig_tables", "trig_table_constants"],
          "static_sparse_ops": ["dense_const_sparse_matmul", "random_sparse"]}
for op, names in NATIVE.items():
    package = importlib.import_module(f"popxl_addons.ops.{op}")
    module = importlib.import_module(f"popxl_addons.ops.{op}.{op}")
    for name in names:
        check(f"2 {op}.{name}", getattr(module, name) is getattr(package, name))
        check(f"2 {op}.{name} callable", callable(getattr(package, name)))
for path in ("module", "graph", "graph_cache", "dot_tree", "named_tensors", "variable_factory",
             "named_replica_grouping", "remote", "rts", "streams", "seed_variable",
             "route_tensor", "task_session", "testing_utils", "patterns", "performance_utils",
             "utils", "array_munging", "layers.linear", "layers.layer_norm", "layers.embedding",
             "layers.conv", "layers.layer_norm_distributed", "layers.linear_fp8",
             "layers.linear_gq", "optimizers.adam", "ops.cross_entropy", "ops.streams",
             "transforms.autodiff", "transforms.batch_serialisation", "transforms.pipelining",
             "transforms.recomputation", "transforms.repeat_graph", "transforms.use_fc_pass"):
    importlib.import_module(f"popxl_addons.{path}")
check("2 functions not modules", callable(addons.transforms.autodiff)
      and callable(addons.ops.cross_entropy) and callable(addons.ops.fp8_amax_scale))
done()
