"""The names of popxl-addons 3.4 outside the 3.1 signature table
(tests/data/popxl_addons_surface.json), from the behaviour reference, with what xlgraph does
and the tests that show it. ``generate_addons_support.py`` resolves each path under
``xlgraph.addons`` to give its status on docs/addons-support.md."""

from __future__ import annotations

T = "tests/addons/"

# (path under popxl_addons, what xlgraph does, test file)
BEYOND_TABLE: list[tuple[str, str, str]] = [
    # top-level re-exports of 3.4 (the table lists only those of 3.1)
    *[(name, "top-level re-export", T + "test_top_level.py") for name in (
        "host_load", "host_store", "cross_entropy", "cross_entropy_with_grad", "fp8_amax_scale",
        "set_available_memory_proportion_by_ipu", "set_graph_available_memory_proportion_by_ipu",
        "batch_serialise", "batch_serialise_fwd_and_grad", "batch_serial_buffer", "RemoteHandle",
        "disable_fc_pass", "enable_fc_pass", "OrderedDict", "WeightsDict", "write_variables_pb",
        "is_subgraph", "total_FLOPs", "evaluate_ir_FLOPs", "evaluate_FLOPs", "print_FLOPs",
        "format_flops_scientific", "print_tensor", "print_text", "shard", "unshard_arrays",
        "unshard", "repeat", "repeat_axis", "split2D", "shard2D", "unshard2D", "repeat_shard",
        "tensor_parallel_input", "pad_axis", "squeeze_safe", "handle_negative_axis")],
    ("GIT_COMMIT", "the working directory's repository, read from its files; None outside one",
     T + "test_top_level.py"),
    # module
    ("module.Module.aux", "written in build, read in build_grad (tensors become grad inputs)",
     T + "test_module.py"),
    ("module.Module.var_grad", "variable gradients set by build_grad", T + "test_module.py"),
    ("module.Module.build_grad", "custom gradient; inline calls follow grad_inlining_error",
     T + "test_module.py"),
    ("module.Module.create_grad_graph", "aux tensors become forward outputs; input and output "
     "order as the library", T + "test_module.py"),
    ("module.Module.create_grad_graph_info", "GradGraphInfo of a hand-built gradient graph: "
     "inputs in fwd_tensors take forward values, the others output gradients",
     T + "test_module.py"),
    ("module.Module.create_graph", "graphs of build_grad modules are not recursively "
     "autodiff-able: autodiff of a caller needs their GradGraphInfo", T + "test_module.py"),
    *[(f"ops.{op}.{op}", "nested module path of the sub-package, as the library",
       T + "test_programs.py") for op in (
        "cross_entropy_sharded_loss", "cross_entropy_sharded_wr_loss", "fp8_mse_scale",
        "grad_reduce_square_add", "group_quantize_decompress", "layer_norm_distributed",
        "linear_layout", "replicated_all_reduce_TP", "replicated_strided_collectives",
        "rotary_pos_embed", "static_sparse_ops")],
    ("module.Module.call_module", "creates, registers the gradient, calls; original outputs",
     T + "test_module.py"),
    ("module.Module.implements_grad_graph", "whether build_grad is overridden",
     T + "test_module.py"),
    ("graph.GraphWithNamedArgs.autodiff", "method auto/build_grad/autodiff; a second call "
     "needs force=True", T + "test_module.py"),
    ("streams.InputStreams.from_streams", "keyed by tensor id; streams index by int and slice "
     "and iterate streams", T + "test_dot_tree.py"),
    # modules outside the table
    ("testing_utils.run_module", "runs on the simulator (3.4 needs an IPU)",
     T + "test_performance_utils.py"),
    ("testing_utils.TensorInput", "float64 needs an explicit dtype",
     T + "test_performance_utils.py"),
    ("testing_utils.ops_of_type", "counts op views by class or PopART type name",
     T + "test_performance_utils.py"),
    ("patterns.apply_pre_alias_patterns", "accepted; no effect on the simulator (its ops need "
     "no identity rewrite)", T + "test_transforms.py"),
    ("performance_utils.total_FLOPs", "the library's counting rules", T +
     "test_performance_utils.py"),
    ("transforms.use_fc_pass.disable_fc_pass", "recorded on matmul ops; no effect on the "
     "simulator", T + "test_transforms.py"),
    ("transforms.available_memory_proportion.set_available_memory_proportion_by_ipu",
     "recorded as a planning hint (ipu_model)", T + "test_transforms.py"),
    ("transforms.pipelining.Pipeline.stash_and_restore_activations", "serialised stages: "
     "the forward call's activations", T + "test_transforms.py"),
    ("utils.WeightsDict", "checks dtype and host shape", T + "test_utils.py"),
    ("utils.overrides", "", T + "test_utils.py"),
    ("utils.duplicate_items", "", T + "test_utils.py"),
    ("array_munging.tensor_parallel_output", "", T + "test_array_munging.py"),
    ("remote.load_remote", "in place, by name", T + "test_remote_rts.py"),
    ("remote.store_remote", "in place, by name", T + "test_remote_rts.py"),
    ("task_session.initialise_memmap_dir_from_checkpoint", "raw .npy copies",
     T + "test_task_session.py"),
    ("named_tensors.print_named_tensors", "returns the printed tensors", T + "test_dot_tree.py"),
    # layers
    ("layers.GroupNorm", "group norm of (N, C, *)", T + "test_layers.py"),
    ("layers.layer_norm_distributed.LayerNormDistributed", "over the hidden shards of a "
     "replica group", T + "test_layers.py"),
    ("layers.linear_fp8.LinearFP8", "fp8 forward and build_grad", T + "test_layers.py"),
    ("layers.linear_gq.LinearGQ", "4-bit group-quantised weight", T + "test_layers.py"),
    ("layers.Linear.torch_mapping", "WeightsDict from a torch layer", T + "test_layers.py"),
]
