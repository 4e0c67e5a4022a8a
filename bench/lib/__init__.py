"""What the benchmarks share, written once: progress lines and JSON figures, the databases and server fixtures they
start, the simulated and measured agents, the noisy tenant's flood, the MPS daemon, and the parts a benchmark runs
in pieces (the workload's serving hop, the MPS fleet and profile parts, the autoscaling fronts' plot). A benchmark
(``python -m bench.NAME``) imports only this library and the product, never another benchmark."""
