"""The BLAS libraries' thread counts as tests compare them."""

from __future__ import annotations


def blas_thread_counts() -> list[int]:
    """Each loaded BLAS library's thread count, leaving out those built without threads (a
    sequential MKL, which xlgraph loads for its large products, always reports one)."""
    import threadpoolctl

    return [lib["num_threads"] for lib in threadpoolctl.threadpool_info()
            if lib["user_api"] == "blas" and lib.get("threading_layer") != "sequential"]
