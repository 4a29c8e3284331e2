"""Benchmarks: the store benchmark (``rmq-lab bench store``) and the fio device baselines it is read against."""
