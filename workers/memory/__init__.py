"""Device memory: device and dtype resolution (device.py), the memory budget that makes CPU runs account like CUDA
(budget.py), the profiling forward at max shapes (profiling.py), and how many KV blocks fit (capacity.py)."""
