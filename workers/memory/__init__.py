"""Device memory: device and dtype resolution (`device`), the memory budget that makes CPU runs account like CUDA
(`budget`), the profiling forward at max shapes (`profiling`), and how many KV blocks fit (`capacity`)."""
